"""Batched weight casts (executor/weight_casts.py): under autocast the weights' casts run as one
multi-tensor launch per run of casts (under grad their gradients' casts back too). The results,
gradients included, are those of the same program with the batching off, bit for bit, through
both frontends; a weight changed between calls is cast anew; and the knob turns it off."""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import graphfuser
from helpers import bf16_training_output
from graphfuser.config import config
from graphfuser.executor import weight_casts


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.fc2 = nn.Linear(64, 64)
        self.head = nn.Linear(64, 16, bias=False)
        self.norm = nn.LayerNorm(64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.norm(self.fc1(x)))
        h = h + self.fc2(h)
        # the head's weight used twice: one cast (autocast's cache makes one too)
        return self.head(h) + self.head(h * 0.5)


@pytest.fixture(autouse=True)
def on_cpu(monkeypatch):
    monkeypatch.setattr(weight_casts, "DEVICES", ("cuda", "cpu"))


def _entry(frontend: str, m: nn.Module):
    if frontend == "script":
        return graphfuser.script(m)
    from graphfuser.frontend.dynamo import graphfuser_backend

    torch._dynamo.reset()
    return torch.compile(m, backend=graphfuser_backend)


def _run(f, x, dtype=torch.bfloat16):
    with torch.no_grad(), torch.autocast("cpu", dtype=dtype):
        return f(x)


def _batched(g) -> int:
    return sum(1 for n in g.all_nodes() if n.kind == "prim::PythonOp"
               and isinstance(getattr(n.attrs.get("call"), "fn", None), weight_casts.BatchedCast))


@pytest.mark.parametrize("frontend", ["script", "compile"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_batched_casts_are_the_casts(frontend, dtype):
    torch.manual_seed(0)
    m = Net().eval()
    x = torch.randn(8, 32)
    casts = weight_casts.STATS["casts"]
    f = _entry(frontend, m)
    for _ in range(4):
        out = _run(f, x, dtype)
    assert weight_casts.STATS["casts"] > casts
    assert _batched(graphfuser.last_executed_optimized_graph()) >= 1
    with config.override(disable=["weight_cast_batching"]):
        plain = _entry(frontend, m)
        for _ in range(4):
            expect = _run(plain, x, dtype)
        assert _batched(graphfuser.last_executed_optimized_graph()) == 0
    assert out.dtype == expect.dtype == _run(m, x, dtype).dtype
    assert torch.equal(out, expect)
    torch.testing.assert_close(out.float(), _run(m, x, dtype).float(), rtol=3e-2, atol=3e-2)
    # a weight changed between calls: the next call casts it as it is then
    with torch.no_grad():
        m.fc2.weight.mul_(-2.0)
        m.head.weight.add_(0.25)
    assert torch.equal(_run(f, x, dtype), _run(plain, x, dtype))


def test_batches_are_cut_at_the_byte_bound(monkeypatch):
    """Casts made before their use stay a bounded amount of memory ahead of it."""
    monkeypatch.setattr(weight_casts, "BATCH_BYTES", 64 * 64 * 2 + 1)
    torch.manual_seed(0)
    m = Net().eval()
    s = graphfuser.script(m)
    x = torch.randn(4, 32)
    for _ in range(3):
        out = _run(s, x)
    g = graphfuser.last_executed_optimized_graph()
    assert _batched(g) >= 1
    for n in g.all_nodes():
        fn = getattr(n.attrs.get("call"), "fn", None) if n.kind == "prim::PythonOp" else None
        if isinstance(fn, weight_casts.BatchedCast):
            assert sum(math.prod(v.type.sizes) * 2 for v in n.inputs) <= weight_casts.BATCH_BYTES
    with config.override(disable=["weight_cast_batching"]):
        plain = graphfuser.script(m)
        for _ in range(3):
            expect = _run(plain, x)
    assert torch.equal(out, expect)


def _grads(m: nn.Module) -> dict:
    return {k: None if p.grad is None else p.grad.clone() for k, p in m.named_parameters()}


@pytest.mark.parametrize("frontend", ["script", "compile"])
def test_under_grad_the_batch_is_one_autograd_node(frontend):
    """Under grad the batch's backward casts every gradient back in one multi-tensor copy: the
    weights' gradients are those of the same program with the batching off, bit for bit."""
    torch.manual_seed(0)
    m = Net()
    x = torch.randn(8, 32)
    results = {}
    for mode in ("batched", "plain"):
        m.zero_grad(set_to_none=True)
        with config.override(disable=["weight_cast_batching"] if mode == "plain" else []):
            f = _entry(frontend, m)
            for _ in range(2):
                bf16_training_output(f, x).float().sum().backward()
            m.zero_grad(set_to_none=True)
            out = bf16_training_output(f, x)
            assert (_batched(graphfuser.last_executed_optimized_graph()) >= 1) == (mode == "batched")
            out.float().square().sum().backward()
        results[mode] = out.detach(), _grads(m)
    assert torch.equal(results["batched"][0], results["plain"][0])
    got, expect = results["batched"][1], results["plain"][1]
    assert all(got[k] is not None and got[k].dtype == torch.float32 for k in got)
    for k in got:
        assert torch.equal(got[k], expect[k]), k


def test_batched_cast_backward():
    """A result the loss does not reach gives its weight no gradient (as eager's cast); a weight
    that does not require grad gets none; a double backward differentiates the casts back."""
    fn = weight_casts.BatchedCast((torch.bfloat16, torch.bfloat16, torch.bfloat16))
    w = [torch.randn(5, 7, requires_grad=True), torch.randn(3, requires_grad=True), torch.randn(4)]
    a, b, c = fn(*w)
    assert a.grad_fn is not None and a.grad_fn is b.grad_fn and not c.requires_grad
    (a.float() * 3).sum().backward()
    assert torch.equal(w[0].grad, torch.full((5, 7), 3.0)) and w[1].grad is None
    # create_graph: the gradient's cast back is recorded
    v = torch.randn(6, requires_grad=True)
    (y,) = weight_casts.BatchedCast((torch.bfloat16,))(v)
    (gv,) = torch.autograd.grad((y.float() ** 2).sum(), v, create_graph=True)
    assert gv.dtype == torch.float32 and gv.requires_grad
    (ggv,) = torch.autograd.grad(gv.sum(), v)
    assert torch.equal(ggv, torch.full((6,), 2.0))


def test_batched_cast_call_keeps_layouts_and_odd_weights():
    """The runtime call: a transposed weight keeps its strides (as ``to`` does), a weight already
    in the dtype and a non-dense one are cast as ``to`` casts them."""
    fn = weight_casts.BatchedCast((torch.bfloat16, torch.bfloat16, torch.bfloat16, torch.float16))
    w = [torch.randn(5, 7).t(), torch.randn(3, dtype=torch.bfloat16), torch.randn(6, 4)[:, ::2], torch.randn(0, 3)]
    got = fn(*w)
    for g, x, d in zip(got, w, fn.dtypes):
        e = x.to(d)
        assert g.dtype == e.dtype and g.shape == e.shape and g.stride() == e.stride()
        assert torch.equal(g, e)


class WritesItsWeight(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 16)
        self.fc2 = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        self.fc2.weight.mul_(0.5)       # read by fc2 after this write: its cast must follow it
        return self.fc2(h)


def test_a_weight_written_in_the_forward_is_cast_after_the_write():
    torch.manual_seed(0)
    m, ref = WritesItsWeight().eval(), WritesItsWeight().eval()
    ref.load_state_dict(m.state_dict())
    s = graphfuser.script(m)
    x = torch.randn(4, 16)
    for _ in range(4):
        out, expect = _run(s, x), _run(ref, x)
        torch.testing.assert_close(out.float(), expect.float(), rtol=3e-2, atol=3e-2)
    torch.testing.assert_close(m.fc2.weight, ref.fc2.weight)


def test_a_padded_gemm_pads_the_batched_cast(monkeypatch):
    """passes/gemm_pad.py casts a misaligned head's weight and pads it by one copy
    (``graphfuser::pad_rows`` of the float32 weight): the other weights' casts are batched, the
    head's is its own pad, not a batched cast copied again."""
    from graphfuser.passes import gemm_pad

    monkeypatch.setattr(gemm_pad, "DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(gemm_pad, "MIN_ELEMENTS", 1)
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 1001)).eval()
    x = torch.randn(6, 32)
    f = _entry("compile", m)
    for _ in range(4):
        out = _run(f, x)
    g = graphfuser.last_executed_optimized_graph()
    pads = [n for n in g.all_nodes() if n.kind == "graphfuser::pad_rows"]
    assert _batched(g) == 1 and pads and all(p.inputs[0].type.dtype == torch.float32 for p in pads)
    with config.override(disable=["weight_cast_batching"]):
        plain = _entry("compile", m)
        for _ in range(4):
            expect = _run(plain, x)
    assert out.shape == (6, 1001) and out.stride() == (1008, 1)     # the padded view (padded_outputs)
    assert torch.equal(out, expect)
