"""A run-time bool flag profiled as a constant specializes the group and fuses, guarded.

``F.dropout(x, p, training)`` in a function taking ``training: bool`` (the helper form of
``F.dropout(x, p, self.training)``) becomes Philox's dropout row with the flag as an argument
(``passes/random.py``); profiled as one value, the row fuses as that value's op (the identity, or
the random mask), and a call with the other value fails the group's guard and runs the fallback,
which computes the row's eager form for the value it is given. Both orders are tested, against
eager where eager is deterministic (not training) and against the mask the output shows where
it is not (kept elements scaled by 1 / (1 - p), the rest zero, about p of them).
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import graphfuser
from helpers import fallback_counter, fusion_groups


def helper(x, p: float, training: bool):
    return F.dropout(x * 2.0, p, training) + 1.0


def _check_training(out: torch.Tensor, x: torch.Tensor, p: float) -> None:
    """out = dropout(2x, p) + 1 with some mask: kept elements are 2x / (1 - p) + 1, dropped ones 1."""
    kept = out != 1.0
    torch.testing.assert_close(out[kept], (x * 2.0 / (1 - p) + 1.0)[kept])
    frac = 1 - float(kept.float().mean())
    assert abs(frac - p) < 0.05, f"dropped {frac:.3f}, p = {p}"


def _groups_with(sf, kind: str) -> list:
    return [g for g in fusion_groups(sf._optimized) if any(n.kind == kind for n in g.subgraph.block.nodes)]


@pytest.mark.parametrize("first", [False, True], ids=["eval-then-train", "train-then-eval"])
def test_dropout_flag_argument_specializes_both_ways(first):
    x = torch.randn(128, 64)
    p = 0.25
    sf = graphfuser.script(helper)
    for _ in range(4):
        out = sf(x, p, first)
    # the flag was specialized: the dropout sits in a fusion group with the mul and the add
    assert _groups_with(sf, "graphfuser::dropout"), str(sf._optimized)
    counts = fallback_counter(sf)
    out = sf(x, p, first)
    assert counts["fallback"] == 0, "the profiled flag value must run the fused group"
    if first:
        _check_training(out, x, p)
    else:
        torch.testing.assert_close(out, helper(x, p, False), rtol=0, atol=0)
    # the other value: the guard misses and the fallback computes that value's op
    for _ in range(3):
        other = sf(x, p, not first)
        if first:
            torch.testing.assert_close(other, helper(x, p, False), rtol=0, atol=0)
        else:
            _check_training(other, x, p)
    assert counts["fallback"] >= 1, "a call with the other flag value must not run the specialized kernel"


def test_dropout_flag_masks_differ_between_calls():
    """Training calls draw new numbers each call (the generator advances), as eager's do."""
    x = torch.randn(64, 64)
    sf = graphfuser.script(helper)
    outs = [sf(x, 0.5, True) for _ in range(5)]
    assert not torch.equal(outs[-1], outs[-2])


def test_dropout_flag_varied_while_profiling_stays_correct():
    """A flag that changed between profiling runs is no constant: the row runs unfused, both ways right."""
    x = torch.randn(64, 64)
    sf = graphfuser.script(helper)
    for flag in (True, False, True, False, False):
        out = sf(x, 0.5, flag)
        if flag:
            _check_training(out, x, 0.5)
        else:
            torch.testing.assert_close(out, helper(x, 0.5, False), rtol=0, atol=0)
