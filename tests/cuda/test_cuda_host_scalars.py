"""CPU 0-dim tensors as operands of fused CUDA ops, and zero-size / 0-dim CUDA groups (GPU)."""
import pytest
import torch

import graphfuser
from graphfuser.config import config
from helpers import TOLERANCES, fallback_counter, fusion_groups

pytestmark = pytest.mark.cuda


def mixed(x, s, k):
    return (x * s + k).relu() - s


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_cpu_zero_dim_operands(dtype):
    x = torch.randn(64, 33, device="cuda", dtype=dtype)
    s = torch.tensor(0.75, dtype=torch.float64)
    k = torch.tensor(3)
    sf = graphfuser.script(mixed)
    with config.override(disable=["fallback"]):
        for _ in range(2):
            sf(x, s, k)
        counts = fallback_counter(sf)
        for v in (0.75, -2.5):
            s = torch.tensor(v, dtype=torch.float64)
            out = sf(x, s, k)
            # fp32 intermediates against eager's per-op rounding: the project's half tolerances
            torch.testing.assert_close(out, mixed(x, s, k), **TOLERANCES[dtype])
    assert counts["fallback"] == 0 and fusion_groups(sf._optimized)


def zero_dim(x):
    return torch.tan(x * x)


def test_zero_dim_and_zero_size():
    sf = graphfuser.script(zero_dim)
    with config.override(disable=["fallback"]):
        for _ in range(4):
            x = torch.tensor(0.3, device="cuda")
            torch.testing.assert_close(sf(x), zero_dim(x))
        sf2 = graphfuser.script(zero_dim)
        for n in (5, 5, 5, 0):
            x = torch.randn(n, 7, device="cuda").t()
            out, ref = sf2(x), zero_dim(x)
            assert out.shape == ref.shape
            torch.testing.assert_close(out, ref)
