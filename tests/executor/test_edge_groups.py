"""Groups on 0-dim / all-size-1 tensors compile and run fused (issue 10, class 7); an empty
iteration domain with a non-empty broadcast output runs eager for that call; zero-size inputs
are not launched and their outputs have eager's shape and strides."""
from __future__ import annotations

import pytest
import torch

import graphfuser
from graphfuser.config import config
from helpers import DEVICES, fallback_counter, fusion_groups


def tan_sq(x0):
    return torch.tan(x0 * x0)


def where_scalars(x1, s0: int, s1: int):
    v0 = s0 * x1
    return torch.where(v0 > 0, x1, s1)


def two(x, y):
    return (x * y + 1.0).relu(), x - y


def sqrt_and_add(x0, x1):
    return torch.sqrt(x0), torch.add(x0, x1, alpha=2)


def _fused(fn, *args):
    sf = graphfuser.script(fn)
    with config.override(disable=["fallback"]):
        for _ in range(config.profiling_runs):
            sf(*args)
        counts = fallback_counter(sf)
        out = sf(*args)
    ref = fn(*args)
    torch.testing.assert_close(out, ref, equal_nan=True)
    outs, refs = (out, ref) if isinstance(out, tuple) else ((out,), (ref,))
    for o, r in zip(outs, refs):
        assert o.shape == r.shape and o.dtype == r.dtype
    assert counts["fallback"] == 0 and fusion_groups(sf._optimized), str(sf._optimized)
    return sf


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.float16, torch.float64])
def test_zero_dim_groups(device, dtype):
    x = torch.tensor(3, device=device).to(dtype)
    _fused(tan_sq, x) if dtype != torch.int32 else _fused(lambda_free_int, x)
    _fused(where_scalars, x, 2, -1)


def lambda_free_int(x0):
    return x0 * x0 + 1


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shapes", [((1, 1), (1,)), ((), (1, 1, 1)), ((1,), ()), ((1, 1), (1, 1))])
def test_all_size_one_groups(device, shapes):
    x, y = (torch.randn(s, device=device) for s in shapes)
    _fused(two, x, y)


@pytest.mark.parametrize("device", DEVICES)
def test_empty_domain_with_a_broadcast_output(device):
    x0 = torch.rand(1, 5, device=device, dtype=torch.float64)
    sf = graphfuser.script(sqrt_and_add)
    with config.override(disable=["fallback"]):
        for n in (3, 3, 3, 0, 4, 0):
            x1 = torch.randn(n, 5, device=device, dtype=torch.float64)
            out, ref = sf(x0, x1), sqrt_and_add(x0, x1)
            for o, r in zip(out, ref):
                assert o.shape == r.shape
                torch.testing.assert_close(o, r)


@pytest.mark.parametrize("device", DEVICES)
def test_zero_size_inputs(device):
    for shape in ((0, 5), (5, 0), (0,), (2, 0, 3)):
        x = torch.randn(shape, device=device)
        y = torch.randn(shape[-1:], device=device)
        sf = _fused(two, x, y)
        out, ref = sf(x, y), two(x, y)
        assert [o.stride() for o in out] == [r.stride() for r in ref]
