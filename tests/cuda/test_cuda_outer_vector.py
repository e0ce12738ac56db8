"""On the GPU, outer reductions whose threads hold V adjacent columns (the vector variants): the
bias gradient of bias + GELU, RMSNorm's weight gradient and layer norm's parameter gradients
against eager over dtypes and odd sizes (one row, 7 rows, column counts the vector width does
not divide, which run the scalar variants, misaligned views, an empty batch), and the launcher's
choice of the vector variant where the sizes allow it."""

import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.config import config
from graphfuser.executor.compiled_reduction import ReductionGroup, build_reduction_launcher
from graphfuser.tools import bench_train as bt
from helpers import parse

pytestmark = pytest.mark.cuda

TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.bfloat16: dict(rtol=5e-2, atol=5e-2),
       torch.float16: dict(rtol=1e-2, atol=1e-2)}
SIZES = [(1, 256), (7, 4096), (7, 4097), (4099, 64), (16384, 1024), (3, 8), (513, 72)]


def _grads(fn, params, args, grad, steps=4):
    with config.override(disable=["fallback"]):
        for _ in range(steps):
            for t in list(args) + params:
                t.grad = None
            fn(*args).backward(grad)
    return [t.grad.clone() for t in list(args) + params if t.requires_grad]


def _close(got, ref, dtype, scale=1.0):
    for g, r in zip(got, ref):
        tol = TOL[dtype]
        torch.testing.assert_close(g.float(), r.float(), rtol=tol["rtol"], atol=tol["atol"] * scale)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rows, cols", SIZES)
def test_bias_gelu_backward(dtype, rows, cols):
    torch.manual_seed(0)
    x = torch.randn(rows, cols, device="cuda").to(dtype).requires_grad_()
    b = torch.randn(cols, device="cuda").to(dtype).requires_grad_()
    grad = torch.randn(rows, cols, device="cuda").to(dtype)
    ref = _grads(bt.bias_gelu, [], [x, b], grad, steps=1)
    got = _grads(graphfuser.script(bt.bias_gelu), [], [x, b], grad)
    # the bias gradient sums `rows` rounded terms: its tolerance grows with sqrt(rows)
    _close(got[:1], ref[:1], dtype)
    _close(got[1:], ref[1:], dtype, scale=max(1.0, rows ** 0.5))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows, cols", SIZES)
def test_rmsnorm_weight_gradient(dtype, rows, cols):
    torch.manual_seed(0)
    mod = bt.RMSNorm(cols).cuda()
    x = torch.randn(rows, cols, device="cuda").to(dtype).requires_grad_()
    grad = torch.randn(rows, cols, device="cuda")
    ref = _grads(mod, [mod.weight], [x], grad, steps=1)
    got = _grads(graphfuser.script(mod), [mod.weight], [x], grad)
    _close(got[:1], ref[:1], dtype)
    _close(got[1:], ref[1:], dtype, scale=max(1.0, rows ** 0.5))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows, cols", [(1, 256), (7, 4097), (2048, 1024), (0, 64)])
def test_layer_norm_parameter_gradients(dtype, rows, cols):
    torch.manual_seed(0)

    def ln(x, w, b):
        return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)

    x = torch.randn(rows, cols, device="cuda").to(dtype).requires_grad_()
    w = (torch.rand(cols, device="cuda") + 0.5).to(dtype).requires_grad_()
    b = torch.randn(cols, device="cuda").to(dtype).requires_grad_()
    grad = torch.randn(rows, cols, device="cuda").to(dtype)
    ref = _grads(ln, [], [x, w, b], grad, steps=1)
    # a lone layer norm under grad runs eagerly (passes/lone_groups.py: lone_under_grad): single-node mode fuses it
    with config.override(single_node_mode=True):
        got = _grads(graphfuser.script(ln), [], [x, w, b], grad)
    _close(got[:1], ref[:1], dtype)
    _close(got[1:], ref[1:], dtype, scale=max(1.0, rows ** 0.5))


def test_misaligned_view_runs_the_scalar_variant():
    torch.manual_seed(0)
    base = torch.randn(65, 257, device="cuda", dtype=torch.bfloat16)
    x = base[1:, 1:].requires_grad_()                   # offset by one element: not 16-byte aligned
    b = torch.randn(256, device="cuda", dtype=torch.bfloat16).requires_grad_()
    grad = torch.randn(64, 256, device="cuda", dtype=torch.bfloat16)
    ref = _grads(bt.bias_gelu, [], [x, b], grad, steps=1)
    got = _grads(graphfuser.script(bt.bias_gelu), [], [x, b], grad)
    _close(got[:1], ref[:1], torch.bfloat16)
    _close(got[1:], ref[1:], torch.bfloat16, scale=8.0)


COLUMN_SUM = """
graph(%x : Float({R}, {C}, strides=[{C}, 1], device=cuda:0)):
  %d : int[] = prim::Constant[value=[0]]()
  %f : bool = prim::Constant[value=0]()
  %n : NoneType = prim::Constant()
  %s : Float({C}, strides=[1], device=cuda:0) = aten::sum(%x, %d, %f, %n)
  return (%s)
"""


@pytest.mark.parametrize("rows, cols, vector", [(5000, 4096, True), (5000, 4098, False), (3, 4096, True),
                                                (100000, 64, True)])
def test_launcher_takes_the_vector_variant(rows, cols, vector):
    g = parse(COLUMN_SUM.format(R=7, C=13))
    cg = ReductionGroup(g, "cuda", torch.device("cuda", 0), "colsum")
    run = build_reduction_launcher(cg)
    run.namespace["_fns"][:] = [None] * len(cg.variants)   # (the build's forecast, for [7, 13], forgotten)
    x = torch.randn(rows, cols, device="cuda")
    (out,) = run(x)
    torch.testing.assert_close(out, x.sum(0), rtol=1e-4, atol=1e-3 * max(1.0, rows ** 0.5))
    loaded = [cg.variants[i][2].vector for i, f in enumerate(run.namespace["_fns"]) if f is not None]
    assert loaded and all((v > 1) == vector for v in loaded), loaded
