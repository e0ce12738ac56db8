"""GPU: the shifted-data moments on every reduction schedule (persistent rows in
registers, multi-pass rows, rows split across blocks with a last-block combine), with constant
rows (exact: mean is the row's value, var 0, layer norm 0) and rows with a large mean and a
small spread (as close to a float64 reference as eager)."""
import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.config import config
from helpers import fallback_counter, fusion_groups

pytestmark = pytest.mark.cuda

# (rows, width): persistent, wide persistent, multi-pass, few wide rows (split across blocks)
SHAPES = [(64, 31), (256, 4096), (16, 65536 + 3), (2, 1 << 20)]


def ln(x, w, b):
    return F.layer_norm(x * 1.0, [x.shape[-1]], w, b, eps=1e-12)


def ln_plain(x):
    return F.layer_norm(x * 1.0, [x.shape[-1]], eps=1e-12)


def std_rows(x):
    return (x * 1.0).std(-1)


def var_mean_rows(x):
    return torch.var_mean(x * 1.0, -1, correction=0)


def _run(fn, *args):
    sf = graphfuser.script(fn)
    with config.override(disable=["fallback"]):
        for _ in range(3):
            sf(*(torch.randn_like(a) for a in args))
        counts = fallback_counter(sf)
        out = sf(*args)
    assert fusion_groups(sf._optimized) and counts["fallback"] == 0
    return out


def _t(r):
    return r if isinstance(r, tuple) else (r,)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("fn", [ln_plain, std_rows, var_mean_rows])
def test_constant_rows_exact_on_every_schedule(fn, dtype, shape):
    x = torch.full(shape, 1 / 3, device="cuda", dtype=dtype)
    for g, e in zip(_t(_run(fn, x)), _t(fn(x))):
        assert torch.equal(g, e), (g.flatten()[:4], e.flatten()[:4])


@pytest.mark.parametrize("shape", SHAPES[:3], ids=str)
def test_constant_rows_affine(shape):
    w = torch.randn(shape[-1], device="cuda") * 3
    b = torch.randn(shape[-1], device="cuda")
    x = torch.full(shape, 0.1, device="cuda")
    torch.testing.assert_close(_run(ln, x, w, b), b.expand(shape), rtol=0, atol=0)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("fn", [ln_plain, std_rows, var_mean_rows])
def test_large_mean_small_spread_every_schedule(fn, shape):
    g = torch.Generator(device="cuda").manual_seed(0)
    y = 1e4 + 1e-2 * torch.randn(shape, device="cuda", generator=g)
    got, ref, eager = _t(_run(fn, y)), _t(fn(y.double())), _t(fn(y))
    for a, r, e in zip(got, ref, eager):
        err, eager_err = (a.double() - r).abs().max().item(), (e.double() - r).abs().max().item()
        assert err <= 2 * eager_err + 4 * 2 ** -23 * r.abs().max().item(), (err, eager_err)


def test_empty_batch_after_profiling_and_back():
    def f(x):
        return F.layer_norm(x * 2.0, [512]), (x * 2.0).sum(0) + 1.0
    sf = graphfuser.script(f)
    for _ in range(3):
        sf(torch.randn(8, 512, device="cuda"))
    for shape in ((0, 512), (8, 512)):
        x = torch.randn(shape, device="cuda")
        for a, r in zip(sf(x), f(x)):
            assert a.shape == r.shape
            torch.testing.assert_close(a, r)


def std_mean_rows(x):
    return torch.std_mean(x * 1.0, -1)


def std_mean_cols(x):
    return torch.std_mean(x * 1.0, 0)


@pytest.mark.parametrize("shape", [(37, 40), (4096, 256), (3, 1 << 16)], ids=str)
def test_outer_schedule_constant_and_large_mean(shape):
    """Reductions over dim 0 (the outer schedule, TIDy combines): the shift is each column's
    first element."""
    x = torch.full(shape, 1 / 3, device="cuda")
    got = _run(std_mean_cols, x)
    assert torch.equal(got[0], torch.zeros_like(got[0])) and torch.equal(got[1], x[0])
    g = torch.Generator(device="cuda").manual_seed(0)
    y = 1e4 + 1e-2 * torch.randn(shape, device="cuda", generator=g)
    for a, r, e in zip(_run(std_mean_cols, y), std_mean_cols(y.double()), std_mean_cols(y)):
        err, eager_err = (a.double() - r).abs().max().item(), (e.double() - r).abs().max().item()
        assert err <= 2 * eager_err + 4 * 2 ** -23 * r.abs().max().item(), (err, eager_err)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_inf_in_a_row_gives_nan_mean_every_schedule(shape):
    """A row holding an inf (first, or elsewhere): mean and std NaN, as eager's Welford gives
    unless the inf is last in its update order."""
    x = torch.randn(shape, device="cuda")
    x[0, 0] = float("inf")
    x[-1, shape[-1] // 2] = float("-inf")
    std, mean = _run(std_mean_rows, x)
    assert std[0].isnan() and mean[0].isnan() and std[-1].isnan() and mean[-1].isnan()
    rest = slice(1, shape[0] - 1)
    es, em = torch.std_mean(x, -1)
    torch.testing.assert_close(std[rest], es[rest], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(mean[rest], em[rest], rtol=1e-4, atol=1e-5)
