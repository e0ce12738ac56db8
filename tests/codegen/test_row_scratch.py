"""CPU row scratch: reduction kernels that keep a row's computed values for a later pass
(softmax's exp(x - max)) hold them in a buffer per OpenMP thread and cached value
(``dialects._CPU_ROW_SCRATCH``), grown to the longest row, so long rows keep them too; rows past
``SCRATCH_ROWS`` take the variant that recomputes them. Against eager, with several threads,
two cached values in one kernel, rows that grow and shrink between calls, and both variants."""
from __future__ import annotations

import pytest
import torch

import graphfuser
from graphfuser.config import config
from graphfuser.executor import compiled_reduction
from graphfuser.executor.compiled_reduction import ReductionGroup, launcher_source

from helpers import fusion_groups


def softmax(x):
    return torch.softmax(x, -1)


def two_softmaxes(x):
    return torch.softmax(x, -1), torch.softmax(x * 2.0, -1) * x


def _scripted(fn, x):
    sf = graphfuser.script(fn)
    with config.override(disable=["fallback"]):
        for _ in range(3):
            sf(x)
    return sf


def _check(sf, fn, x):
    with config.override(disable=["fallback"]):
        got = sf(x)
    got, want = (got, fn(x)) if isinstance(got, tuple) else ((got,), (fn(x),))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, equal_nan=True)


def _cpu_group(sf) -> ReductionGroup:
    (g,) = fusion_groups(sf._optimized)
    return ReductionGroup(g.subgraph, "cpu", torch.device("cpu"), "k")


@pytest.mark.parametrize("fn", [softmax, two_softmaxes])
def test_long_rows_keep_their_computed_values(fn):
    sf = _scripted(fn, torch.randn(4, 100))
    cg = _cpu_group(sf)
    slots = 2 if fn is two_softmaxes else 1
    for s in range(slots):
        assert f"gf_row_scratch<float, {s}>(" in cg.source
    assert f"_fn if nr <= {compiled_reduction.SCRATCH_ROWS} else _fn2" in launcher_source(cg)
    for rows, cols in ((64, 65536), (3, 100), (130, 20000), (2, 70000)):   # the buffers grow and shrink
        x = torch.randn(rows, cols)
        x[1, 7] = float("inf")
        x[2 % rows] = float("-inf")
        _check(sf, fn, x)


def test_rows_past_the_limit_recompute(monkeypatch):
    monkeypatch.setattr(compiled_reduction, "SCRATCH_ROWS", 64)
    sf = _scripted(softmax, torch.randn(4, 100))
    assert "_fn if nr <= 64 else _fn2" in launcher_source(_cpu_group(sf))
    for cols in (100, 63, 5000):
        _check(sf, softmax, torch.randn(33, cols))
