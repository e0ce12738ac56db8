"""Attention written by hand becomes scaled_dot_product_attention (passes/attention.py): results
against eager, where the rewrite must happen and where it must not."""
import math

import pytest
import torch
import torch.nn as nn
from hypothesis import given, settings
from hypothesis import strategies as st

import graphfuser
from graphfuser.config import config


class TimmAttention(nn.Module):
    """timm's Attention as TorchScript sees it: the scale folded into q, an nn.Dropout."""

    def __init__(self, dim: int = 32, heads: int = 4, drop: float = 0.0) -> None:
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.attn_drop = nn.Dropout(drop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q = q * self.scale
        attn = q @ k.transpose(-2, -1)
        attn = attn.softmax(dim=-1)
        attn = self.attn_drop(attn)
        x = attn @ v
        return self.proj(x.transpose(1, 2).reshape(B, N, C))


def scaled_after(q, k, v, mask):
    s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    s = s + mask
    return torch.softmax(s, dim=-1) @ v


def scaled_by_value(q, k, v, scale: float):
    return torch.softmax((q @ k.transpose(-2, -1)) * scale, -1) @ v


def weights_returned(q, k, v):
    p = torch.softmax(q @ k.transpose(-2, -1), -1)
    return p @ v, p


def bool_mask_added(q, k, v, mask):
    return torch.softmax(q @ k.transpose(-2, -1) + mask, -1) @ v


def _sdpa_in(sf, *args) -> bool:
    g = str(sf.graph_for(*args))
    return "aten::scaled_dot_product_attention" in g


def _run(fn, *args, calls: int = 4):
    sf = graphfuser.script(fn)
    out = None
    for _ in range(calls):
        out = sf(*args)
    return sf, out


def _qkv(b=2, h=3, lq=5, s=7, e=8, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, h, lq, e, generator=g, dtype=dtype), torch.randn(b, h, s, e, generator=g, dtype=dtype),
            torch.randn(b, h, s, e, generator=g, dtype=dtype))


def test_timm_attention_becomes_sdpa_at_two_shapes():
    m = TimmAttention().eval()
    sf = graphfuser.script(m)
    for shape in ((2, 10, 32), (3, 17, 32)):
        x = torch.randn(*shape)
        for _ in range(4):
            y = sf(x)
        torch.testing.assert_close(y, m(x), rtol=1e-5, atol=1e-5)
    assert _sdpa_in(sf, x)
    assert "aten::softmax" not in str(sf.graph_for(x))


def test_scale_after_the_product_and_a_float_mask():
    q, k, v = _qkv()
    mask = torch.zeros(1, 1, 5, 7)
    mask[..., 3:] = float("-inf")
    sf, out = _run(scaled_after, q, k, v, mask)
    torch.testing.assert_close(out, scaled_after(q, k, v, mask), rtol=1e-5, atol=1e-5)
    assert _sdpa_in(sf, q, k, v, mask)


def test_scale_as_a_run_time_float():
    q, k, v = _qkv()
    sf, out = _run(scaled_by_value, q, k, v, 0.3)
    torch.testing.assert_close(out, scaled_by_value(q, k, v, 0.3), rtol=1e-5, atol=1e-5)
    assert _sdpa_in(sf, q, k, v, 0.3)
    torch.testing.assert_close(sf(q, k, v, 2.0), scaled_by_value(q, k, v, 2.0), rtol=1e-5, atol=1e-5)


def test_returned_weights_keep_the_graph_as_written():
    q, k, v = _qkv()
    sf, (o, p) = _run(weights_returned, q, k, v)
    eo, ep = weights_returned(q, k, v)
    torch.testing.assert_close(o, eo)
    torch.testing.assert_close(p, ep)
    assert not _sdpa_in(sf, q, k, v)


def test_a_bool_mask_added_is_not_a_mask():
    q, k, v = _qkv()
    mask = torch.rand(2, 3, 5, 7) > 0.5
    sf, out = _run(bool_mask_added, q, k, v, mask)
    torch.testing.assert_close(out, bool_mask_added(q, k, v, mask))
    assert not _sdpa_in(sf, q, k, v, mask)


def test_a_mask_that_widens_the_scores_is_left_alone():
    q, k, v = _qkv(b=1)
    mask = torch.randn(4, 3, 5, 7)          # broadcasts the batch of the scores from 1 to 4
    sf, out = _run(scaled_after, q, k, v, mask)
    torch.testing.assert_close(out, scaled_after(q, k, v, mask), rtol=1e-5, atol=1e-5)
    assert not _sdpa_in(sf, q, k, v, mask)


def test_knob_keeps_attention_as_written():
    q, k, v = _qkv()
    mask = torch.zeros(1, 1, 5, 7)
    with config.override(disable=["attention_rewrite"]):
        sf, out = _run(scaled_after, q, k, v, mask)
        assert not _sdpa_in(sf, q, k, v, mask)
    torch.testing.assert_close(out, scaled_after(q, k, v, mask), rtol=1e-5, atol=1e-5)


def test_training_gradients_match_eager():
    torch.manual_seed(0)
    m = TimmAttention().train()             # dropout p = 0: the identity, so the rewrite applies
    ref = TimmAttention().train()
    ref.load_state_dict(m.state_dict())
    sf = graphfuser.script(m)
    x = torch.randn(2, 9, 32)
    for _ in range(4):
        m.zero_grad()
        sf(x).square().sum().backward()
    ref(x).square().sum().backward()
    for (name, p), (_, r) in zip(m.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(p.grad, r.grad, rtol=1e-4, atol=1e-5, msg=name)
    assert _sdpa_in(sf, x)


def test_dropout_in_training_is_not_rewritten():
    m = TimmAttention(drop=0.5).train()
    sf = graphfuser.script(m)
    x = torch.randn(2, 9, 32)
    for _ in range(4):
        sf(x)
    assert not _sdpa_in(sf, x)
    m.eval()                                # eval: the dropout is gone, its own specialization
    for _ in range(4):
        y = sf(x)
    torch.testing.assert_close(y, m(x), rtol=1e-5, atol=1e-5)
    assert _sdpa_in(sf, x)


def test_bf16_autocast_on_the_cpu():
    m = TimmAttention().eval()
    sf = graphfuser.script(m)
    x = torch.randn(2, 10, 32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for _ in range(4):
            y = sf(x)
        want = m(x)
        assert _sdpa_in(sf, x)
    assert y.dtype == want.dtype
    torch.testing.assert_close(y.float(), want.float(), rtol=3e-2, atol=3e-2)


@settings(max_examples=12, deadline=None)
@given(b=st.integers(1, 3), h=st.integers(1, 3), lq=st.integers(1, 9), s=st.integers(1, 9),
       e=st.sampled_from([1, 4, 16]), dtype=st.sampled_from([torch.float32, torch.float64]),
       masked=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_generated_shapes_match_eager(b, h, lq, s, e, dtype, masked, seed):
    q, k, v = _qkv(b, h, lq, s, e, dtype, seed)
    mask = torch.randn(1, h, lq, s, dtype=dtype) if masked else torch.zeros(1, 1, 1, s, dtype=dtype)
    sf, out = _run(scaled_after, q, k, v, mask)
    want = scaled_after(q, k, v, mask)
    tol = 1e-5 if dtype == torch.float32 else 1e-10
    torch.testing.assert_close(out, want, rtol=tol, atol=tol)
    assert out.dtype == want.dtype and out.shape == want.shape
