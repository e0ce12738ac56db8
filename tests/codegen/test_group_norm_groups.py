"""group_norm with num_groups > 1 (decomposed into an instance norm of the grouped view, see
passes/decompose.py) on ill-conditioned data, on every call: the profiling calls and the fallback
run the view's instance norm on the host (ops.norms.grouped_instance_norm), the later calls the
fused kernel; both must be exact for constant groups and accurate for huge means. The result has
eager's memory format, and eager's errors (CUDA's dtype rule included) are kept.
"""
import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.config import config
from graphfuser.ops import norms
from tests.helpers import DEVICES, fallback_counter, fusion_groups

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


def _skip_no_gpu(device):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no GPU")


def _every_call(fn, *args, calls=4):
    """The results of ``calls`` calls of graphfuser.script(fn) on ``args`` (fallback disabled),
    with the last ones on the fused path: a group exists and no call after profiling fell back."""
    sf = graphfuser.script(fn)
    outs, counts = [], None
    with config.override(disable=["fallback"]):
        for _ in range(calls):
            outs.append(sf(*args))
            if counts is None and sf._optimized is not None:
                counts = fallback_counter(sf)
    assert fusion_groups(sf._optimized), str(sf._optimized)
    assert counts is not None and counts["fallback"] == 0, str(sf._optimized)
    return outs


def _constant_groups(n, c, spatial, groups, dtype, device, value=1 / 3):
    """[n, c, *spatial] whose values are constant within each (sample, group of c/groups channels)."""
    g = torch.Generator().manual_seed(n * 100 + c)
    base = torch.randint(1, 4, (n, groups, 1), generator=g).double() * value
    x = base.expand(n, groups, c // groups * max(1, torch.Size(spatial).numel())).reshape(n, c, *spatial)
    return x.to(dtype).to(device)


def gn5(x):
    return F.group_norm(x, 5, None, None, 1e-12)


def test_constant_rows_with_five_groups_are_exact_on_every_call():
    # fuzz graph 8632 of seed 7171: rows constant along the last dim, one channel per group; the
    # profiling calls ran eager instance_norm (batch norm's fp32 sum / N mean) and gave -0.000965
    x = _constant_groups(3, 5, (300,), 5, torch.float32, "cpu")
    assert bool((gn5(x) == 0).all())        # eager
    for i, y in enumerate(_every_call(gn5, x)):
        assert bool((y == 0).all()), (i, y.abs().max())


def gn_affine(x, w, b):
    return F.group_norm(x * 1.0, 3, w, b, 1e-12)


def gn_plain(x):
    return F.group_norm(x * 1.0, 2, None, None, 1e-12)


def gn_weight(x, w):
    return F.group_norm(x * 1.0, 6, w, None, 1e-12)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["dense", "channels_last"])
def test_constant_groups_are_exact(device, dtype, layout):
    """Constant groups normalize to exactly 0 (the affine then gives exactly the bias), on the
    profiling calls and on the fused ones, for 2, 3 and 6 groups, with and without weights."""
    _skip_no_gpu(device)
    gen = torch.Generator().manual_seed(3)
    w, b = (torch.randn(6, generator=gen).to(dtype).to(device) for _ in range(2))
    for fn, groups in ((gn_affine, 3), (gn_plain, 2), (gn_weight, 6)):
        x = _constant_groups(2, 6, (4, 5), groups, dtype, device)
        if layout == "channels_last":
            x = x.contiguous(memory_format=torch.channels_last)
        args = {gn_affine: (x, w, b), gn_plain: (x,), gn_weight: (x, w)}[fn]
        want = b.view(1, 6, 1, 1).expand_as(x) if fn is gn_affine else torch.zeros_like(x)
        for i, y in enumerate(_every_call(fn, *args)):
            assert torch.equal(y, want), (fn.__name__, i, (y - want).abs().max())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("fn,groups", [(gn_affine, 3), (gn_plain, 2), (gn_weight, 6)])
def test_huge_mean_small_spread(device, dtype, fn, groups):
    """Values around 1e4 with a spread of 1e-2 and eps=1e-12: every call is about as close to a
    float64 reference as float32 can be (eager's group_norm applies x * rstd - mean * rstd and
    loses most digits here; its instance_norm, which the profiling calls used to run, as well)."""
    _skip_no_gpu(device)
    gen = torch.Generator().manual_seed(groups)
    x = (1e4 + 1e-2 * torch.randn(4, 6, 3, 5, generator=gen, dtype=torch.float64)).to(dtype).to(device)
    w, b = torch.randn(6, generator=gen).to(dtype).to(device), torch.randn(6, generator=gen).to(dtype).to(device)
    args = {gn_affine: (x, w, b), gn_plain: (x,), gn_weight: (x, w)}[fn]
    ref = fn(*(a.double() for a in args))
    # x - k is exact, so the error is that of float32 arithmetic on O(1) numbers
    limit = 1e-4 if dtype == torch.float32 else 1e-9
    for i, y in enumerate(_every_call(fn, *args)):
        assert y.dtype == dtype
        err = (y.double() - ref).abs().max().item()
        assert err <= limit, (i, err)


def gn_relu(x, w, b):
    return F.group_norm(x.sin(), 2, w, b, 1e-5).relu()


@pytest.mark.parametrize("shape,layout", [((3, 4, 5, 6), "channels_last"), ((3, 4, 5, 6), "dense"),
                                          ((2, 4, 3, 2, 5), "channels_last_3d"), ((2, 4, 3, 5), "sliced"),
                                          ((5, 4), "transposed"), ((2, 4, 7), "transposed")])
def test_output_has_eagers_memory_format(shape, layout):
    """On the CPU eager's group_norm keeps a channels-last input's format (suggest_memory_format)
    and makes every other result contiguous; the decomposition's views gave contiguous results
    only. A consumer of the result (relu) keeps that format, as in eager."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=gen)
    if layout in ("channels_last", "channels_last_3d"):
        x = x.contiguous(memory_format=getattr(torch, layout))
    elif layout == "sliced":
        x = torch.randn(*shape[:-1], 2 * shape[-1], generator=gen)[..., ::2]
    elif layout == "transposed":
        x = torch.randn(shape[::-1], generator=gen).permute(*range(len(shape) - 1, -1, -1))
    w, b = torch.randn(4, generator=gen), torch.randn(4, generator=gen)
    e = gn_relu(x, w, b)
    for i, y in enumerate(_every_call(gn_relu, x, w, b)):
        assert y.stride() == e.stride(), (i, y.stride(), e.stride())
        torch.testing.assert_close(y, e, rtol=1e-5, atol=1e-5)


def test_grouped_instance_norm_matches_eagers_instance_norm_on_ordinary_data():
    gen = torch.Generator().manual_seed(1)
    for dtype, tol in ((torch.float32, 1e-5), (torch.float64, 1e-12), (torch.bfloat16, 2e-2), (torch.float16, 2e-3)):
        x = torch.randn(3, 2, 4, 5, generator=gen).to(dtype)
        y = norms.grouped_instance_norm(x, None, None, None, None, True, 0.0, 1e-5, True)
        e = torch.instance_norm(x if dtype == torch.float64 else x.float(), None, None, None, None, True, 0.0, 1e-5, True)
        # fp16 / bf16 results stay float32: the decomposition's affine rounds once (norms.widened)
        assert y.dtype == (torch.float64 if dtype == torch.float64 else torch.float32) and y.is_contiguous()
        torch.testing.assert_close(y.to(e.dtype), e, rtol=tol, atol=tol)
    # an empty view, and NaN / inf in a group, as eager's instance norm
    for x in (torch.randn(0, 2, 3, 4), torch.randn(2, 0, 3, 4),
              torch.tensor([1.0, float("nan"), 2.0, 3.0, float("inf"), 1.0]).reshape(1, 2, 3, 1)):
        y = norms.grouped_instance_norm(x, None, None, None, None, True, 0.0, 1e-5, True)
        e = torch.instance_norm(x, None, None, None, None, True, 0.0, 1e-5, True)
        torch.testing.assert_close(y, e, equal_nan=True)


def test_check_follows_each_devices_mixed_dtype_rule(monkeypatch):
    """bfloat16 / float16 input with float32 weight and bias: the CPU kernel takes it, CUDA's reads
    the parameters as the input's dtype and raises (its rule is eager's own: the check runs eager
    group_norm whenever that may happen). A meta tensor stands for a non-CPU device here."""
    ran = []
    monkeypatch.setattr(norms.torch, "group_norm", lambda *a, **k: ran.append(a[0].device.type))
    for dtype in (torch.bfloat16, torch.float16):
        for device in ("cpu", "meta"):
            x = torch.empty(4, 6, 5, dtype=dtype, device=device)
            w, b = torch.empty(6, device=device), torch.empty(6, device=device)
            norms.check_group_norm(x, 2, w, b)
            norms.check_group_norm(x, 3, w, None)
            norms.check_group_norm(x, 2, None, b)
            norms.check_group_norm(x, 2, w.to(dtype), b.to(dtype))      # same dtypes: nothing to check
    assert ran == ["meta"] * 6


def gn_bias(x, b):
    return F.group_norm(x, 3, None, b, 1e-12)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_group_norm_rounds_once_in_every_call(dtype):
    # fuzz graph 7399 (seed 9797): the profiling call's grouped instance norm rounded to fp16, then
    # the bias add rounded again: 31% of the elements an ulp off the correctly rounded value
    # (eager's: 0.01%), which tan near its pole turned into 410 against eager's 293
    g = torch.Generator().manual_seed(0)
    sf = graphfuser.script(gn_bias)
    for _ in range(5):
        x = (torch.rand(33, 33, generator=g) * 5).to(dtype)
        b = torch.randn(33, generator=g).to(dtype)
        y = sf(x, b)
        ref = F.group_norm(x.double(), 3, None, b.double(), 1e-12)
        assert y.dtype == dtype
        assert int((y != ref.to(dtype)).sum()) <= y.numel() // 200
        torch.testing.assert_close(y.double(), ref, rtol=torch.finfo(dtype).eps, atol=torch.finfo(dtype).eps)


def test_one_group_of_data_near_floats_max_on_the_cpu():
    # fuzz graph 1018 of seed 33691: num_groups=1 is not rewritten as an instance norm; its float32
    # statistics of a sample holding 3e38 overflowed (variance inf, output 0 everywhere). They
    # accumulate in float64 on the CPU, as the batch and instance norms' do: float64's answer
    def fn(x):
        return F.group_norm(x, 1, None, None, 1e-12) * 1.0

    row = torch.tensor([0.515, 0.357, 3.0e38, -2.19, 0.713, -0.0, 0.675])
    x = torch.stack([row, torch.randn(7)]).reshape(2, 7, 1)
    sf = graphfuser.script(fn)
    with config.override(disable=["fallback"]):
        for _ in range(3):
            got = sf(x)
    torch.testing.assert_close(got, fn(x.double()).float(), rtol=1e-5, atol=1e-6)
