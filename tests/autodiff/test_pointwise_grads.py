"""Gradients of fused pointwise groups match eager's, for every row with a derivative formula,
over dtypes and layouts; the forward and the backward both run fused."""
from __future__ import annotations

import pytest
import torch

import graphfuser
from graphfuser.ops import ROWS
from graphfuser.ops.derivatives import DERIVATIVES
from graphfuser.ops.random import RANDOM_ROWS
from grad_helpers import GRAD_TOL, check_grads, make_function
from helpers import make_input

F = "torch.nn.functional"

# expression over x, y (normal values) or p, q (positive values, for log / sqrt / pow ...)
UNARY_X = {
    "neg": "-x", "abs": "torch.abs(x)", "exp": "torch.exp(x)", "exp2": "torch.exp2(x)",
    "expm1": "torch.expm1(x)", "sin": "torch.sin(x)", "cos": "torch.cos(x)", "tan": "torch.tan(x * 0.5)",
    "atan": "torch.atan(x)", "sinh": "torch.sinh(x)", "cosh": "torch.cosh(x)", "tanh": "torch.tanh(x)",
    "sigmoid": "torch.sigmoid(x)", "erf": "torch.erf(x)", "erfc": "torch.erfc(x)", "relu": "torch.relu(x)",
    "leaky_relu": f"{F}.leaky_relu(x, 0.1)", "hardtanh": f"{F}.hardtanh(x, -0.5, 0.7)",
    "relu6": f"{F}.relu6(x * 4.0)", "hardsigmoid": f"{F}.hardsigmoid(x * 4.0)",
    "hardswish": f"{F}.hardswish(x * 4.0)",
    "gelu": f"{F}.gelu(x)", "silu": f"{F}.silu(x)", "softplus": f"{F}.softplus(x, 2.0, 1.0)",
    "floor": "torch.floor(x) * x", "ceil": "torch.ceil(x) + x", "trunc": "torch.trunc(x) * x",
    "round": "torch.round(x) + x", "sign": "torch.sign(x) * x", "frac": "torch.frac(x)",
    "clamp": "torch.clamp(x, -0.5, 0.5)", "clamp_min": "torch.clamp_min(x, 0.1)",
    "clamp_max": "torch.clamp_max(x, 0.1)", "threshold": f"{F}.threshold(x, 0.1, 2.0)",
    "nan_to_num": "torch.nan_to_num(x)", "to": "x.double().sin().to(x.dtype)", "dropout": f"{F}.dropout(x, 0.5, False)",
    "autocast_to_full_precision": "torch.ops.aten._autocast_to_full_precision(x, True, True).sin()",
    "autocast_to_reduced_precision": "torch.ops.aten._autocast_to_reduced_precision(x, True, True, "
                                     "torch.float32, torch.float32).sin()",
}
UNARY_P = {
    "log": "torch.log(p)", "log2": "torch.log2(p)", "log10": "torch.log10(p)", "log1p": "torch.log1p(p)",
    "sqrt": "torch.sqrt(p)", "rsqrt": "torch.rsqrt(p)", "reciprocal": "torch.reciprocal(p)",
    "asin": "torch.asin(p * 0.4)", "acos": "torch.acos(p * 0.4)",
}
BINARY = {
    "add": "torch.add(x, y, alpha=2.0)", "sub": "torch.sub(x, y, alpha=0.5)", "rsub": "torch.rsub(x, y, alpha=3.0)",
    "mul": "x * y", "div": "x / p", "atan2": "torch.atan2(x, y)", "maximum": "torch.maximum(x, y)",
    "minimum": "torch.minimum(x, y)", "where": "torch.where(x > y, x, y * 2.0)",
    "pow": "torch.pow(p, q)", "fmod": "torch.fmod(x, p)", "remainder": "torch.remainder(x, p)",
    "lerp": "torch.lerp(x, y, 0.3)", "addcmul": "torch.addcmul(x, y, p, value=0.5)",
    "addcdiv": "torch.addcdiv(x, y, p, value=0.5)", "masked_fill": "x.masked_fill(x > y, -1.5)",
}
EXTRA = ["torch.pow(x, 3.0)", "torch.pow(2.0, x)", "torch.div(x, p, rounding_mode='floor') + y",
         "torch.div(x, p, rounding_mode='trunc') * y", f"{F}.gelu(x, approximate='tanh')",
         "torch.lerp(x, y, p)", "torch.clamp(x, min=-0.2)", "(x > y).float() * x + (x == y).float()",
         f"{F}.dropout(x, 0.0, True) * y"]
ALL = {**UNARY_X, **UNARY_P, **BINARY}
GROUPS = [list(UNARY_X.values()), list(UNARY_P.values()), list(BINARY.values()) + EXTRA]


def test_every_derivative_row_is_tested():
    """Every pointwise / cast row with a derivative is exercised here (reductions: test_reduction_grads;
    random rows, whose gradients eager cannot reproduce without graphfuser's mask: tests/ops/test_random.py;
    bias_grad, whose bias takes a gradient its value does not depend on: tests/passes/test_bias_gradients.py;
    dense_copy, made by passes/broadcast_copy.py from a reshape of an expanded view, whose view
    argument is read for its sizes only: tests/passes/test_broadcast_copy.py)."""
    rows = {r for r in DERIVATIVES if r in ROWS and ROWS[r].kind in ("pointwise", "cast")} - set(RANDOM_ROWS)
    rows -= {"bias_grad", "dense_copy"}
    assert rows <= set(ALL), sorted(rows - set(ALL))
    assert set(ALL) <= rows, sorted(set(ALL) - rows)


def _inputs(shape, dtype, layout):
    def mk(low=None):
        if layout == "expanded":
            t = make_input(*shape[:-1], 1, dtype=dtype, low=low).expand(*shape)
        else:
            t = make_input(*shape, dtype=dtype, layout=layout, low=low)
        return t.detach().requires_grad_(True) if t.is_leaf else t.detach().requires_grad_(True)
    return [mk(), mk(), mk(0.5), mk(0.5)]


@pytest.mark.parametrize("layout", ["dense", "transposed", "sliced", "expanded"])
@pytest.mark.parametrize("group", range(len(GROUPS)))
def test_grads_fp32_layouts(group, layout):
    fn = make_function(["x", "y", "p", "q"], GROUPS[group])
    torch.manual_seed(group)
    check_grads(fn, _inputs((6, 10), torch.float32, layout), GRAD_TOL[torch.float32])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("group", range(len(GROUPS)))
def test_grads_dtypes(group, dtype):
    fn = make_function(["x", "y", "p", "q"], GROUPS[group])
    torch.manual_seed(group)
    check_grads(fn, _inputs((5, 8), dtype, "dense"), GRAD_TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_masked_fill_tensor_value_grad(dtype):
    """A 0-dim tensor value gets the gradient of every filled element (summed), self the rest;
    the mask broadcasts (attention masks)."""
    fn = make_function(["x", "m", "v"], ["x.masked_fill(m > 0.3, v) * 2.0"])
    torch.manual_seed(3)
    x = make_input(4, 6, 10, dtype=dtype).requires_grad_(True)
    m = torch.rand(6, 10, dtype=dtype)
    v = torch.tensor(0.7, dtype=dtype, requires_grad=True)
    check_grads(fn, [x, m, v], GRAD_TOL[dtype])


@pytest.mark.parametrize("fn", ["relu6", "hardsigmoid", "hardswish"])
def test_piecewise_activation_grads_at_their_kinks(fn):
    """At the kinks (0 and 6; -3 and 3) and at +-inf the fused backward picks the side eager's
    kernels pick; 64 elements, so eager runs its vectorized CPU kernel throughout."""
    import graphfuser

    f = getattr(torch.nn.functional, fn)

    def g(x, w):
        return f(x * w) * 2.0

    kinks = [-4.0, -3.0, -2.5, 0.0, 1e-3, 2.5, 3.0, 3.5, 6.0, 6.5, float("inf"), -float("inf"), -0.0, 1.0, 5.0, 7.0]
    vals = torch.tensor(kinks * 4)
    s = graphfuser.script(g)
    for _ in range(4):
        x = vals.clone().requires_grad_(True)
        s(x, torch.ones_like(vals)).sum().backward()
    ref = vals.clone().requires_grad_(True)
    g(ref, torch.ones_like(vals)).sum().backward()
    from graphfuser.autodiff.function import GROUPS

    trained = [n for n in graphfuser.last_executed_optimized_graph().all_nodes()
               if n.kind.endswith("FusionGroup") and n in GROUPS and GROUPS[n]() is not None]
    # the op's group runs as one autograd node with a fused backward (without a derivative
    # formula it would run its eager program under grad)
    assert any(f"aten::{fn}" in [m.kind for m in n.subgraph.block.nodes] for n in trained)
    torch.testing.assert_close(x.grad, ref.grad, rtol=0, atol=0)


def _acts(x):
    nnf = torch.nn.functional
    return (nnf.gelu(x * 1.0, approximate="tanh") + nnf.silu(x) + nnf.softplus(x) + torch.tanh(x) + torch.sigmoid(x)) * 0.5


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_activation_gradients_of_reduced_precision_compute_in_float(dtype):
    """Eager's activation backward kernels compute in float and round once; graphfuser's formulas
    for fp16 / bf16 inputs do too, in the backward's profiling runs as in its fused kernel. Left
    in fp16, tanh-GELU's x * x overflowed for |x| > 256 and the gradient was NaN where eager's
    is finite (fuzz graph 940 of CPU seed 34111)."""
    torch.manual_seed(0)
    base = torch.cat([torch.randn(61) * 3, torch.tensor([300.0, -300.0, 1000.0, -1000.0, 0.0, 20.0, -20.0])])
    sf = graphfuser.script(_acts)
    for _ in range(4):
        x = base.to(dtype).requires_grad_()
        sf(x).sum().backward()
        xr = base.to(dtype).requires_grad_()
        _acts(xr).sum().backward()
        assert bool(x.grad.isfinite().all()), x.grad
        torch.testing.assert_close(x.grad, xr.grad, rtol=2e-2, atol=2e-2)
