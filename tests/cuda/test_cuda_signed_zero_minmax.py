"""Signed zeros through fused clamp / clamp_min / relu / hardtanh / maximum / minimum on CUDA
against eager's CUDA kernels, whose ::max / ::min order -0.0 below 0.0 whichever operand comes
first (the CPU's std::max keeps the first: tests/ops cover that). A sign of zero shows after a
reciprocal: inf against -inf (fuzz graph 1805 of CUDA seed 34001)."""
import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.config import config

pytestmark = pytest.mark.cuda


def _clamp_min(x, y):
    return torch.reciprocal(torch.clamp(x * 1.0, min=0.0)), torch.reciprocal(torch.clamp(x * 1.0, min=-0.0))


def _clamp_both(x, y):
    return torch.reciprocal(torch.clamp(x * 1.0, -0.0, 0.0)), torch.reciprocal(torch.clamp(x * 1.0, 0.0, -0.0))


def _relus(x, y):
    return torch.reciprocal(torch.relu(x * 1.0)), torch.reciprocal(F.hardtanh(x * 1.0, -0.0, 0.0)), \
        torch.reciprocal(F.relu6(x * 1.0))


def _binary(x, y):
    return torch.reciprocal(torch.maximum(x * 1.0, y)), torch.reciprocal(torch.minimum(x * 1.0, y)), \
        torch.reciprocal(torch.maximum(y, x * 1.0)), torch.reciprocal(torch.minimum(y, x * 1.0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("fn", [_clamp_min, _clamp_both, _relus, _binary], ids=lambda f: f.__name__[1:])
def test_signed_zeros_match_eager_cuda(fn, dtype):
    x = torch.tensor([-0.0, 0.0, -0.0, 0.0, 1.0, -1.0, float("nan")], device="cuda", dtype=dtype)
    y = torch.tensor([0.0, -0.0, -0.0, 0.0, -0.0, 0.0, 0.0], device="cuda", dtype=dtype)
    sf = graphfuser.script(fn)
    with config.override(disable=["fallback"]):
        for _ in range(3):
            out = sf(x, y)
    assert "FusionGroup" in str(graphfuser.last_executed_optimized_graph())
    for o, r in zip(out, fn(x, y)):
        torch.testing.assert_close(o, r, equal_nan=True, rtol=0, atol=0)
