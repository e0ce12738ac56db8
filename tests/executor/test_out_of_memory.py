"""A call that runs out of (CUDA) memory gives back what graphfuser holds for speed and runs
again; it never moves the function onto TorchScript's executor, and where nothing was held the
error is the caller's, as in eager."""
from __future__ import annotations

import pytest
import torch

import graphfuser
from graphfuser.executor import cuda_graphs
from helpers import out_of_memory_once


def _steady():
    def fn(x, y):
        return torch.sigmoid(x * y) + torch.tanh(x - y)

    sf = graphfuser.script(fn)
    x, y = torch.randn(8, 16), torch.randn(8, 16)
    for _ in range(4):
        sf(x, y)
    return fn, sf, x, y


def test_out_of_memory_releases_graphs_and_runs_again(monkeypatch):
    fn, sf, x, y = _steady()
    released = []
    monkeypatch.setattr(cuda_graphs, "release_graphs", lambda: released.append(1) or 2)
    calls = out_of_memory_once(sf)
    torch.testing.assert_close(sf(x, y), fn(x, y))
    assert released == [1] and len(calls) == 2
    assert sf._torchscript is None


def test_out_of_memory_with_nothing_to_release_is_raised(monkeypatch):
    fn, sf, x, y = _steady()
    monkeypatch.setattr(cuda_graphs, "release_graphs", lambda: 0)
    out_of_memory_once(sf)
    with pytest.raises(torch.OutOfMemoryError):
        sf(x, y)
    assert sf._torchscript is None
    torch.testing.assert_close(sf(x, y), fn(x, y))
