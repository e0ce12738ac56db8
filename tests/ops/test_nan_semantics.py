"""NaN semantics of clamp / min / max (issue 10, class 3), per device.

clamp, clamp_min, clamp_max, minimum, maximum and torch.max(a, b) / torch.min(a, b) propagate
NaN from any operand (a tensor or scalar bound included); fmax / fmin ignore a NaN operand.
The op-table tests cover every row on NaN / inf inputs; these are the issue's repros and the
overload split of aten::max / aten::min.
"""
from __future__ import annotations

import math

import pytest
import torch

import graphfuser
from graphfuser.config import config
from helpers import DEVICES, fallback_counter, fusion_groups

NAN = math.nan


def check(fn, *inputs, fused=True):
    """Script ``fn``, run it past profiling with the fallback disabled, compare every call with
    eager (NaN positions must agree); with ``fused`` the fused path must have run."""
    expected = fn(*inputs)
    sf = graphfuser.script(fn)
    counts = None
    with config.override(disable=["fallback"]):
        for i in range(4):
            out = sf(*inputs)
            torch.testing.assert_close(out, expected, equal_nan=True, rtol=0, atol=0,
                                       msg=lambda m: f"call {i} of {fn.__name__}: {m}")
            if counts is None and sf._optimized is not None:
                counts = fallback_counter(sf)
    if fused:
        assert fusion_groups(sf._optimized) and counts["fallback"] == 0, str(sf._optimized)
    return sf


def _x(device, dtype=torch.float32):
    return torch.tensor([[1.0, NAN, 5.0, -2.0], [0.5, -0.5, NAN, 7.0]], device=device, dtype=dtype)


def _hi(device, dtype=torch.float32):
    return torch.tensor([[NAN, 3.0, 3.0, 3.0], [NAN, NAN, 1.0, 1.0]], device=device, dtype=dtype)


def clamp_tensor_max(x, hi):
    return torch.clamp(x * 1.0, max=hi)


def clamp_scalar_nan(x):
    return torch.clamp(x * 1.0, min=float("nan")), torch.clamp(x + 0.0, max=float("nan"))


def clamp_scalar_nan_forms(x):
    """eager's CUDA kernel ignores one NaN number bound of aten::clamp, but propagates NaN bounds
    given together and those of clamp_min / clamp_max (checked on the host); the CPU propagates all"""
    y = x * 1.0
    y.clamp_(min=float("nan"))
    return (y, torch.clamp(x + 0.0, -0.5, float("nan")), torch.clamp(x - 0.0, float("nan"), 1.0),
            torch.clamp_min(x * 2.0, float("nan")), torch.clamp_max(x * 3.0, float("nan")))


def clamp_inverted(x, hi):
    return torch.clamp(x * 1.0, min=hi + 1.0, max=hi)


def max_min_other(x, hi):
    return torch.max(x, hi) + 0.0, torch.min(x, hi) * 1.0


def fmax_fmin(x, hi):
    return torch.fmax(x, hi) + 0.0, torch.fmin(x, hi) * 1.0, torch.maximum(x, hi) - torch.minimum(x, hi)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_issue_repros(device, dtype):
    x, hi = _x(device, dtype), _hi(device, dtype)
    check(clamp_tensor_max, x, hi)
    check(clamp_scalar_nan, x)
    check(clamp_scalar_nan_forms, x)
    check(clamp_inverted, x, hi)
    check(max_min_other, x, hi)
    check(fmax_fmin, x, hi)
    # the values themselves, not only agreement with eager
    out = graphfuser.script(clamp_tensor_max)
    for _ in range(3):
        r = out(x, hi)
    assert torch.isnan(r[0, 0]) and torch.isnan(r[0, 1]) and r[0, 2] == 3 and r[0, 3] == -2


def reductions_stay_reductions(x, y):
    a = torch.max(x)          # aten::max(Tensor): a full reduction, not the pointwise row
    v, i = torch.max(x, 1)    # aten::max.dim: two outputs
    return a + 1.0, v * 2.0, i, torch.max(x, y) + 1.0


@pytest.mark.parametrize("device", DEVICES)
def test_max_overloads(device):
    x = torch.randn(4, 5, device=device)
    y = torch.randn(4, 5, device=device)
    sf = check(reductions_stay_reductions, x, y, fused=None)
    groups = fusion_groups(sf._optimized)
    inside = [n.kind for g in groups for n in g.subgraph.block.nodes]
    assert inside.count("aten::max") == 1, str(sf._optimized)


def test_max_of_one_tensor_is_rejected_with_a_reason():
    from graphfuser.ops import lookup

    row = lookup("aten::max")
    assert row.name == "max_other"
    assert "reduction" in row.check({}, {"self": None})


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_integer_clamp_max_min(device, dtype):
    x = torch.randint(-9, 10, (6, 7), device=device, dtype=dtype)
    y = torch.randint(-9, 10, (6, 7), device=device, dtype=dtype)

    def f(x, y):
        return torch.clamp(x + 0, y, y + 3), torch.clamp(x + 0, -2, 3), torch.max(x, y) * 1, torch.fmin(x, y) + 1

    check(f, x, y)
