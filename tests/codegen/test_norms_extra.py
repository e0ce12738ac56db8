"""Instance norm and group norm fused into one reduction kernel with a pointwise producer and
consumer: scripted == eager on the CPU, and NVRTC compiles the CUDA source of every group
(``run_case`` from ``test_reductions.py``).

Covered: ``aten::instance_norm`` with input statistics (spatial dims reduced per (N, C)) and
with running statistics (a per-channel affine, no reduction); ``aten::group_norm`` with
``num_groups=1`` (every dim but N reduced); other constant group counts are an instance norm of
a grouped view (``passes/decompose.py``). Other cases stay unfused with a logged
reason, and the tests check that they still give eager's answer, also after C changes.
"""
from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.config import config
from graphfuser.executor.compiled_reduction import ReductionGroup
from graphfuser.ops import ROWS, fusible
from graphfuser.ops.axes import analyze

from helpers import FT, fusion_groups, on_cuda, parse
from graphfuser.ir.clone import clone_graph
from test_reductions import FLOATS, TOL, make, nvrtc_compile, run_case

# (dtype, shape, layout): every float dtype on a ragged 4-D shape, then ragged rows, size-1
# spatial dims, a 5-D input and channels-last inputs.
CASES = [(dt, (2, 6, 7, 5), "dense") for dt in FLOATS] + [
    (torch.float32, (3, 4, 33), "dense"),
    (torch.bfloat16, (3, 4, 33), "dense"),
    (torch.float32, (2, 6, 1, 5), "dense"),
    (torch.float16, (2, 3, 4, 1, 5), "dense"),
    (torch.float32, (2, 6, 7, 5), "channels_last"),
    (torch.bfloat16, (2, 6, 7, 5), "channels_last"),
    (torch.float64, (3, 5, 1, 9), "channels_last"),
]
CASE_IDS = [f"{str(dt).replace('torch.', '')}-{'x'.join(map(str, s))}-{lay}" for dt, s, lay in CASES]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _input(dtype, shape, layout, low=None) -> torch.Tensor:
    x = make(*shape, dtype=dtype, low=low)
    if layout == "channels_last":
        x = x.to(memory_format=torch.channels_last)
        assert not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last)
    return x


def _params(dtype, c: int) -> tuple[torch.Tensor, torch.Tensor]:
    return make(c, dtype=dtype), make(c, dtype=dtype)


def _chain(sf, norm: str, producer: bool = True) -> None:
    """The one fusion group of ``sf`` holds the producer (x * 2 + 1), the norm and the consumer."""
    (group,) = fusion_groups(sf._optimized)
    kinds = [n.kind for n in group.subgraph.nodes() if n.kind.startswith("aten::")]
    assert kinds == ["aten::mul", "aten::add"] * producer + [norm, "aten::relu"], kinds


def _norm_kinds(sf) -> list[str]:
    """Norm node kinds inside the fusion groups of ``sf``."""
    return [n.kind for g in fusion_groups(sf._optimized) for n in g.subgraph.nodes()
            if n.kind in ("aten::instance_norm", "aten::group_norm")]


# -- instance norm with input statistics -----------------------------------------------------
def inorm_affine(x, w, b):
    return torch.instance_norm(x * 2 + 1, w, b, None, None, True, 0.1, 1e-5, False).relu()


def inorm_plain(x):
    return torch.instance_norm(x * 2 + 1, None, None, None, None, True, 0.1, 1e-3, False).relu()


@pytest.mark.parametrize("dtype,shape,layout", CASES, ids=CASE_IDS)
def test_instance_norm_input_stats(dtype, shape, layout):
    x = _input(dtype, shape, layout)
    sf = run_case(inorm_affine, x, *_params(dtype, shape[1]))
    _chain(sf, "aten::instance_norm")
    sf = run_case(inorm_plain, x)
    _chain(sf, "aten::instance_norm")


# -- instance norm with running statistics (no reduction) ------------------------------------
def inorm_running_affine(x, rm, rv, w, b):
    return F.instance_norm(x * 2 + 1, rm, rv, w, b, False, 0.1, 1e-5).relu()


def inorm_running_plain(x, rm, rv):
    return F.instance_norm(x * 2 + 1, rm, rv, None, None, False, 0.1, 1e-5).relu()


@pytest.mark.parametrize("dtype,shape,layout", CASES, ids=CASE_IDS)
def test_instance_norm_running_stats(dtype, shape, layout):
    x = _input(dtype, shape, layout)
    c = shape[1]
    rm, rv = make(c, dtype=dtype), make(c, dtype=dtype, low=0.5)
    sf = run_case(inorm_running_affine, x, rm, rv, *_params(dtype, c))
    _chain(sf, "aten::instance_norm")
    sf = run_case(inorm_running_plain, x, rm, rv)
    _chain(sf, "aten::instance_norm")


# -- group norm, one group ---------------------------------------------------------------------
def gnorm_affine(x, w, b):
    return torch.group_norm(x * 2 + 1, 1, w, b, 1e-5, False).relu()


def gnorm_plain(x):
    return torch.group_norm(x * 2 + 1, 1, None, None, 1e-3, False).relu()


@pytest.mark.parametrize("dtype,shape,layout", CASES + [(torch.float32, (4, 6, 1, 1), "dense"),
                                                        (torch.float16, (5, 7), "dense")],
                         ids=CASE_IDS + ["float32-4x6x1x1-dense", "float16-5x7-dense"])
def test_group_norm_one_group(dtype, shape, layout):
    x = _input(dtype, shape, layout)
    sf = run_case(gnorm_affine, x, *_params(dtype, shape[1]))
    _chain(sf, "aten::group_norm")
    sf = run_case(gnorm_plain, x)
    _chain(sf, "aten::group_norm")


# -- accumulation: fp32 for half types, two-pass variance ---------------------------------------
def both_norms(x, w, b):
    # x * 2 is exact in every float type, so eager's rounding of the intermediate changes nothing
    return (torch.instance_norm(x * 2, w, b, None, None, True, 0.1, 1e-5, False).relu(),
            torch.group_norm(x * 2, 1, w, b, 1e-5, False).relu())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_inputs_accumulate_in_fp32(dtype):
    """Rows of 4096 (instance norm) and 16384 (group norm) elements around 100: their sums pass
    fp16's largest finite value (65504), so only an fp32 accumulator gets them right. The
    reference is the same function in fp64 (eager's CPU instance norm in fp16 is off by ~0.03
    here, more than the fused kernel)."""
    x, (w, b) = _input(dtype, (2, 4, 64, 64), "dense", low=50), _params(dtype, 4)
    sf = graphfuser.script(both_norms)
    with config.override(disable=["fallback"]):
        for _ in range(4):
            got = sf(x, w, b)
    for g, r in zip(got, both_norms(x.double(), w.double(), b.double())):
        assert g.dtype == dtype
        torch.testing.assert_close(g.double(), r, **TOL[dtype])
    groups = fusion_groups(sf._optimized)
    assert sorted(_norm_kinds(sf)) == ["aten::group_norm", "aten::instance_norm"] and len(groups) == 2
    for g in groups:
        cg = ReductionGroup(on_cuda(clone_graph(g.subgraph)), "cuda", torch.device("cuda", 0), "k")
        assert [r.dtype for r in cg.kernel.reductions()] == [torch.float32] * 2   # sum (x - k), sum (x - k)^2
    assert nvrtc_compile(sf) == 2


def test_variance_is_two_pass_and_biased():
    """Values around 2000 with spread ~1: a one-pass E[x^2] - E[x]^2 in fp32 loses the variance
    to cancellation (NaN or errors of order 1); the biased variance (divided by N, not N - 1) is
    what eager uses."""
    x = _input(torch.float32, (2, 3, 40, 40), "dense", low=1000)
    run_case(both_norms, x, *_params(torch.float32, 3), groups=2, tol=dict(rtol=5e-3, atol=5e-3))
    small = _input(torch.float64, (2, 3, 2, 2), "dense")        # N - 1 vs N differs by 25% here
    run_case(both_norms, small, *_params(torch.float64, 3), groups=2)


# -- the F.* wrappers -------------------------------------------------------------------------
def f_inorm(x, w, b):
    return F.instance_norm(x, None, None, w, b, True, 0.1, 1e-5).relu()


def f_inorm_producer(x, w, b):
    return F.instance_norm(x * 2 + 1, None, None, w, b, True, 0.1, 1e-5).relu()


def f_gnorm(x, w, b):
    return F.group_norm(x, 1, w, b, 1e-5).relu()


def test_functional_instance_norm_fuses_with_its_consumer():
    x = _input(torch.float32, (2, 6, 7, 5), "dense")
    sf = run_case(f_inorm, x, *_params(torch.float32, 6))
    _chain(sf, "aten::instance_norm", producer=False)


def test_functional_instance_norm_fuses_with_its_producer():
    # F.instance_norm's size check reads the producer's shape from the producer's input (the
    # partition moves shape reads to their source), so the producer joins the norm's group
    x = _input(torch.float32, (2, 6, 7, 5), "dense")
    sf = run_case(f_inorm_producer, x, *_params(torch.float32, 6), cuda=False)
    _chain(sf, "aten::instance_norm")


def test_functional_group_norm():
    x = _input(torch.float32, (2, 6, 7, 5), "dense")
    sf = run_case(f_gnorm, x, *_params(torch.float32, 6), cuda=False)
    _chain(sf, "aten::group_norm", producer=False)


# -- what stays unfused, with its reason --------------------------------------------------------
def gnorm3(x, w, b):
    return torch.group_norm(x * 2 + 1, 3, w, b, 1e-5, False).relu()


def gnorm4(x, w, b):
    return torch.group_norm(x * 2 + 1, 4, w, b, 1e-5, False).relu()


def inorm_updates_stats(x, rm, rv):
    return torch.instance_norm(x * 2 + 1, None, None, rm, rv, True, 0.1, 1e-5, False).relu()


def _unfused(fn, *inputs) -> graphfuser.ScriptedFunction:
    """Script ``fn``, run it past profiling (fallback raising), compare with eager, and check
    that no fusion group holds a norm."""
    sf = graphfuser.script(fn)
    with config.override(disable=["fallback"]):
        for _ in range(4):
            torch.testing.assert_close(sf(*inputs), fn(*inputs), **TOL[inputs[0].dtype])
    assert _norm_kinds(sf) == [], str(sf._optimized)
    assert len(fusion_groups(sf._optimized)) == 1         # the producer x * 2 + 1
    return sf


def test_stat_updates_stay_eager_without_the_split(caplog):
    """The running-stats update of an instance norm in training is split off by the
    batch_norm_training pass (tests/autodiff/test_instance_norm_training.py); with that pass
    disabled the node updates them in place and stays eager."""
    caplog.set_level(logging.INFO, logger="graphfuser")
    x = make(2, 6, 7, 5)
    rm, rv = make(6), make(6, low=0.5)
    sf = graphfuser.script(inorm_updates_stats)
    with config.override(log_level=">partition", disable=["fallback", "batch_norm_training"]):
        for _ in range(4):
            torch.testing.assert_close(sf(x, rm, rv), inorm_updates_stats(x, rm, rv), **TOL[x.dtype])
    assert _norm_kinds(sf) == [], str(sf._optimized)
    assert "instance_norm with input stats updates the running stats in place; not fused" in caplog.text


def _grouped(fn, *inputs) -> graphfuser.ScriptedFunction:
    """Script ``fn`` (a group_norm with num_groups > 1), run it past profiling with the fallback
    raising, compare with eager: it runs as an instance norm of the grouped view, fused."""
    sf = graphfuser.script(fn)
    with config.override(disable=["fallback"]):
        for _ in range(4):
            torch.testing.assert_close(sf(*inputs), fn(*inputs), **TOL[inputs[0].dtype])
    assert _norm_kinds(sf) == ["aten::instance_norm"], str(sf._optimized)
    return sf


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("layout", ["dense", "channels_last"])
def test_other_group_counts_fuse_as_grouped_instance_norm(dtype, layout):
    """num_groups > 1 decomposes (passes/decompose.py): x viewed [N, G, C/G, H*W], an instance norm
    and the affine in that view, in one kernel; the output keeps x's dtype and shape."""
    x = _input(dtype, (2, 6, 7, 5), layout)
    sf = _grouped(gnorm3, x, *_params(dtype, 6))
    out = sf(x, *_params(dtype, 6))
    assert out.dtype == dtype and out.shape == x.shape
    assert nvrtc_compile(sf) >= 1


def test_num_groups_equal_to_c_stays_right_when_c_changes():
    """Scripted with C == num_groups, then called with C = 2 * num_groups: the grouped view splits
    whatever C is, so the fused kernel stays right (a kernel that computed instance norm over C
    would not be)."""
    sf = _grouped(gnorm4, make(2, 4, 3, 5), *_params(torch.float32, 4))
    x, (w, b) = make(2, 8, 3, 5), _params(torch.float32, 8)
    with config.override(disable=["fallback"]):
        got = sf(x, w, b)
    torch.testing.assert_close(got, gnorm4(x, w, b), **TOL[torch.float32])
    wrong = torch.instance_norm(x * 2 + 1, w, b, None, None, True, 0.1, 1e-5, False).relu()
    assert not torch.allclose(got, wrong, atol=1e-2)


# -- rows on graph text: reasons and dim plans -------------------------------------------------
X4, VEC = FT(2, 6, 7, 5), FT(6)

NORM_GRAPH = """
graph(%x : {x}, %w : {v}, %b : {v}, %rm : {v}):
  %none : NoneType = prim::Constant()
  %t : bool = prim::Constant[value=1]()
  %f : bool = prim::Constant[value=0]()
  %g : int = prim::Constant[value={g}]()
  %mom : float = prim::Constant[value=0.1]()
  %eps : float = prim::Constant[value=1e-05]()
  %y : {x} = {call}
  return (%y)
"""


def _norm_node(call: str, g: int = 1, x: str = X4):
    graph = parse(NORM_GRAPH.format(x=x, v=VEC, g=g, call=call))
    return next(n for n in graph.nodes() if n.kind.endswith("_norm")), graph


def test_dim_plans_and_reasons():
    gn = "aten::group_norm(%x, %g, %w, %b, %eps, %t)"
    node, graph = _norm_node(gn)
    assert fusible(node) is None
    axes = analyze([node])
    x_axes, w_axes = axes.of[graph.inputs[0]], axes.of[graph.inputs[1]]
    assert axes.reduced == frozenset(x_axes[1:])              # C and every spatial dim
    assert w_axes == (x_axes[1],) and axes.of[node.outputs[0]] == x_axes
    assert "num_groups=3 is not fused" in fusible(_norm_node(gn, g=3)[0])
    assert "num_groups == C == 6 is not fused" in fusible(_norm_node(gn, g=6)[0])
    assert "rank >= 2" in fusible(_norm_node("aten::group_norm(%x, %g, %none, %none, %eps, %t)",
                                             x=FT(6))[0])

    node, graph = _norm_node("aten::instance_norm(%x, %w, %b, %none, %none, %t, %mom, %eps, %t)")
    assert fusible(node) is None
    axes = analyze([node])
    x_axes = axes.of[graph.inputs[0]]
    assert axes.reduced == frozenset(x_axes[2:]) and axes.of[graph.inputs[2]] == (x_axes[1],)
    node, _ = _norm_node("aten::instance_norm(%x, %w, %b, %rm, %rm, %f, %mom, %eps, %t)")
    assert fusible(node) is None and analyze([node]).reduced == frozenset()
    node, _ = _norm_node("aten::instance_norm(%x, %none, %none, %rm, %none, %f, %mom, %eps, %t)")
    assert fusible(node) == "instance_norm without input stats needs running_mean and running_var tensors"
    node, _ = _norm_node("aten::instance_norm(%x, %none, %none, %rm, %none, %t, %mom, %eps, %t)")
    assert "updates the running stats in place" in fusible(node)


# -- the op table ------------------------------------------------------------------------------
def test_rows_are_listed(capsys):
    from graphfuser.__main__ import main

    assert ROWS["group_norm"].aten == ("aten::group_norm",)
    assert ROWS["instance_norm"].aten == ("aten::instance_norm",)
    assert main(["ops", "--kind", "normalization", "--width", "250"]) == 0
    out = capsys.readouterr().out
    for needle in ("group_norm", "aten::group_norm", "instance_norm", "aten::instance_norm",
                   "(input, num_groups, weight=None, bias=None, eps=1e-05, cudnn_enabled=True)"):
        assert needle in out, needle
