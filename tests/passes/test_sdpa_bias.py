"""Boolean attention masks converted once to the bias SDPA's backend would make
(passes/sdpa_bias.py), run on the CPU here (the pass is made for CUDA only; the CPU's flash and
math backends convert to 0 / -inf as CUDA's memory-efficient one does): results and gradients
bitwise eager's, one conversion for layers sharing a mask, fused with the mask's own ops, the
boolean mask back where a later call's backend choice differs, the knob."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import graphfuser
from graphfuser.config import config
from graphfuser.ops.matmul import check_bias
from graphfuser.passes import sdpa_bias


@pytest.fixture(autouse=True)
def _cpu_plans(monkeypatch):
    monkeypatch.setattr(sdpa_bias, "DEVICES", ("cuda", "cpu"))


class TwoLayers(nn.Module):
    """GPT-2's attention in small: a causal and a padding mask made once, read by two layers."""

    def __init__(self, d: int = 32, heads: int = 4, dropout: float = 0.0) -> None:
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.qkv = nn.ModuleList([nn.Linear(d, 3 * d) for _ in range(2)])
        self.out = nn.ModuleList([nn.Linear(d, d) for _ in range(2)])

    def forward(self, x, keep):
        n, t, d = x.shape
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        mask = causal[None, None] & keep[:, None, None, :]
        for qkv, out in zip(self.qkv, self.out):
            q, k, v = qkv(x).view(n, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.dropout)
            x = x + out(o.transpose(1, 2).reshape(n, t, d))
        return x


def _inputs(n=3, t=10, d=32, dtype=torch.float32):
    torch.manual_seed(1)
    keep = torch.ones(n, t, dtype=torch.bool)
    keep[1, t // 2:] = False
    keep[-1] = False        # every key masked: rows of no key
    return torch.randn(n, t, d, dtype=dtype), keep


def _nodes(sf):
    graphs = [sf._optimized] + [v._optimized for v in (sf._variants or {}).values() if v._optimized is not None]
    out = []
    for g in graphs:
        for n in g.all_nodes():
            out.append(n)
            if getattr(n, "subgraph", None) is not None:
                out.extend(n.subgraph.all_nodes())
    return out


def _same(a, b):
    return torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0))


def _close(a, b):
    """Eager's within rounding (a fused float64 bias add differs from addmm's in the last bit)."""
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_layers_read_one_bias_made_once_with_eagers_results(dtype):
    torch.manual_seed(0)
    m = TwoLayers().to(dtype)
    sf = graphfuser.script(m)
    plain = graphfuser.script(m)
    x, keep = _inputs(dtype=dtype)
    with torch.no_grad(), config.override(disable=["fallback"]):
        for _ in range(4):
            got = sf(x, keep)
            _close(got, m(x, keep))
            if dtype != torch.float64:
                assert _same(got, m(x, keep))
    with torch.no_grad(), config.override(disable=["fallback", "sdpa_bias"]):
        for _ in range(4):
            p = plain(x, keep)
        assert _same(got, p)        # steady state: the attention's values exactly as without the pass
    nodes = _nodes(sf)
    checks = [n for n in nodes if n.kind == "graphfuser::sdpa_bias_check"]
    wheres = [n for n in nodes if n.kind == "aten::where" and n.owner.graph is not sf._optimized]
    assert len(checks) == 2 and len({c.inputs[3] for c in checks}) == 1, str(sf._optimized)
    # the conversion fused with the mask's own ``&`` (one group: fused and fallback subgraphs)
    assert wheres and all(any(m.kind == "aten::__and__" for m in w.owner.nodes) for w in wheres)
    sdpas = [n for n in nodes if n.kind == "aten::scaled_dot_product_attention"]
    assert all(s.inputs[3].node.kind == "graphfuser::sdpa_bias_check" for s in sdpas)


def test_a_new_sequence_length_and_batch_reuse_the_bias():
    torch.manual_seed(0)
    m = TwoLayers()
    sf = graphfuser.script(m)
    with torch.no_grad(), config.override(disable=["fallback"]):
        for n, t in ((3, 10), (3, 10), (3, 10), (5, 7), (2, 16)):
            x, keep = _inputs(n, t)
            assert _same(sf(x, keep), m(x, keep))


def test_gradients_are_eagers():
    torch.manual_seed(0)
    m, ref = TwoLayers(), TwoLayers()
    ref.load_state_dict(m.state_dict())
    sf = graphfuser.script(m)
    x, keep = _inputs()
    with config.override(disable=["fallback"]):
        for _ in range(4):
            for mod, fn in ((m, sf), (ref, ref)):
                mod.zero_grad(set_to_none=True)
                fn(x, keep).square().sum().backward()
            for (name, p), q in zip(m.named_parameters(), ref.parameters()):
                assert torch.equal(p.grad, q.grad), name
    assert any(n.kind == "graphfuser::sdpa_bias_check" for n in _nodes(sf))


def test_another_backend_later_gets_the_boolean_mask_back():
    """Planned for the CPU's flash backend (0 / -inf); a later call under ``sdpa_kernel(MATH)``
    is asked again and runs with the boolean mask (the math backend converts it itself)."""
    torch.manual_seed(0)
    m = TwoLayers()
    sf = graphfuser.script(m)
    x, keep = _inputs()
    with torch.no_grad(), config.override(disable=["fallback"]):
        for _ in range(3):
            sf(x, keep)
        with sdpa_kernel([SDPBackend.MATH]):
            assert _same(sf(x, keep), m(x, keep))


def test_check_gives_the_boolean_mask_back_exactly():
    q = torch.randn(2, 3, 5, 8)
    mask = torch.rand(2, 1, 5, 5) > 0.4
    for fill in (-65504.0, float("-inf")):
        bias = torch.where(mask, 0.0, fill)
        choice = torch._fused_sdp_choice(q, q, q, bias, 0.0, False)
        assert check_bias(q, q, q, bias, 0.0, False, None, False, choice) is bias
        back = check_bias(q, q, q, bias, 0.0, False, None, False, choice + 7)
        assert back.dtype == torch.bool and torch.equal(back, mask)


def test_disabled_by_its_knob():
    torch.manual_seed(0)
    m = TwoLayers()
    sf = graphfuser.script(m)
    x, keep = _inputs()
    with torch.no_grad(), config.override(disable=["fallback", "sdpa_bias"]):
        for _ in range(4):
            assert _same(sf(x, keep), m(x, keep))
    assert not any(n.kind == "graphfuser::sdpa_bias_check" for n in _nodes(sf))


def test_float_masks_dropout_and_causal_calls_keep_theirs():
    class Kinds(nn.Module):
        def forward(self, q, fmask, bmask):
            a = F.scaled_dot_product_attention(q, q, q, attn_mask=fmask)
            b = F.scaled_dot_product_attention(q, q, q, is_causal=True)
            c = F.scaled_dot_product_attention(q, q, q, attn_mask=bmask, dropout_p=0.5)
            return a + b + c * 0

    sf = graphfuser.script(Kinds())
    q = torch.randn(2, 3, 5, 8)
    bmask = torch.rand(2, 1, 5, 5) > 0.4
    with torch.no_grad(), config.override(disable=["fallback"]):
        for _ in range(4):
            torch.manual_seed(3)
            got = sf(q, torch.randn(5, 5), bmask)
    nodes = _nodes(sf)
    # the dropout call reads a bias too (constant dropout): only the boolean one of the three
    checks = [n for n in nodes if n.kind == "graphfuser::sdpa_bias_check"]
    assert len(checks) == 1 and got.shape == q.shape


def test_through_the_torch_compile_backend():
    from graphfuser.frontend.dynamo import graphfuser_backend

    torch.manual_seed(0)
    m = TwoLayers()
    torch._dynamo.reset()
    f = torch.compile(m, backend=graphfuser_backend, dynamic=False)
    with torch.no_grad(), config.override(disable=["fallback"]):
        for _ in range(4):
            x, keep = _inputs()
            assert _same(f(x, keep), m(x, keep))
    text = str(graphfuser.last_executed_optimized_graph())
    assert "graphfuser::sdpa_bias_check" in text, text


def test_a_mask_written_in_place_between_calls_gets_a_bias_per_call():
    """The second call reads the mask after an in-place write: a bias made where the mask is made
    would miss it."""
    def f(q, k, v, keep):
        m = torch.ones(q.size(2), q.size(2), dtype=torch.bool).tril()[None, None] & keep[:, None, None, :]
        a = F.scaled_dot_product_attention(q, k, v, m)
        m[:, :, :, 0] = False
        b = F.scaled_dot_product_attention(q, k, v, m)
        return a + b

    sf = graphfuser.script(f)
    q = torch.randn(2, 3, 8, 4)
    keep = torch.ones(2, 8, dtype=torch.bool)
    with torch.no_grad(), config.override(disable=["fallback"]):
        for _ in range(4):
            got, want = sf(q, q * 0.5, q, keep), f(q, q * 0.5, q, keep)
            assert _same(got, want)
    checks = [n for n in _nodes(sf) if n.kind == "graphfuser::sdpa_bias_check"]
    assert len(checks) == 2 and checks[0].inputs[3] is not checks[1].inputs[3]


def test_attention_dropout_in_training_draws_as_eager():
    """GPT-2's attention dropout in training (a constant p beside the mask): the call reads the
    bias, and with the same seed draws the same mask as eager's call with the boolean mask."""
    torch.manual_seed(0)
    m, ref = TwoLayers(dropout=0.25), TwoLayers(dropout=0.25)
    ref.load_state_dict(m.state_dict())
    sf = graphfuser.script(m)
    x, keep = _inputs()
    with config.override(disable=["fallback"]):
        for step in range(4):
            outs = []
            for fn in (sf, ref):
                torch.manual_seed(100 + step)
                outs.append(fn(x, keep))
            assert _same(outs[0], outs[1]), step
    assert any(n.kind == "graphfuser::sdpa_bias_check" for n in _nodes(sf))
