"""Gradients through fused reductions, softmax / log_softmax and norms written as pointwise +
reductions (RMSNorm, LayerNorm), and the CUDA source of backward kernels compiling with NVRTC."""
from __future__ import annotations


import pytest
import torch

import graphfuser
from graphfuser.runtime import nvrtc
from grad_helpers import GRAD_TOL, check_grads, compile_as_cuda, differentiable_groups, make_function

RMS = "x * torch.rsqrt(torch.mean(x * x, -1, keepdim=True) + 1e-6) * y"
LN = ("(x - x.mean(-1, keepdim=True)) * torch.rsqrt(((x - x.mean(-1, keepdim=True)) ** 2).mean(-1, keepdim=True)"
      " + 1e-5) * y + y")
CASES = {
    "sum_dim": ["torch.sum(torch.sigmoid(x) * y, -1) * 2.0"],
    "sum_keepdim": ["torch.sum(x * y, 0, keepdim=True) + y"],
    "mean": ["torch.mean(x * y, 0)"],
    "amax": ["torch.amax(x + y, 1, keepdim=True)"],
    "amin": ["torch.amin(x * y, 1) * 3.0"],
    "softmax": ["torch.softmax(x * y, -1)", "torch.log_softmax(x + y, 1)"],
    "rms_norm": [RMS],
    "layer_norm": [LN],
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", sorted(CASES))
def test_reduction_grads(case, dtype):
    fn = make_function(["x", "y"], CASES[case])
    torch.manual_seed(0)
    x = torch.randn(6, 10, dtype=dtype, requires_grad=True)
    y = torch.randn(6, 10, dtype=dtype, requires_grad=True)
    check_grads(fn, [x, y], GRAD_TOL[dtype])


def test_amax_ties_split_like_eager():
    fn = make_function(["x", "y"], ["torch.amax(x * y, -1)"])
    x = torch.tensor([[1.0, 3.0, 3.0, 2.0], [5.0, 5.0, 5.0, 1.0]], requires_grad=True)
    y = torch.ones(2, 4, requires_grad=True)
    check_grads(fn, [x, y], dict(rtol=0, atol=0))


def test_amax_beside_layer_norm():
    fn = make_function(["x", "y"], ["torch.amax(x + y, 1, keepdim=True)", LN])
    x = torch.randn(6, 10, requires_grad=True)
    y = torch.randn(6, 10, requires_grad=True)
    check_grads(fn, [x, y], GRAD_TOL[torch.float32])


NVRTC_OK, NVRTC_WHY = nvrtc.available()


@pytest.mark.skipif(not NVRTC_OK, reason=f"NVRTC is not available here: {NVRTC_WHY}")
def test_backward_kernels_compile_with_nvrtc():
    """Every backward fusion group of the pointwise chain and RMSNorm, rendered as CUDA, compiles."""
    subs = []
    for exprs in (["torch.sigmoid(x * y + 2.0) * torch.tanh(x - y)"], [RMS]):
        fn = make_function(["x", "y"], exprs)
        x = torch.randn(8, 16, requires_grad=True)
        y = torch.randn(8, 16, requires_grad=True)
        sf = graphfuser.script(fn)
        for _ in range(5):
            sf(x, y)[0].sum().backward()
        for dg in differentiable_groups(sf):      # (this function's: not every live group of the process)
            if dg.backward._optimized is not None:
                subs += [n.subgraph for n in dg.backward._optimized.all_nodes() if n.kind.endswith("FusionGroup")]
    assert subs
    compile_as_cuda(subs, "bwd")


@pytest.mark.cuda
def test_pointwise_chain_grads_on_cuda():
    fn = make_function(["x", "y"], ["torch.sigmoid(x * y + 2.0) * torch.tanh(x - y)", RMS])
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(64, 128, device="cuda", dtype=dtype, requires_grad=True)
        y = torch.randn(64, 128, device="cuda", dtype=dtype, requires_grad=True)
        check_grads(fn, [x, y], GRAD_TOL[dtype])


def test_pointwise_chain_and_rms_grads_on_cpu():
    """The backward graph of these two outputs once made horizontal merging build a cycle through a
    third group (the partition's reachability now contracts groups)."""
    fn = make_function(["x", "y"], ["torch.sigmoid(x * y + 2.0) * torch.tanh(x - y)", RMS])
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(64, 128, dtype=dtype, requires_grad=True)
        y = torch.randn(64, 128, dtype=dtype, requires_grad=True)
        check_grads(fn, [x, y], GRAD_TOL[dtype])


class _BiasThenMean(torch.nn.Module):
    """A linear's or conv's bias add split off into the group of a mean over the spatial dims:
    the bias's gradient is the sum of a gradient the mean's backward leaves constant along those
    dims, so each counts H * W times (it had counted once: 1 / (H * W) of eager's gradient)."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.fc = torch.nn.Linear(8, 8)
        self.conv = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)

    def forward(self, x):
        if self.kind == "linear":
            return (self.fc(x.permute(0, 2, 3, 1)) * 2.0).mean((1, 2))
        if self.kind == "linear_permuted":
            y = self.fc(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
            return (y * 2.0 + x).mean((2, 3))
        return (self.conv(x).permute(0, 2, 3, 1) * 2.0).mean((1, 2))


@pytest.mark.parametrize("kind", ["linear", "linear_permuted", "conv"])
@pytest.mark.parametrize("front", ["script", "compile"])
def test_a_bias_before_a_mean_gets_its_whole_gradient(kind, front):
    import copy

    from graphfuser.config import config

    torch.manual_seed(0)
    m = _BiasThenMean(kind).double()
    ref = copy.deepcopy(m)
    f = graphfuser.script(m) if front == "script" else torch.compile(m, backend=graphfuser.graphfuser_backend)
    with config.override(disable=["fallback"]):
        for _ in range(5):
            x = torch.randn(2, 8, 3, 5, dtype=torch.float64)
            f(x).pow(2).sum().backward()
            ref(x).pow(2).sum().backward()
            for (name, p), q in zip(m.named_parameters(), ref.parameters()):
                if q.grad is not None:
                    torch.testing.assert_close(p.grad, q.grad, rtol=1e-9, atol=1e-9, msg=name)
            m.zero_grad(set_to_none=True)
            ref.zero_grad(set_to_none=True)


def _add_mean_1(x, b, c):
    return ((x + b) * c).mean(1)


def _add_mean_01(x, b, c):
    return ((x + b) * c).mean((0, 1))


def _add_mean_12(x, b, c):
    return ((x + b) * c).mean((1, 2))


@pytest.mark.parametrize("fn", [_add_mean_1, _add_mean_01, _add_mean_12], ids=["1", "01", "12"])
@pytest.mark.parametrize("front", ["script", "compile"])
def test_a_broadcast_operand_before_a_mean_gets_its_whole_gradient(fn, front):
    """``(x + b).mean(dims)`` in one group: the mean's backward leaves the gradient constant along
    ``dims``, where ``b`` was broadcast too; b's gradient sums it over them (it had been taken
    once: 1 / 5 of eager's over a dim of 5)."""
    from graphfuser.config import config

    f = graphfuser.script(fn) if front == "script" else torch.compile(fn, backend=graphfuser.graphfuser_backend)
    torch.manual_seed(0)
    with config.override(disable=["fallback"]):
        for _ in range(5):
            x = torch.randn(3, 5, 8, dtype=torch.float64, requires_grad=True)
            b = torch.randn(8, dtype=torch.float64, requires_grad=True)
            c = torch.randn(5, 1, dtype=torch.float64, requires_grad=True)
            got = torch.autograd.grad(f(x, b, c).pow(2).sum(), (x, b, c))
            want = torch.autograd.grad(fn(x, b, c).pow(2).sum(), (x, b, c))
            for name, g, w in zip("xbc", got, want):
                torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-9, msg=name)
