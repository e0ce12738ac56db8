"""``with torch.no_grad():`` / ``with torch.enable_grad():`` blocks inside a scripted function:
their ``prim::Enter`` / ``prim::Exit`` switch the grad mode, so no fusion group takes nodes from
both sides of one. A group holding the block's no-grad sum and the product after the block had
run wholly under no_grad: its result did not require grad, and its backward differentiated
through the sum. Results, ``requires_grad`` and gradients against eager, steady state
included, through ``graphfuser.script`` and the ``torch.compile`` backend."""
from __future__ import annotations

import pytest
import torch

import graphfuser
from graphfuser import graphfuser_backend
from helpers import fusion_groups


def no_grad_block(x, w):
    y = x * w
    with torch.no_grad():
        s = (y * 2.0).sum()
    return y.sin() * s


def enable_grad_block(x, w):
    with torch.enable_grad():
        y = (x * w).tanh()
    return y * 3.0 + 1.0


def nested_blocks(x, w):
    y = (x + w).exp()
    with torch.no_grad():
        m = y.amax(-1, keepdim=True) + 1.0
        with torch.enable_grad():
            z = (y * 0.5).sin()
    return z / m + y


@pytest.mark.parametrize("entry, fn", [("script", no_grad_block), ("compile", no_grad_block),
                                       ("compile", nested_blocks)],
                         ids=["script-no_grad", "compile-no_grad", "compile-nested"])
def test_results_and_gradients_are_eagers(fn, entry):
    """(TorchScript takes no ``torch.enable_grad()``: the nested blocks through the backend only.)"""
    run = graphfuser.script(fn) if entry == "script" else torch.compile(fn, backend=graphfuser_backend, dynamic=False)
    torch.manual_seed(0)
    for step in range(5):
        x, w = torch.randn(4, 6, requires_grad=True), torch.randn(6, requires_grad=True)
        xe, we = (t.detach().clone().requires_grad_() for t in (x, w))
        out, want = run(x, w), fn(xe, we)
        assert out.requires_grad == want.requires_grad, f"call {step}"
        torch.testing.assert_close(out, want)
        gy = torch.randn_like(want)
        got = torch.autograd.grad(out, [x, w], gy)
        ref = torch.autograd.grad(want, [xe, we], gy)
        for a, e in zip(got, ref):
            torch.testing.assert_close(a, e, msg=lambda m: f"call {step}: {m}")
    if entry == "script":
        assert fusion_groups(run._optimized)


def test_enable_grad_block_under_no_grad():
    sf = torch.compile(enable_grad_block, backend=graphfuser_backend, dynamic=False)
    torch.manual_seed(1)
    for step in range(5):
        x, w = torch.randn(3, 5, requires_grad=True), torch.randn(5, requires_grad=True)
        with torch.no_grad():
            out, want = sf(x, w), enable_grad_block(x, w)
        assert out.requires_grad == want.requires_grad
        torch.testing.assert_close(out, want)


def test_no_group_spans_a_block():
    sf = graphfuser.script(no_grad_block)
    for _ in range(4):
        sf(torch.randn(4, 6, requires_grad=True), torch.randn(6, requires_grad=True))
    nodes = list(sf._optimized.block.nodes)
    enter = next(i for i, n in enumerate(nodes) if n.kind == "prim::Enter")
    exit_ = next(i for i, n in enumerate(nodes) if n.kind == "prim::Exit")
    groups = fusion_groups(sf._optimized)
    assert groups
    for group in groups:
        i = next(i for i, n in enumerate(nodes) if n is group or any(m is group for b in n.blocks for m in b.nodes))
        kinds = {n.kind for n in group.subgraph.all_nodes()}
        if enter < i < exit_:
            assert "aten::sin" not in kinds, kinds        # the product after the block stays out
        else:
            assert "aten::sum" not in kinds, kinds        # the block's sum stays in
