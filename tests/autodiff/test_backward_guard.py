"""A backward graph's guards check what its caller does not vouch for: the incoming gradients'
layouts. The saved inputs are the tensors the forward group's guard accepted and the gradients
have their outputs' shapes and dtypes, so neither is checked again; gradients in a layout the
backward was not specialized for, and forward inputs the forward guard rejects, still give
eager's gradients."""
from __future__ import annotations

import torch

import graphfuser
from graphfuser.executor.guards import guard_source
from graphfuser.ir.types import TensorType
from grad_helpers import differentiable_groups, make_function


def _chain():
    return graphfuser.script(make_function(["x", "w"], ["torch.sigmoid(x * w) * torch.tanh(x - w)"]))


def _grads(fn, x, w, gout):
    x, w = x.detach().requires_grad_(), w.detach().requires_grad_()
    torch.autograd.backward(fn(x, w), gout)
    return x.grad, w.grad


def _guard_sources(sf):
    out = []
    for dg in differentiable_groups(sf):
        for node, runner in dg.backward._runners.items():
            if node.kind.endswith("FusionGuard"):
                out.append(runner.source)
    return out


def test_guard_source_known_inputs():
    t = TensorType.of(torch.randn(4, 6).t())
    src, _ = guard_source([t, t, t], 2, known=[None, "saved", "grad"])
    assert "x0.dtype" in src and "x1.dtype" not in src and "x2.dtype" not in src
    assert "x1.stride" not in src and "x1.is_contiguous" not in src
    assert "st2 := x2.stride()" in src            # a gradient's layout is checked
    assert "s1 := x1.shape" in src                # sizes of known inputs still take part in the relations
    ns: dict = {}
    exec(src, _ns(ns))
    g = ns["guard"]
    a = torch.randn(4, 6).t()
    assert g(a, a, a)
    assert not g(a, a, a.contiguous())            # the gradient's layout changed
    assert not g(a, torch.randn(5, 6).t(), a)     # sizes that must agree do not


def _ns(ns):
    src_ns = guard_source([TensorType.of(torch.randn(2))], 1)[1]
    ns.update(src_ns)
    return ns


def test_backward_guard_checks_only_gradients():
    fn = _chain()
    x, w = torch.randn(8, 16), torch.randn(16)
    for _ in range(4):
        _grads(fn, x, w, torch.ones(8, 16))
    (src,) = _guard_sources(fn)
    assert "dtype" not in src, src          # the forward's guard fixed the dtypes, autograd the gradients'
    assert "is_contiguous" in src or "stride" in src, src


def test_gradient_layouts_change_after_steady_state():
    fn = _chain()
    x, w = torch.randn(8, 16), torch.randn(16)
    want_fn = lambda a, b: torch.sigmoid(a * b) * torch.tanh(a - b)   # noqa: E731
    for _ in range(4):
        _grads(fn, x, w, torch.ones(8, 16))
    gouts = [torch.randn(16, 8).t(), torch.randn(8, 32)[:, ::2], torch.randn(1, 16).expand(8, 16),
             torch.randn(8, 16), torch.tensor(2.0).expand(8, 16)]
    for gout in gouts * 2:
        got = _grads(fn, x, w, gout)
        want = _grads(want_fn, x, w, gout)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_forward_inputs_change_after_steady_state():
    fn = _chain()
    want_fn = lambda a, b: torch.sigmoid(a * b) * torch.tanh(a - b)   # noqa: E731
    for _ in range(4):
        _grads(fn, torch.randn(8, 16), torch.randn(16), torch.ones(8, 16))
    cases = [(torch.randn(16, 8).t(), torch.randn(16)), (torch.randn(3, 16), torch.randn(16)),
             (torch.randn(8, 16, dtype=torch.float64), torch.randn(16, dtype=torch.float64)),
             (torch.randn(8, 1), torch.randn(16)), (torch.randn(8, 16), torch.randn(1)),
             (torch.randn(0, 16), torch.randn(16))]
    for x, w in cases * 2:
        shape = torch.broadcast_shapes(x.shape, w.shape)
        gout = torch.randn(shape, dtype=x.dtype)
        got = _grads(fn, x, w, gout)
        want = _grads(want_fn, x, w, gout)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
