"""Instance norm with running stats in training (``nn.InstanceNorm*d(track_running_stats=True)``,
``F.instance_norm(use_input_stats=True)`` given running stats): the running-stats update is split
off as the batch norm's is (``passes/batch_norm.py``), so the normalization fuses; outputs,
gradients and the running stats against eager over several steps, eval after training, an empty
batch (eager writes NaN running stats), and the graph that found it (an exact first norm feeding
eager's inexact second one, fuzz graph 944 of CPU seed 36583)."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.config import config
from grad_helpers import differentiable_groups
from helpers import fallback_counter

_TOL = {torch.float64: dict(rtol=1e-7, atol=1e-7), torch.float32: dict(rtol=1e-4, atol=1e-5),
        torch.bfloat16: dict(rtol=8e-2, atol=8e-2)}


def in_relu(x, w, b, rm, rv):
    return F.instance_norm(x, rm, rv, w, b, True, 0.1, 1e-5).relu() * 2.0


def _fused_kinds(sf) -> set[str]:
    return {m.kind for n in sf._optimized.all_nodes() if n.kind == "prim::CpuFusionGroup"
            for m in n.subgraph.nodes()}


@pytest.mark.parametrize("dtype,channels_last,shape", [
    (torch.float32, False, (3, 4, 5, 6)), (torch.float32, True, (3, 4, 5, 6)), (torch.float64, False, (2, 3, 7)),
    (torch.float64, False, (2, 3, 2, 3, 4)), (torch.bfloat16, False, (3, 4, 5, 6)), (torch.float32, False, (1, 5, 9)),
])
def test_functional_steps(dtype, channels_last, shape):
    c = shape[1]
    torch.manual_seed(0)
    x = (torch.randn(shape, dtype=torch.float64) * 3.0 + 2.0).to(dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    x.requires_grad_()
    pdt = torch.float32 if dtype == torch.bfloat16 else dtype
    w, b = (torch.rand(c, dtype=pdt) + 0.5).requires_grad_(), torch.randn(c, dtype=pdt).requires_grad_()
    stats_e = (torch.randn(c, dtype=pdt), torch.rand(c, dtype=pdt) + 0.5)
    stats_f = tuple(t.clone() for t in stats_e)
    sf = graphfuser.script(in_relu)
    with config.override(disable=["fallback"]):
        for k in range(5):
            gy = torch.randn(shape, dtype=dtype)
            out_e = in_relu(x, w, b, *stats_e)
            out_f = sf(x, w, b, *stats_f)
            torch.testing.assert_close(out_f, out_e, **_TOL[dtype], msg=lambda m: f"step {k} output: {m}")
            for ge, gf in zip(torch.autograd.grad(out_e, [x, w, b], gy), torch.autograd.grad(out_f, [x, w, b], gy)):
                torch.testing.assert_close(gf, ge, **_TOL[dtype], msg=lambda m: f"step {k} grad: {m}")
            for be, bf in zip(stats_e, stats_f):
                torch.testing.assert_close(bf, be, **_TOL[dtype], msg=lambda m: f"step {k} running stat: {m}")
                assert not bf.requires_grad
    kinds = _fused_kinds(sf)
    assert {"aten::instance_norm", "aten::relu", "aten::var"} <= kinds, kinds
    assert differentiable_groups(sf)


def test_module_train_then_eval():
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 6, 3), torch.nn.InstanceNorm2d(6, affine=True, track_running_stats=True),
                            torch.nn.ReLU())
    ref = copy.deepcopy(m)
    sm = graphfuser.script(m)
    torch.manual_seed(1)
    with config.override(disable=["fallback"]):
        for k in range(4):
            x = torch.randn(2, 3, 9, 8)
            torch.testing.assert_close(sm(x), ref(x), rtol=1e-4, atol=1e-5)
        for a, b in zip(list(m[1].buffers()), list(ref[1].buffers())):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        m.eval(), ref.eval()
        for k in range(3):
            x = torch.randn(2, 3, 9, 8)
            torch.testing.assert_close(sm(x), ref(x), rtol=1e-4, atol=1e-5)
    assert fallback_counter(sm)["fallback"] == 0


def test_empty_batch_writes_nan_stats_as_eager():
    """Eager's instance norm of an empty batch writes NaN running stats (the mean over no
    samples); the split-off update does too. (With a weight, eager raises an IndexError.)"""
    def plain(x, rm, rv):
        return F.instance_norm(x, rm, rv, None, None, True, 0.1, 1e-5) + 1.0

    sf = graphfuser.script(plain)
    stats_e, stats_f = (torch.zeros(3), torch.ones(3)), (torch.zeros(3), torch.ones(3))
    for n in (2, 2, 2, 0):
        x = torch.randn(n, 3, 4)
        out_e, out_f = plain(x, *stats_e), sf(x, *stats_f)
        torch.testing.assert_close(out_f, out_e)
        for be, bf in zip(stats_e, stats_f):
            torch.testing.assert_close(bf, be, equal_nan=True)
    assert stats_f[0].isnan().all()


def test_exact_first_norm_feeds_a_fused_second():
    """Two instance norms, the second with running stats, over a huge-mean bf16 input: eager's
    first norm is inexact, graphfuser's exact; the second used to be eager's (running stats were
    not fused) and amplified the first's rounding into sums of 1e5 where the float64 reference
    has 0. Now both are graphfuser's: the sums are the rounding of the second's bf16 output."""
    def two(x0, x3, x4, x5, x6, x7):
        v0 = F.instance_norm(x0, None, None, x3, x4, True, 0.1, 1e-12)
        v1 = F.instance_norm(v0, x5, x6, x7, None, True, 0.1, 1e-12)
        return torch.sum(v1, [2], keepdim=True, dtype=torch.float32)

    torch.manual_seed(3)
    x0 = (torch.randn(1, 16, 1000) + 1e4).bfloat16()
    args = [x0, torch.randn(16).bfloat16(), torch.randn(16).bfloat16(), torch.randn(16), torch.rand(16) + 0.5,
            torch.full((16,), 100.0)]
    sf = graphfuser.script(two)
    for _ in range(3):
        got = sf(*[a.clone() for a in args])
    kinds = _fused_kinds(sf)
    assert "aten::instance_norm" in kinds and "aten::var" in kinds, kinds
    # the row sums of a normalized row times 100: the bf16 rounding of 1000 values near +-100 each
    assert got.abs().max() < 1000.0, got.flatten()
