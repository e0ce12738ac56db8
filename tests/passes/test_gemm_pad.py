"""Misaligned linears compute into a padded width (passes/gemm_pad.py). The rewrite targets
cuBLAS; these tests switch it on for the CPU too, so the rewritten program runs here against
eager: forward and gradients, a result that leaves the graph (eager's contiguous layout) and one
a fused group reads strided, through both frontends."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import graphfuser
from graphfuser.passes import gemm_pad


@pytest.fixture
def on_cpu(monkeypatch):
    monkeypatch.setattr(gemm_pad, "DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(gemm_pad, "MIN_ELEMENTS", 1)


class Head(nn.Module):
    def __init__(self, k: int = 64, n: int = 1001, bias: bool = True) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(k)
        self.lm_head = nn.Linear(k, n, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.norm(x))


class HeadThenGelu(Head):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.lm_head(self.norm(x))) * 2.0


def _optimized(fn) -> str:
    return str(graphfuser.last_executed_optimized_graph())


@pytest.mark.parametrize("cls", [Head, HeadThenGelu])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_padded_linear_matches_eager(on_cpu, cls, bias, dtype):
    torch.manual_seed(0)
    m = cls(bias=bias).to(dtype)
    s = graphfuser.script(m)
    for batch in (3, 5):
        x = torch.randn(batch, 7, 64, dtype=dtype)
        for _ in range(3):
            out = s(x)
        ref = m(x)
        assert out.shape == ref.shape and out.is_contiguous()
        torch.testing.assert_close(out, ref)
    g = _optimized(s)
    if cls is HeadThenGelu and bias:
        # the bias add left the linear to fuse with the GELU (passes/bias.py): not padded
        assert "graphfuser::pad_rows" not in g
        return
    assert "graphfuser::pad_rows" in g and "aten::slice" in g
    # the result leaves the graph: eager's layout; read by a fused group: no copy
    assert ("aten::contiguous" in g) == (cls is Head)


def test_padded_linear_gradients(on_cpu):
    torch.manual_seed(0)
    m = Head(n=999)
    ref = Head(n=999)
    ref.load_state_dict(m.state_dict())
    s = graphfuser.script(m)
    x = torch.randn(4, 64)
    for _ in range(3):
        m.zero_grad()
        s(x).square().sum().backward()
    ref(x).square().sum().backward()
    assert "graphfuser::pad_rows" in _optimized(s)
    for (name, a), b in zip(m.named_parameters(), ref.parameters()):
        torch.testing.assert_close(a.grad, b.grad, msg=lambda e: f"{name}: {e}")


def test_aligned_or_small_linears_are_left_alone(monkeypatch):
    monkeypatch.setattr(gemm_pad, "DEVICES", ("cuda", "cpu"))
    for n in (1000, 1001):      # aligned; misaligned but under MIN_ELEMENTS
        s = graphfuser.script(Head(n=n))
        x = torch.randn(2, 64)
        for _ in range(3):
            s(x)
        assert "pad_rows" not in _optimized(s)


def test_not_on_cpu_by_default():
    s = graphfuser.script(Head(k=1024, n=1025))
    for _ in range(3):
        s(torch.randn(2, 1024))
    assert "pad_rows" not in _optimized(s)


@pytest.mark.parametrize("eager_layout", [False, True])
def test_through_the_backend(on_cpu, eager_layout):
    # torch.compile returns the padded result as a strided view of its padded buffer (as
    # Inductor does); PYTORCH_NVFUSER_DISABLE=padded_outputs copies it into eager's layout
    from graphfuser.config import config
    from graphfuser.frontend.dynamo import graphfuser_backend

    torch.manual_seed(0)
    torch._dynamo.reset()
    m = Head(n=777)
    f = torch.compile(m, backend=graphfuser_backend)
    with config.override(disable=["padded_outputs"] if eager_layout else []):
        for grad in (False, True):
            for seq in (5, 9):
                x = torch.randn(2, seq, 64)
                with torch.set_grad_enabled(grad):
                    for _ in range(3):
                        out = f(x)
                    ref = m(x)
                torch.testing.assert_close(out, ref)
                assert out.shape == ref.shape
                if grad:        # (under grad too: its gradient goes back through the slice)
                    g = torch.randn_like(ref)
                    got = torch.autograd.grad(out, list(m.parameters()), g)
                    want = torch.autograd.grad(ref, list(m.parameters()), g)
                    for a, b in zip(got, want):
                        torch.testing.assert_close(a, b)
                if eager_layout:
                    assert out.is_contiguous()
                else:
                    assert out.stride() == (seq * 780, 780, 1)      # 777 padded to 780 (16 bytes of fp32)
                    assert out.view(-1, 777).shape == (2 * seq, 777)     # what a language model's loss does


def test_through_the_backend_every_call_has_one_layout(on_cpu):
    # the profiling calls too return the padded view (executor/profile.py pad_returns): a caller
    # compiled for the strides it saw (a loss function after a graph break: Dynamo guards its
    # inputs' strides) is not compiled again once the optimized program runs
    from graphfuser.frontend.dynamo import graphfuser_backend

    torch.manual_seed(0)
    torch._dynamo.reset()
    m = Head(n=777, bias=False)
    f = torch.compile(m, backend=graphfuser_backend)
    compiles = []

    def counting(gm, example_inputs):
        compiles.append(gm)
        return gm.forward

    loss = torch.compile(lambda z, t: F.cross_entropy(z.view(-1, 777), t.view(-1)), backend=counting)
    x, t = torch.randn(2, 5, 64), torch.randint(0, 777, (2, 5))
    strides = set()
    for grad in (False, True):
        compiles.clear()
        for _ in range(4):
            with torch.set_grad_enabled(grad):
                out = f(x)
                got = loss(out, t)
            strides.add(out.stride())
            torch.testing.assert_close(got, F.cross_entropy(m(x).view(-1, 777), t.view(-1)))
            if grad:
                got.backward()
        assert len(compiles) == 1      # (one per grad mode: Dynamo guards it)
    assert strides == {(5 * 780, 780, 1)}


def test_knob_turns_it_off(on_cpu):
    from graphfuser.config import config

    with config.override(disable=["gemm_padding"]):
        s = graphfuser.script(Head())
        for _ in range(3):
            s(torch.randn(2, 64))
        assert "pad_rows" not in _optimized(s)


def test_under_autocast_the_cast_weight_is_padded(on_cpu):
    """Under bf16 autocast the fp32 weight is cast once and the cast padded; the result is bf16
    as eager's, and matches eager's (the same bf16 product)."""
    torch.manual_seed(0)
    m = Head(k=64, n=1001)
    s = graphfuser.script(m)
    x = torch.randn(3, 7, 64)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        for _ in range(3):
            out = s(x)
        ref = m(x)
    assert out.dtype == ref.dtype == torch.bfloat16 and out.is_contiguous()
    torch.testing.assert_close(out, ref)
    g = _optimized(s)
    assert "graphfuser::pad_rows" in g and "aten::to" not in g


def test_under_autocast_training_gradients(on_cpu):
    torch.manual_seed(0)
    m, ref = Head(n=999), Head(n=999)
    ref.load_state_dict(m.state_dict())
    s = graphfuser.script(m)
    x = torch.randn(4, 5, 64)
    for _ in range(3):
        m.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = s(x)
        out.float().square().sum().backward()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expect = ref(x)
    expect.float().square().sum().backward()
    torch.testing.assert_close(out, expect)
    assert "graphfuser::pad_rows" in _optimized(s)
    for (name, a), b in zip(m.named_parameters(), ref.parameters()):
        assert a.grad.dtype == b.grad.dtype == torch.float32
        torch.testing.assert_close(a.grad, b.grad, rtol=2e-2, atol=2e-2, msg=lambda e: f"{name}: {e}")
