"""A fused floating prod multiplies its factors in float64 (ops/reduction.py ``_prod``): a float32
accumulator overflows to inf within a few dozen large factors, and a zero factor met after that
gives inf * 0 = NaN where the product is 0."""
from __future__ import annotations

import pytest
import torch

import graphfuser
from graphfuser import graphfuser_backend
from helpers import fusion_groups


def scaled_prod(x: torch.Tensor) -> torch.Tensor:
    return torch.prod(x * 3.0, 0)


def scaled_prod_rows(x: torch.Tensor) -> torch.Tensor:
    return torch.prod(x * 3.0, -1)


def _column(n: int, big: float) -> torch.Tensor:
    x = torch.full((n, 8), big)
    x[-1, ::2] = 0.0            # a zero last in half the columns: the product is 0 there
    x[:, 1::4] *= -1.0          # signs: the zero keeps the sign of the other factors' product
    return x


def _run(entry: str, fn, x: torch.Tensor) -> torch.Tensor:
    run = graphfuser.script(fn) if entry == "script" else torch.compile(fn, backend=graphfuser_backend, dynamic=False)
    for _ in range(3):
        out = run(x)
    return out, run


@pytest.mark.parametrize("entry", ["script", "compile"])
@pytest.mark.parametrize("fn,layout", [(scaled_prod, "column"), (scaled_prod_rows, "row")])
def test_zero_after_overflowing_factors_is_zero(entry, fn, layout):
    x = _column(64, 1e3)                          # 64 factors of 3e3: 1e222 in float64, inf in float32
    x = x if layout == "column" else x.t().contiguous()
    out, run = _run(entry, fn, x)
    want = fn(x.double()).float()                 # 0 (signed) where a zero factor is, inf elsewhere
    torch.testing.assert_close(out, want, equal_nan=False)
    assert torch.equal(torch.signbit(out), torch.signbit(want))
    if entry == "script":
        assert fusion_groups(run.graph_for(x)), "the prod did not fuse"


@pytest.mark.parametrize("entry", ["script", "compile"])
def test_in_range_products_are_eagers(entry):
    x = torch.randn(33, 17) * 0.5 + 1.0
    out, _ = _run(entry, scaled_prod, x)
    torch.testing.assert_close(out, scaled_prod(x), rtol=1e-5, atol=0)
    assert out.dtype == torch.float32
