"""Gradients through the derivative rows of the moments (var, std, var_mean, std_mean), prod and
the normalization rows (layer_norm, native_layer_norm, rms_norm, batch_norm, instance_norm,
group_norm): inputs, weights and biases against eager over dtypes and layouts, odd sizes and
constant rows; the backward fused (``check_grads`` asserts a fusion group in every backward and
no fallback); the number of backward kernels of the normalizations; the CUDA source of their
backward kernels compiling with NVRTC."""
from __future__ import annotations


import pytest
import torch
import torch._dynamo

import graphfuser
from graphfuser.config import config
from graphfuser.ops import ROWS
from graphfuser.ops.derivatives import DERIVATIVES
from graphfuser.runtime import nvrtc
from grad_helpers import GRAD_TOL, check_grads, compile_as_cuda, differentiable_groups, make_function
from helpers import make_input

F = "torch.nn.functional"
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]

# name -> (expressions of x, y [rows x cols] and w, b [cols]); every one differentiates x and y
ROW_CASES = {
    "var": ["torch.var(x * y, -1)"],
    "var_keepdim_correction0": ["torch.var(x * y, 0, keepdim=True, correction=0) + y"],
    "var_all": ["torch.var(x + y) * y"],
    "std": ["torch.std(x + y, 1) * 2.0"],
    "std_unbiased_false": ["torch.std(x * y, [0, 1], False)"],
    "var_mean": ["torch.var_mean(x * y, -1)[0] + torch.var_mean(x * y, -1)[1]"],
    "var_mean_only_var": ["torch.var_mean(x * y, -1)[0] * 2.0"],
    "std_mean": ["torch.std_mean(x * y, 1, keepdim=True)[0] * 3.0 + torch.std_mean(x * y, 1, keepdim=True)[1]"],
    "prod": ["torch.prod(x * y, 1)"],
    "prod_keepdim": ["torch.prod(x + y, 0, keepdim=True) * y"],
    "layer_norm": [f"{F}.layer_norm(x * 2.0, [x.size(-1)], w, b).relu()"],
    "layer_norm_no_affine": [f"{F}.layer_norm(x + y, [x.size(-1)]) * y"],
    "layer_norm_2d": [f"{F}.layer_norm(x * y, [x.size(-2), x.size(-1)], x * 0.0 + 1.5, y * 0.5)"],
    "native_layer_norm": ["torch.native_layer_norm(x * y, [x.size(-1)], w, b, 1e-5)[0]"],
    # mean and rstd do not require grad in eager (nothing flows back through them), and using
    # them no longer keeps the group from fusing under grad
    "native_layer_norm_stats": ["torch.native_layer_norm(x * y, [x.size(-1)], w, b, 1e-5)[0] * "
                                "torch.native_layer_norm(x * y, [x.size(-1)], w, b, 1e-5)[2]",
                                "torch.native_layer_norm(x + y, [x.size(-1)], None, None, 1e-5)[1] * y"],
    "native_layer_norm_rstd_only": ["torch.native_layer_norm(x * y, [x.size(-1)], w, b, 1e-3)[2] * y * y"],
    "rms_norm": [f"{F}.rms_norm(x + 1.0, [x.size(-1)], w).relu()"],
    "rms_norm_eps": [f"{F}.rms_norm(x * y, [x.size(-1)], None, 1e-3)"],
}
# the rows' half / bfloat16 outputs are rounded where eager rounds them, so compare more loosely
_LOOSE = {torch.float16: dict(rtol=3e-2, atol=3e-2), torch.bfloat16: dict(rtol=1e-1, atol=1e-1)}


def _tol(dtype):
    return _LOOSE.get(dtype, GRAD_TOL[dtype])


def _inputs(dtype, layout, rows=7, cols=13):
    torch.manual_seed(0)
    x = make_input(rows, cols, dtype=dtype, layout=layout).requires_grad_()
    y = (make_input(rows, cols, dtype=dtype, layout=layout) + 2.0).detach().requires_grad_()
    w = (torch.rand(cols, dtype=torch.float64) + 0.5).to(dtype).requires_grad_()
    b = torch.randn(cols, dtype=torch.float64).to(dtype).requires_grad_()
    return [x, y, w, b]


def test_every_reduction_and_normalization_row_has_a_derivative():
    missing = sorted(n for n, r in ROWS.items() if r.kind in ("reduction", "normalization") and n not in DERIVATIVES)
    assert not missing, missing


@pytest.mark.parametrize("case", sorted(ROW_CASES))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_row_grads(case, dtype):
    fn = make_function(["x", "y", "w", "b"], ROW_CASES[case])
    check_grads(fn, _inputs(dtype, "dense"), GRAD_TOL[dtype])


@pytest.mark.parametrize("case", ["var", "std_mean", "prod", "layer_norm", "rms_norm", "native_layer_norm_stats"])
@pytest.mark.parametrize("layout", ["transposed", "sliced"])
def test_row_grads_layouts(case, layout):
    fn = make_function(["x", "y", "w", "b"], ROW_CASES[case])
    check_grads(fn, _inputs(torch.float32, layout), GRAD_TOL[torch.float32])


@pytest.mark.parametrize("case", ["var", "std", "layer_norm", "rms_norm", "var_mean", "native_layer_norm_stats"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_row_grads_half(case, dtype):
    fn = make_function(["x", "y", "w", "b"], ROW_CASES[case])
    check_grads(fn, _inputs(dtype, "dense"), _tol(dtype))


def test_broadcast_input_grads_sum_back():
    """x is [rows, 1] broadcast against y: its gradient is summed back to [rows, 1]."""
    fn = make_function(["x", "y", "w", "b"], [f"{F}.layer_norm(x * y, [y.size(-1)], w, b)",
                                               "torch.var(x + y, -1, keepdim=True)"])
    x, y, w, b = _inputs(torch.float64, "dense")
    x = x[:, :1].detach().clone().requires_grad_()
    check_grads(fn, [x, y, w, b], GRAD_TOL[torch.float64])


def test_constant_rows():
    """Constant rows: var / std are 0 (std's gradient is 0 there, as eager's), layer_norm's xhat
    is 0 and its gradient is rstd * (g w - mean(g w))."""
    fn = make_function(["x", "y", "w", "b"], ["torch.std(x * y, -1)", f"{F}.layer_norm(x * y, [x.size(-1)], w, b)",
                                               "torch.var(x * y, -1)"])
    x, y, w, b = _inputs(torch.float64, "dense")
    with torch.no_grad():
        x[2] = 3.0
        x[5] = -1.25
        y[2] = 1.0
        y[5] = 1.0
    check_grads(fn, [x, y, w, b], GRAD_TOL[torch.float64])


@pytest.mark.parametrize("zeros", [[], [(1, 3)], [(1, 3), (1, 5)], [(0, 0), (4, 12)]])
def test_prod_with_zeros(zeros):
    """One zero in a slice: its gradient is the product of the others; two: every gradient is 0."""
    fn = make_function(["x", "y", "w", "b"], ["torch.prod(x * y, 1)", "torch.prod(x + 0.0, 0, keepdim=True)"])
    x, y, w, b = _inputs(torch.float64, "dense")
    with torch.no_grad():
        for r, c in zeros:
            x[r, c] = 0.0
    check_grads(fn, [x, y, w, b], GRAD_TOL[torch.float64])


@pytest.mark.parametrize("rows, cols", [(1, 1), (3, 1), (1, 17), (33, 65)])
def test_odd_sizes(rows, cols):
    fn = make_function(["x", "y", "w", "b"], [f"{F}.layer_norm(x * y, [x.size(-1)], w, b)",
                                               "torch.var_mean(x * y, -1, correction=0)[1] * 2.0",
                                               f"{F}.rms_norm(x + y, [x.size(-1)], w)"])
    inputs = _inputs(torch.float64, "dense", rows, cols)
    check_grads(fn, inputs, GRAD_TOL[torch.float64])


# -- channel normalizations: [N, C, H, W] x, [C] w / b / running stats ---------------------------
CHANNEL_CASES = {
    "batch_norm_eval": f"{F}.batch_norm(x * 2.0, rm, rv, w, b, False, 0.1, 1e-5).relu()",
    "batch_norm_eval_no_affine": f"{F}.batch_norm(x + 1.0, rm, rv, None, None, False, 0.1, 1e-3) * x",
    "batch_norm_train_no_stats": f"{F}.batch_norm(x * 2.0, None, None, w, b, True, 0.1, 1e-5).relu()",
    "instance_norm": f"{F}.instance_norm(x * 2.0, None, None, w, b, True, 0.1, 1e-5).relu()",
    "instance_norm_running": f"{F}.instance_norm(x * 2.0, rm, rv, w, b, False, 0.1, 1e-5).relu()",
    "group_norm": f"{F}.group_norm(x * 2.0, 1, w, b, 1e-5).relu()",
    "group_norm_no_affine": f"{F}.group_norm(x + 1.0, 1) * x",
    # num_groups > 1: an instance norm of x viewed [N, G, C/G, H*W] and the affine in that view
    "group_norm_groups": f"{F}.group_norm(x * 2.0, 3, w, b, 1e-5).relu()",
    "group_norm_groups_no_affine": f"{F}.group_norm(x + 1.0, 2, None, None, 1e-3) * x",
    "group_norm_groups_weight_only": f"{F}.group_norm(x * x, 6, w, None, 1e-5) * x",
}


def _channel_inputs(dtype, layout, shape=(4, 6, 5, 3)):
    torch.manual_seed(0)
    c = shape[1]
    x = make_input(*shape, dtype=dtype, layout="dense" if layout == "channels_last" else layout)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    x = x.requires_grad_()
    w = (torch.rand(c, dtype=torch.float64) + 0.5).to(dtype).requires_grad_()
    b = torch.randn(c, dtype=torch.float64).to(dtype).requires_grad_()
    rm = torch.randn(c, dtype=torch.float64).to(dtype)
    rv = (torch.rand(c, dtype=torch.float64) + 0.5).to(dtype)
    return [x, w, b, rm, rv]


@pytest.mark.parametrize("case", sorted(CHANNEL_CASES))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_channel_norm_grads(case, dtype):
    fn = make_function(["x", "w", "b", "rm", "rv"], [CHANNEL_CASES[case]])
    check_grads(fn, _channel_inputs(dtype, "dense"), GRAD_TOL[dtype])


@pytest.mark.parametrize("case", ["batch_norm_eval", "batch_norm_train_no_stats", "instance_norm", "group_norm",
                                  "group_norm_groups"])
@pytest.mark.parametrize("layout", ["channels_last", "transposed", "sliced"])
def test_channel_norm_grads_layouts(case, layout):
    fn = make_function(["x", "w", "b", "rm", "rv"], [CHANNEL_CASES[case]])
    check_grads(fn, _channel_inputs(torch.float32, layout), GRAD_TOL[torch.float32])


@pytest.mark.parametrize("case", ["batch_norm_train_no_stats", "group_norm", "group_norm_groups"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_channel_norm_grads_half(case, dtype):
    fn = make_function(["x", "w", "b", "rm", "rv"], [CHANNEL_CASES[case]])
    check_grads(fn, _channel_inputs(dtype, "dense"), _tol(dtype))


@pytest.mark.parametrize("shape", [(2, 3, 1, 1), (5, 1, 7), (3, 4, 2, 3, 5)])
def test_channel_norm_odd_shapes(shape):
    for case in ("batch_norm_train_no_stats", "instance_norm", "group_norm", "batch_norm_eval", "group_norm_groups"):
        if case == "group_norm_groups" and shape[1] % 3:
            continue      # 3 groups need channels divisible by 3
        if case == "instance_norm" and shape[2:].count(1) == len(shape) - 2:
            continue      # eager raises for one value per instance
        fn = make_function(["x", "w", "b", "rm", "rv"], [CHANNEL_CASES[case]])
        check_grads(fn, _channel_inputs(torch.float64, "dense", shape), GRAD_TOL[torch.float64])


def _backward_groups(sf) -> int:
    return sum(len([n for n in dg.backward._optimized.all_nodes() if n.kind.endswith("FusionGroup")])
               for dg in differentiable_groups(sf))


@pytest.mark.parametrize("expr, groups", [
    (f"{F}.layer_norm(x * y, [x.size(-1)], w, b).relu()", 2),     # dx: one reduction; dw, db: one
    (f"{F}.rms_norm(x * y, [x.size(-1)], w).relu()", 2),
    ("torch.var(x * y, -1) * 2.0", 1),
])
def test_backward_kernel_count(expr, groups):
    """The backward of a row normalization is one reduction over the row (recomputed statistics and
    the two sums) plus the pointwise dx, and one reduction over the rows for the parameters."""
    fn = make_function(["x", "y", "w", "b"], [expr])
    sf = check_grads(fn, _inputs(torch.float32, "dense"), GRAD_TOL[torch.float32])
    assert _backward_groups(sf) <= groups, [str(dg.backward._optimized) for dg in differentiable_groups(sf)]


def test_batch_norm_backward_is_one_kernel():
    """Statistics, the two sums and the weight / bias sums all reduce over N, H, W: one group."""
    fn = make_function(["x", "w", "b", "rm", "rv"], [CHANNEL_CASES["batch_norm_train_no_stats"]])
    sf = check_grads(fn, _channel_inputs(torch.float32, "dense"), GRAD_TOL[torch.float32])
    assert _backward_groups(sf) == 1


# dx of a normalization sums to zero over each row (channel): (shape, reduced dims, expression)
BIAS_CASES = {
    "batch_norm": ((16, 8, 14, 14), [0, 2, 3], f"{F}.batch_norm(x, None, None, w, b, True, 0.1, 1e-5) * 2.0"),
    "layer_norm": ((64, 1024), [1], f"{F}.layer_norm(x, [x.size(-1)], w, b, 1e-5) * 2.0"),
    "instance_norm": ((8, 8, 28, 28), [2, 3], f"{F}.instance_norm(x, None, None, w, b, True, 0.1, 1e-5) * 2.0"),
    "group_norm": ((8, 4, 28, 28), [1, 2, 3], f"{F}.group_norm(x, 1, w, b, 1e-5) * 2.0"),
}


@pytest.mark.parametrize("case", sorted(BIAS_CASES))
def test_dx_error_has_no_row_bias(case):
    """The rounding error of dx, averaged over each normalized row (channel), against float64:
    at most half of eager's. ``(g * w - mean) - ...`` (and eager's ``g - mean(g)``) rounds the mean
    on the grid of the rounded ``g * w``, the same shift for every element of a binade: a bias of
    the whole row, which anything summing dx over a row's elements adds up linearly (a
    squeeze-excite's pooled gradient). ``_normalized_dx`` adds the mean to the per-element term
    first: 0.25-0.32x eager's here, 0.72-0.94x before."""
    shape, dims, expr = BIAS_CASES[case]
    fn = make_function(["x", "w", "b"], [expr])
    sf = graphfuser.script(fn)
    gen = torch.Generator().manual_seed(0)
    c = shape[-1] if case == "layer_norm" else shape[1]
    w = (torch.rand(c, generator=gen) + 0.5).requires_grad_()
    b = torch.randn(c, generator=gen).requires_grad_()
    bias = {"fused": 0.0, "eager": 0.0}
    for k in range(config.profiling_runs * 2 + 4):
        x = (torch.randn(shape, generator=gen) * 2.0 + 1.0).requires_grad_()
        gy = torch.randn(shape, generator=gen)
        x64 = x.detach().double().requires_grad_()
        (exact,) = torch.autograd.grad(fn(x64, w.double(), b.double())[0], [x64], gy.double())
        for name, f in (("fused", sf), ("eager", fn)):
            (dx,) = torch.autograd.grad(f(x, w, b)[0], [x], gy)
            if k >= config.profiling_runs * 2:
                bias[name] += float((dx.double() - exact).mean(dims).pow(2).mean())
    assert _backward_groups(sf) >= 1
    assert bias["fused"] <= 0.25 * bias["eager"], {k: v ** 0.5 for k, v in bias.items()}


def test_unfused_under_grad_is_logged(caplog, monkeypatch):
    """What does not fuse under grad says why under >partition: cumsum is not in the op table,
    lgamma has no derivative row (its group runs eagerly)."""
    import logging

    from graphfuser.config import config

    monkeypatch.setenv("PYTORCH_JIT_LOG_LEVEL", ">partition")
    config.reload()
    fn = make_function(["x", "w", "b", "rm", "rv"], ["torch.cumsum(x * 2.0, 1).relu() * w.view(4, 1, 1) + b.view(4, 1, 1)",
                                                     "torch.lgamma(x * x + 1.0) * 2.0"])
    x, w, b, rm, rv = _channel_inputs(torch.float64, "dense", (2, 4, 3, 3))
    sf = graphfuser.script(fn)
    with caplog.at_level(logging.INFO):
        for _ in range(3):
            got = torch.autograd.grad(sum(o.sum() for o in sf(x, w, b, rm, rv)), [x, w, b])
    text = caplog.text
    assert "aten::cumsum is not in the op table" in text, text
    assert "not fused under grad" in text and "lgamma" in text, text
    ref = torch.autograd.grad(sum(o.sum() for o in fn(x, w, b, rm, rv)), [x, w, b])
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r)


NVRTC_OK, NVRTC_WHY = nvrtc.available()


@pytest.mark.skipif(not NVRTC_OK, reason=f"NVRTC is not available here: {NVRTC_WHY}")
def test_norm_backward_kernels_compile_with_nvrtc():
    """Every backward fusion group of layer_norm, rms_norm, var and batch norm in training,
    rendered as CUDA, compiles."""
    subs = []
    cases = [(["x", "y", "w", "b"], ROW_CASES[k], _inputs(torch.float32, "dense"))
             for k in ("layer_norm", "rms_norm", "std_mean", "prod")]
    cases.append((["x", "w", "b", "rm", "rv"], [CHANNEL_CASES["batch_norm_train_no_stats"]],
                  _channel_inputs(torch.float32, "channels_last")))
    for args, exprs, inputs in cases:
        sf = graphfuser.script(make_function(args, exprs))
        for _ in range(4):
            sf(*inputs)[0].sum().backward()
        for dg in differentiable_groups(sf):
            subs += [n.subgraph for n in dg.backward._optimized.all_nodes() if n.kind.endswith("FusionGroup")]
    assert len(subs) >= 5
    compile_as_cuda(subs, "nbwd")


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", FLOATS)
def test_norm_grads_on_cuda(dtype):
    tol = _tol(dtype)
    for case in ("layer_norm", "rms_norm", "var_mean", "std", "prod"):
        fn = make_function(["x", "y", "w", "b"], ROW_CASES[case])
        inputs = [t.detach().cuda().requires_grad_() for t in _inputs(dtype, "dense", 64, 257)]
        if case == "prod":   # factors near 1: a product of 257 others stays finite in half
            inputs[0] = (inputs[0].detach() * 0.01 + 1.0).requires_grad_()
            inputs[1] = (inputs[1].detach() * 0.01 + 1.0).requires_grad_()
        check_grads(fn, inputs, tol)
    for case in ("batch_norm_train_no_stats", "group_norm", "instance_norm", "batch_norm_eval"):
        fn = make_function(["x", "w", "b", "rm", "rv"], [CHANNEL_CASES[case]])
        for layout in ("dense", "channels_last"):
            inputs = [t.detach().cuda() for t in _channel_inputs(dtype, layout, (8, 16, 9, 7))]
            for t in inputs[:3]:
                t.requires_grad_()
            # the weight / bias gradients are sums of 504 terms reaching |30|: in bfloat16 one
            # rounding of such a sum is 0.125-0.25 (eager's own error against float64 is 0.21)
            with config.override(enable=["cuda_batch_norm_training"]):   # cuDNN by default on CUDA
                check_grads(fn, inputs, dict(rtol=0.1, atol=0.3) if dtype == torch.bfloat16 else tol)


def _bn_eval(x, rm, rv, w):
    return torch.nn.functional.batch_norm(x, rm, rv, w, None, False, 0.1, 1e-5) * 8.0


@pytest.mark.parametrize("entry", ["script", "compile"])
def test_eval_batch_norm_with_strided_running_stats_has_right_weight_gradients(entry):
    """Every call, profiling calls (which run eager's op) included: the weight gradient of an
    eval-mode batch norm whose running mean and variance are stepped slices is the float64
    formula's. Eager's CPU backward reads such statistics as dense and gave 1e32 where the
    formula gives tens (fuzz graph 1740 of CPU seed 33711); graphfuser hands them to it dense."""
    g = torch.Generator().manual_seed(0)
    x, go = torch.randn(35, 8, generator=g), torch.randn(35, 8, generator=g)
    rm, rv = torch.randn(16, generator=g)[::2], (torch.rand(16, generator=g) + 0.3)[::2]
    ref = (go.double() * 8 * (x.double() - rm.double()) * torch.rsqrt(rv.double() + 1e-5)).sum(0)
    if entry == "script":
        sf = graphfuser.script(_bn_eval)
    else:
        from graphfuser.frontend.dynamo import registered_backend

        torch._dynamo.reset()
        sf = torch.compile(_bn_eval, backend=registered_backend())
    for call in range(4):
        w = torch.ones(8, requires_grad=True)
        (gw,) = torch.autograd.grad(sf(x, rm, rv, w), w, go)
        torch.testing.assert_close(gw.double(), ref, rtol=1e-4, atol=1e-4, msg=f"call {call}")
    assert rm.stride() == (2,) and rv.stride() == (2,)
