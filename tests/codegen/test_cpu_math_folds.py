"""Compositions of libm calls that gcc folds once errno is off (``-fno-math-errno``, in the CPU
dialect's default flags): ``sin(atan(x))`` and ``cos(atan(x))`` became ``x / sqrt(x*x + 1)`` and
``1 / sqrt(x*x + 1)`` for small ``|x|`` and ``copysign(1, x)`` and ``0`` past a bound, where NaN
lands (fuzz graph 371 of CPU seed 36666: graphfuser 1 where eager gives NaN). The fused C++
kernel must give eager's NaN, infinities' limits and signed zeros."""
import shutil

import pytest
import torch

import graphfuser
from graphfuser.config import config

pytestmark = pytest.mark.skipif(shutil.which(config.cpu["cxx"].split()[0]) is None, reason="needs the C++ compiler")


def sin_atan(x):
    return torch.atan(x).sin() * 2.0


def cos_atan(x):
    return torch.atan(x).cos() + 1.0


def atan_then_sin_of_sum(x, y):
    return (torch.atan(x) + y).sin()


@pytest.mark.parametrize("fn", [sin_atan, cos_atan])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_nan_inf_and_zeros_through_atan(fn, dtype):
    x = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.5, -0.0, 0.0, 1e30, -3e20, 1e-30] * 9, dtype=dtype)
    sf = graphfuser.script(fn)
    for _ in range(4):
        got = sf(x)
    want = fn(x)
    assert torch.equal(got.isnan(), want.isnan())
    torch.testing.assert_close(got, want, equal_nan=True, rtol=1e-6, atol=1e-6)
    assert torch.equal(torch.signbit(got[~got.isnan()]), torch.signbit(want[~want.isnan()]))


def test_atan_with_zero_added_keeps_nan():
    x = torch.tensor([float("nan"), 1.0, -float("inf")] * 30)
    y = torch.zeros(90)
    sf = graphfuser.script(atan_then_sin_of_sum)
    for _ in range(4):
        got = sf(x, y)
    torch.testing.assert_close(got, atan_then_sin_of_sum(x, y), equal_nan=True)
