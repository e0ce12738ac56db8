"""SDPA calls on the math backend written out as two GEMMs around a fused mask add and
``_safe_softmax`` (passes/sdpa_math.py), run on the CPU here under ``sdpa_kernel(MATH)`` (the
plan itself is made for CUDA only): values, gradients and fully masked rows are eager's."""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import graphfuser
from graphfuser.config import config
from graphfuser.passes import sdpa_math


@pytest.fixture(autouse=True)
def _cpu_plans(monkeypatch):
    monkeypatch.setattr(sdpa_math, "DEVICES", ("cuda", "cpu"))


class BiasedAttention(nn.Module):
    """T5's attention in small: a learned bias per head and a padding mask, one additive mask."""
    __constants__ = ["scale"]

    def __init__(self, d: int = 32, heads: int = 4, length: int = 10, scale=None) -> None:
        super().__init__()
        self.heads, self.scale = heads, scale
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.bias = nn.Parameter(torch.randn(1, heads, length, length))

    def forward(self, x, keep):
        n, t, d = x.shape
        q, k, v = self.qkv(x).view(n, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        mask = torch.where(keep[:, None, None, :], self.bias, -3.0e38).contiguous()
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale)
        return self.out(o.transpose(1, 2).reshape(n, t, d))


class Scores(BiasedAttention):
    """The attention's own result (bf16 under autocast), no projection after it."""

    def forward(self, x, keep):
        n, t, d = x.shape
        q, k, v = self.qkv(x).view(n, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        mask = torch.where(keep[:, None, None, :], self.bias, -3.0e38).contiguous()
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


class InfMasked(BiasedAttention):
    """A mask of 0 / -inf: a query row whose keys are all masked gives zeros."""

    def forward(self, x, keep):
        n, t, d = x.shape
        q, k, v = self.qkv(x).view(n, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        mask = torch.zeros(n, 1, t, t).masked_fill(~keep[:, None, :, None], float("-inf"))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask + self.bias)


def _inputs(n=3, t=10, d=32):
    torch.manual_seed(1)
    keep = torch.ones(n, t, dtype=torch.bool)
    keep[1, t // 2:] = False
    return torch.randn(n, t, d), keep


def _written_out(sf) -> bool:
    nodes = list(sf._optimized.all_nodes())
    subs = [m for n in nodes if getattr(n, "subgraph", None) is not None for m in n.subgraph.all_nodes()]
    return not any(n.kind == "aten::scaled_dot_product_attention" for n in nodes) and \
        any(m.kind == "aten::_safe_softmax" for m in subs)


def _run(cls, autocast=False, disable=(), backends=(SDPBackend.MATH,), calls=5, **kw):
    torch.manual_seed(0)
    m = cls(**kw)
    sf = graphfuser.script(m)
    x, keep = _inputs()
    ctx = torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast)
    with torch.no_grad(), sdpa_kernel(list(backends)), ctx, config.override(disable=["fallback", *disable]):
        for _ in range(calls):
            got, want = sf(x, keep), m(x, keep)
            tol = 2e-2 if autocast else 1e-5
            torch.testing.assert_close(got, want, rtol=tol, atol=tol)
    return sf


@pytest.mark.parametrize("scale", [None, 0.3, -0.2])
def test_math_backend_calls_are_written_out_with_eagers_values(scale):
    sf = _run(BiasedAttention, scale=scale)
    assert _written_out(sf), str(sf._optimized)


def _autocast_graphs(sf):
    return [v._optimized for v in sf._variants.values() if v._optimized is not None]


def test_under_autocast_on_the_cpu_the_products_stay_bf16():
    """bf16 autocast on the CPU: autocast casts the mask to bf16 with q, k, v, and the math backend
    computes in bf16 there (no float32 casts); values agree to bf16's rounding (the fused mask add
    and softmax keep float32 between them, as every fused group does)."""
    sf = _run(BiasedAttention, autocast=True)
    graphs = _autocast_graphs(sf)
    assert any(n.kind == "graphfuser::exact_matmul" for g in graphs for n in g.all_nodes())
    assert not any(n.kind == "aten::to" for g in graphs for n in g.all_nodes())


def test_a_wider_mask_keeps_the_call():
    """The CPU's math backend adds the mask in place into bf16 scores: a float32 mask beside bf16
    q, k, v (no autocast to cast it) would make a written out add float32: the call stays."""
    class Wide(nn.Module):
        def forward(self, q, k, v, mask):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    sf = graphfuser.script(Wide())
    q, k, v = (torch.randn(2, 3, 5, 8, dtype=torch.bfloat16) for _ in range(3))
    mask = torch.randn(2, 3, 5, 5)
    with torch.no_grad(), sdpa_kernel([SDPBackend.MATH]), config.override(disable=["fallback"]):
        for _ in range(5):
            torch.testing.assert_close(sf(q, k, v, mask), Wide()(q, k, v, mask))
    assert not _written_out(sf)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_under_autocast_on_cuda_the_products_stay_float32():
    """bf16 autocast on CUDA: eager's math backend multiplies the float32 casts of q, k, v; the
    written out products run with autocast off (a bf16 product would be off by bf16's rounding)."""
    torch.manual_seed(0)
    m = Scores().cuda()
    sf = graphfuser.script(m)
    x, keep = _inputs()
    x, keep = x.cuda() * 4, keep.cuda()
    with torch.no_grad(), sdpa_kernel([SDPBackend.MATH]), torch.autocast("cuda", dtype=torch.bfloat16), \
            config.override(disable=["fallback"]):
        for _ in range(5):
            got, want = sf(x, keep), m(x, keep)
            assert got.dtype == want.dtype == torch.bfloat16
            torch.testing.assert_close(got, want, rtol=0, atol=1e-3)
    assert any(n.kind == "graphfuser::exact_matmul" for g in _autocast_graphs(sf) for n in g.all_nodes())


def test_fully_masked_rows_give_zeros_as_in_eager():
    sf = _run(InfMasked)
    assert _written_out(sf)


def test_other_backends_keep_the_call():
    sf = _run(BiasedAttention, backends=(SDPBackend.FLASH_ATTENTION, SDPBackend.MATH))
    if torch._fused_sdp_choice(*(torch.randn(3, 4, 10, 8),) * 3, torch.randn(3, 4, 10, 10)) != \
            int(SDPBackend.MATH):
        assert not _written_out(sf)


def test_disabled_by_its_knob():
    sf = _run(BiasedAttention, disable=["sdpa_math"])
    assert not _written_out(sf)


def test_under_grad_gradients_are_eagers():
    torch.manual_seed(0)
    m, ref = BiasedAttention(), BiasedAttention()
    ref.load_state_dict(m.state_dict())
    sf = graphfuser.script(m)
    x, keep = _inputs()
    with sdpa_kernel([SDPBackend.MATH]), config.override(disable=["fallback"]):
        for _ in range(5):
            for mod, fn in ((m, sf), (ref, ref)):
                mod.zero_grad(set_to_none=True)
                fn(x, keep).square().sum().backward()
            for (name, p), q in zip(m.named_parameters(), ref.parameters()):
                torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)
    assert _written_out(sf)


def test_the_scale_follows_the_head_dim():
    """No scale given: 1 / sqrt(E) comes from q's size at run time, not from the profiled one."""
    def attend(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    from graphfuser.frontend.dynamo import graphfuser_backend

    torch._dynamo.reset()
    f = torch.compile(attend, backend=graphfuser_backend, dynamic=True)
    with torch.no_grad(), sdpa_kernel([SDPBackend.MATH]), config.override(disable=["fallback"]):
        for e in (8, 8, 8, 8, 16, 64):
            q, k, v = (torch.randn(2, 3, 5, e) for _ in range(3))
            mask = torch.randn(2, 3, 5, 5)
            torch.testing.assert_close(f(q, k, v, mask), attend(q, k, v, mask), rtol=1e-5, atol=1e-5)
    assert math.isclose(1 / math.sqrt(64), 0.125)


def test_a_mask_wider_than_the_scores_raises_eagers_error():
    """Eager's math backend adds the mask in place: a later call whose mask has a wider batch than
    the queries raises there, and raises here too (a written out add would broadcast)."""
    class Attend(nn.Module):
        def forward(self, q, k, v, mask):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    sf = graphfuser.script(Attend())
    q, k, v = (torch.randn(1, 3, 5, 8) for _ in range(3))
    ok, wide = torch.randn(1, 3, 5, 5), torch.randn(2, 3, 5, 5)
    with torch.no_grad(), sdpa_kernel([SDPBackend.MATH]):
        for _ in range(4):
            torch.testing.assert_close(sf(q, k, v, ok), Attend()(q, k, v, ok))
        assert _written_out(sf)
        with pytest.raises(RuntimeError) as want:
            Attend()(q, k, v, wide)
        with pytest.raises(RuntimeError) as got:
            sf(q, k, v, wide)
    assert str(got.value).splitlines()[0] == str(want.value).splitlines()[0]
