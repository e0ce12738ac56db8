"""Signed zeros through fused clamp / clamp_min / relu / relu6 / hardtanh / maximum / minimum
against eager's kernels on each device: CUDA's ::max / ::min order -0.0 below 0.0 whichever
operand comes first, the CPU's std::max / std::min keep the first operand. A sign of zero shows
after a reciprocal: inf against -inf (fuzz graph 1805 of CUDA seed 34001; relu(-0.0) is 0.0 on
CUDA, -0.0 on the CPU)."""
import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.config import config

from tests.helpers import DEVICES


# One sign of zero per function: torch.jit.script pools the constants -0.0 and 0.0 of a function
# into one (graphfuser then runs it eagerly: tests/frontend/test_signed_zero_constants.py).
def _clamp_min(x, y):
    return torch.reciprocal(torch.clamp(x * 1.0, min=0.0)), torch.reciprocal(torch.clamp_min(x * 1.0, 0.0))


def _clamp_neg(x, y):
    return torch.reciprocal(torch.clamp(x * 1.0, min=-0.0)), torch.reciprocal(torch.clamp(x * 1.0, max=-0.0)), \
        torch.reciprocal(torch.clamp(x * 1.0, -0.0, -0.0)), torch.reciprocal(F.hardtanh(x * 1.0, -0.0, 2.0))


def _clamp_both(x, y):
    return torch.reciprocal(torch.clamp(x * 1.0, 0.0, 0.0)), torch.reciprocal(torch.clamp(x * 1.0, -1.0, 0.0)), \
        torch.reciprocal(torch.clamp(x * 1.0, max=0.0))


def _relus(x, y):
    return torch.reciprocal(torch.relu(x * 1.0)), torch.reciprocal(F.hardtanh(x * 1.0, 0.0, 1.0)), \
        torch.reciprocal(F.relu6(x * 1.0)), torch.reciprocal(F.hardtanh(x * 1.0))


def _binary(x, y):
    return torch.reciprocal(torch.maximum(x * 1.0, y)), torch.reciprocal(torch.minimum(x * 1.0, y)), \
        torch.reciprocal(torch.maximum(y, x * 1.0)), torch.reciprocal(torch.minimum(y, x * 1.0))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("fn", [_clamp_min, _clamp_neg, _clamp_both, _relus, _binary], ids=lambda f: f.__name__[1:])
def test_signed_zeros_match_eager(fn, dtype, device):
    x = torch.tensor([-0.0, 0.0, -0.0, 0.0, 1.0, -1.0, float("nan")], device=device, dtype=dtype)
    y = torch.tensor([0.0, -0.0, -0.0, 0.0, -0.0, 0.0, 0.0], device=device, dtype=dtype)
    sf = graphfuser.script(fn)
    with config.override(disable=["fallback"]):
        for _ in range(3):
            out = sf(x, y)
    assert "FusionGroup" in str(graphfuser.last_executed_optimized_graph())
    for o, r in zip(out, fn(x, y)):
        torch.testing.assert_close(o, r, equal_nan=True, rtol=0, atol=0)
