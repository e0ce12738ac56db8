"""``unbind`` under grad with its gradient in its input's layout (passes/unbind_grad.py,
``graphfuser::dense_unbind``): the op's gradient against eager's in values and strides, for
dense, permuted, expanded and unused pieces; a fused-qkv attention block (timm's ``Attention``)
through ``torch.compile`` and ``graphfuser.script`` trained with the rewrite and without it,
bitwise the same and eager's within rounding; what the pass leaves alone."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import graphfuser
from graphfuser.config import config
from graphfuser.executor import executor as executor_module
from graphfuser.ops.views import dense_unbind


@pytest.fixture
def rewrites(monkeypatch):
    """How many unbinds each optimization rewrote."""
    counts = []
    real = executor_module.dense_unbinds

    def counting(g):
        counts.append(real(g))
        return counts[-1]
    monkeypatch.setattr(executor_module, "dense_unbinds", counting)
    return counts


# -- the op ------------------------------------------------------------------------------------
LAYOUTS = {
    "qkv_permuted": lambda: torch.randn(2, 5, 3, 4, 6).permute(2, 0, 3, 1, 4),
    "contiguous": lambda: torch.randn(3, 4, 5),
    "last_dim": lambda: torch.randn(4, 5, 3),
    "transposed": lambda: torch.randn(6, 3).t(),
    "expanded": lambda: torch.randn(1, 5).expand(3, 5),
    "sliced": lambda: torch.randn(4, 10)[:, ::2],
    "empty_pieces": lambda: torch.randn(3, 0, 4),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("unused", [(), (1,)])
def test_gradient_is_eagers_in_the_inputs_layout(layout, dtype, unused):
    torch.manual_seed(0)
    base = LAYOUTS[layout]().to(dtype)
    dim = 2 if layout == "last_dim" else 0
    a = base.detach().requires_grad_()
    b = base.detach().clone().requires_grad_()
    got, want = dense_unbind(a, dim), b.unbind(dim)
    assert [g.shape for g in got] == [w.shape for w in want]
    for g, w in zip(got, want):
        assert torch.equal(g, w)
    weights = [torch.randn(w.shape, dtype=dtype) for w in want]
    sum(((g * s).sum() for i, (g, s) in enumerate(zip(got, weights)) if i not in unused), torch.zeros((), dtype=dtype)).backward()
    sum(((w * s).sum() for i, (w, s) in enumerate(zip(want, weights)) if i not in unused), torch.zeros((), dtype=dtype)).backward()
    assert torch.equal(a.grad, b.grad)


def test_gradient_keeps_a_permuted_inputs_strides():
    """The point of the op: the projection's gradient, seen through the permute, is dense."""
    x = torch.randn(2, 5, 3 * 4 * 6, requires_grad=True)
    heads = x.reshape(2, 5, 3, 4, 6).permute(2, 0, 3, 1, 4)
    seen = {}
    heads.register_hook(lambda g: seen.setdefault("g", g))
    q, k, v = dense_unbind(heads, 0)
    (q.sum() + 2 * k.sum() + 3 * v.sum()).backward()
    assert seen["g"].stride() == heads.stride()
    assert torch.equal(x.grad, torch.tensor([1.0, 2.0, 3.0]).repeat_interleave(24).expand(2, 5, 72))


def test_without_grad_it_is_unbind():
    x = torch.randn(3, 4, requires_grad=True)
    with torch.no_grad():
        out = dense_unbind(x, -2)
    assert [o.grad_fn for o in out] == [None] * 3 and torch.equal(torch.stack(out), x.detach())


# -- the pass, on a fused-qkv attention block ----------------------------------------------------
class Attention(nn.Module):
    """timm's Attention: one qkv projection, its heads taken apart with unbind."""

    def __init__(self, d: int = 32, heads: int = 4, use_v: bool = True, scale_q_in_place: bool = False) -> None:
        super().__init__()
        self.heads, self.use_v, self.scale_q_in_place = heads, use_v, scale_q_in_place
        self.norm = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(self.norm(x)).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        if self.scale_q_in_place:
            q = q.clone()
            q.mul_(0.5)
        if not self.use_v:
            v = k
        o = F.scaled_dot_product_attention(q, k, v)
        return x + self.proj(o.transpose(1, 2).reshape(b, n, c))


def _train(model, frontend: str, steps: int = 4, dtype=torch.float32, autocast: bool = False):
    """(outputs, parameter gradients) of ``steps`` forward + backward calls (``frontend``:
    compile, script or eager)."""
    run = {"compile": lambda: torch.compile(model, backend=graphfuser.graphfuser_backend),
           "script": lambda: graphfuser.script(model), "eager": lambda: model}[frontend]()
    outs, grads = [], []
    for i in range(steps):
        torch.manual_seed(100 + i)
        x = torch.randn(3, 7, 32, dtype=dtype)
        model.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            y = run(x)
        (y.float() * torch.linspace(-1, 1, y.shape[-1])).sum().backward()
        outs.append(y.detach())
        grads.append([p.grad.clone() for p in model.parameters()])
    return outs, grads


@pytest.mark.parametrize("frontend", ["compile", "script"])
@pytest.mark.parametrize("dtype,autocast", [(torch.float32, False), (torch.float32, True), (torch.float64, False)])
def test_attention_block_trains_as_without_the_rewrite(rewrites, frontend, dtype, autocast):
    """Outputs and gradients bitwise the same, eager's within rounding."""
    torch.manual_seed(0)
    m = Attention().to(dtype)
    plain, ref = copy.deepcopy(m), copy.deepcopy(m)
    # a first compiled copy of a model runs its profiling calls unfused (later copies reuse
    # what it planned): one of each first, so both compared runs are later copies
    _train(copy.deepcopy(m), frontend, dtype=dtype, autocast=autocast)
    with config.override(disable=["dense_unbind"]):
        _train(copy.deepcopy(m), frontend, dtype=dtype, autocast=autocast)
    got = _train(m, frontend, dtype=dtype, autocast=autocast)
    assert sum(rewrites) >= 1
    with config.override(disable=["dense_unbind"]):
        want = _train(plain, frontend, dtype=dtype, autocast=autocast)
    for a, b in zip(got[0], want[0]):
        assert torch.equal(a, b)
    for ga, gb in zip(got[1], want[1]):
        for a, b in zip(ga, gb):
            assert torch.equal(a, b)
    # and eager's, within rounding
    _assert_close(got, _train(ref, "eager", dtype=dtype, autocast=autocast),
                  dict(rtol=2e-2, atol=2e-2) if autocast else dict(rtol=1e-4, atol=1e-5))


def _assert_close(got, want, tol) -> None:
    for a, b in zip(got[0], want[0]):
        torch.testing.assert_close(a, b, **tol)
    for ga, gb in zip(got[1], want[1]):
        for a, b in zip(ga, gb):
            torch.testing.assert_close(a, b, **tol)


@pytest.mark.parametrize("variant", ["unused_piece", "piece_written_in_place"])
def test_unused_and_written_pieces(rewrites, variant):
    """A piece with no gradient gets zeros; a piece written in place keeps eager's unbind (a
    custom function's view outputs cannot be written in place)."""
    torch.manual_seed(0)
    kw = dict(use_v=False) if variant == "unused_piece" else dict(scale_q_in_place=True)
    m = Attention(**kw)
    ref = copy.deepcopy(m)
    _assert_close(_train(m, "compile"), _train(ref, "eager"), dict(rtol=1e-4, atol=1e-5))
    assert sum(rewrites) >= 1       # (the q.clone() makes the written tensor a copy, not a piece)


def test_an_input_written_in_place_keeps_unbind(rewrites):
    """The unbound tensor written in place after the unbind: the pass leaves it, and the
    backward raises eager's error (a piece's base was written in place)."""
    def f(x):
        t = x * 1.0
        a, b = t.t().unbind(0)
        y = a * b
        t.add_(1.0)
        return y
    sf = graphfuser.script(f)
    for _ in range(3):
        x = torch.randn(5, 2, requires_grad=True)
        got, want = sf(x), f(x)
        torch.testing.assert_close(got, want)
        for y in (want, got):
            with pytest.raises(RuntimeError, match="is a view and its base"):
                y.sum().backward()
    assert sum(rewrites) == 0


def test_inference_and_the_knob_leave_unbind(rewrites):
    m = Attention()
    run = torch.compile(m, backend=graphfuser.graphfuser_backend)
    with torch.no_grad():
        for _ in range(3):
            run(torch.randn(3, 7, 32))
    assert sum(rewrites) == 0
    with config.override(disable=["dense_unbind"]):
        _train(Attention(), "compile")
    assert sum(rewrites) == 0
