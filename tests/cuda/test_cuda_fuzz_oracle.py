"""The fuzz oracle on CUDA: eager's own CUDA disagreements with its CPU kernels that graphfuser
answers as the CPU does are named deviations, not findings."""
import pytest
import torch

from graphfuser.fuzz.oracle import run_case
from tests.fuzz.oracle_cases import _case

pytestmark = pytest.mark.cuda


def test_rms_norm_weight_gradient_of_an_inf_row():
    """CUDA fuzz graph 274 of seed 36417: an rms_norm of a row holding an inf; eager's fused CUDA
    kernel makes the row and the weight's gradient NaN, graphfuser gives 0 (-0), as eager's CPU
    kernel does: the ``rms_norm_inf_row`` deviation, values and gradients."""
    x = {"name": "x0", "kind": "tensor", "dtype": "float32", "shape": [3], "layout": "dense", "fill": "nan_inf",
         "requires_grad": True}
    w = {"name": "x1", "kind": "tensor", "dtype": "float32", "shape": [3], "layout": "dense", "fill": "huge_mean",
         "requires_grad": True}
    case = _case("    return F.rms_norm(x0, [3], x1, 1e-05)\n", [x, w], [[0, True]] * 7)
    case["ops"] = ["rms_norm"]
    res = run_case(case, "cuda", "/tmp", "rms_inf_grad")
    assert not [f for f in res["findings"] if f["category"] in ("wrong_value", "wrong_grad")], res["findings"]
    assert any(d["deviation"] == "rms_norm_inf_row" for d in res["deviations"]), res["deviations"]


def test_float64_hardsigmoid_is_eagers_cpu_answer():
    x = {"name": "x0", "kind": "tensor", "dtype": "float64", "shape": [4099], "layout": "expanded", "fill": "ints",
         "requires_grad": False}
    case = _case("    return torch.frac(F.hardsigmoid(x0) * 2049.5).float() * 2\n", [x], [[1, False]] * 7)
    case["ops"] = ["hardsigmoid", "frac"]
    res = run_case(case, "cuda", "/tmp", "hardsigmoid64")
    assert not [f for f in res["findings"] if f["category"] == "wrong_value"], res["findings"]
