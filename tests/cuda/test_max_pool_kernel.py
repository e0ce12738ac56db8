"""The channel-vector max pool (graphfuser/runtime/max_pool.py) against eager's ``max_pool2d``:
the same bits, shape and strides across dtypes, window arguments, NaN / inf / signed zeros and
odd channel counts, forward and (under grad: the window-position forward and the gather
backward) gradient; the cases it leaves to eager; and a scripted ResNet stem that calls it, in
inference and in a training step."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import graphfuser
from graphfuser.config import config
from graphfuser.runtime import max_pool
from graphfuser.runtime.max_pool import max_pool2d

pytestmark = pytest.mark.cuda

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
WINDOWS = [dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=2), dict(kernel_size=[3, 2], stride=[1, 2]),
           dict(kernel_size=3, stride=2, ceil_mode=True), dict(kernel_size=3, stride=2, padding=1, dilation=2),
           dict(kernel_size=[2, 3], stride=[3, 1], padding=[1, 1], dilation=[2, 1], ceil_mode=True),
           dict(kernel_size=1), dict(kernel_size=5, stride=1, padding=2)]


def _cl(shape, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(shape, device="cuda", generator=g) * 4
    return x.to(dtype).contiguous(memory_format=torch.channels_last)


def _args(w):
    return (w["kernel_size"], w.get("stride", []), w.get("padding", 0), w.get("dilation", 1), w.get("ceil_mode", False))


def _same(got, want):
    assert got.shape == want.shape and got.stride() == want.stride() and got.dtype == want.dtype
    torch.cuda.synchronize()
    # bit for bit: NaNs where eager has them, and the same sign of zero
    assert torch.equal(got.view(torch.int16 if got.element_size() == 2 else torch.int32),
                       want.view(torch.int16 if want.element_size() == 2 else torch.int32))


def _ran_kernel(monkeypatch):
    calls = []
    real = max_pool._kernel

    def spy(*a):
        calls.append(a)
        return real(*a)
    monkeypatch.setattr(max_pool, "_kernel", spy)
    return calls


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("w", WINDOWS, ids=lambda w: "-".join(f"{k}{v}" for k, v in w.items()))
@pytest.mark.parametrize("shape", [(2, 64, 13, 11), (3, 5, 9, 8), (1, 24, 1, 7), (2, 8, 112, 112)])
def test_bits_shape_and_strides_of_eager(dtype, w, shape, monkeypatch):
    x = _cl(shape, dtype)
    try:
        want = F.max_pool2d(x, **w)
    except RuntimeError:
        pytest.skip("eager rejects this window for this size")
    calls = _ran_kernel(monkeypatch)
    got = max_pool2d(x, *_args(w))
    assert calls, "the kernel did not run"
    _same(got, want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_nan_inf_and_signed_zeros(dtype, monkeypatch):
    x = _cl((2, 16, 9, 9), dtype)
    flat = x.permute(0, 2, 3, 1)            # (a view of x's memory, channels last)
    flat[0, 0, 0, :4] = float("nan")
    flat[0, 4, 4, 4:8] = float("inf")
    flat[1, 2, 3, :] = float("-inf")
    flat[1, :, :, 8:] = 0.0
    flat[1, 1::2, ::2, 8:] = -0.0
    flat[0, 3, :, 12] = float("nan")
    calls = _ran_kernel(monkeypatch)
    for w in WINDOWS[:4]:
        _same(max_pool2d(x, *_args(w)), F.max_pool2d(x, **w))
    assert calls


def test_constant_and_huge_values():
    for fill in (7.0, -3e38, 65504.0):
        x = torch.full((2, 8, 6, 6), fill, device="cuda").contiguous(memory_format=torch.channels_last)
        _same(max_pool2d(x, 3, 2, 1), F.max_pool2d(x, 3, 2, 1))


def test_misaligned_input_takes_the_scalar_variant(monkeypatch):
    flat = torch.randn(2 * 10 * 10 * 16 + 1, device="cuda")
    x = flat[1:].view(2, 10, 10, 16).permute(0, 3, 1, 2)       # dense channels-last, a 4-byte offset
    assert x.is_contiguous(memory_format=torch.channels_last) and x.data_ptr() % 16
    calls = _ran_kernel(monkeypatch)
    _same(max_pool2d(x, 3, 2, 1), F.max_pool2d(x, 3, 2, 1))
    assert calls and calls[0][1] == 1        # one channel a thread


def test_cases_left_to_eager(monkeypatch):
    calls = _ran_kernel(monkeypatch)
    x = _cl((2, 8, 10, 10), torch.float32)
    for arg, kw in [(x.contiguous(), {}), (x.double(), {}), (x[:0], {}), (x.to(torch.int32), {}),
                    (x[0], {})]:
        try:
            want = F.max_pool2d(arg, 3, 2, 1)
        except RuntimeError:
            continue
        got = max_pool2d(arg, 3, 2, 1)
        assert torch.equal(got, want) and got.stride() == want.stride()
    y = x.clone().requires_grad_()
    out = max_pool2d(y, 3, 2, 1, 2)          # under grad with dilation: eager's op, its gradient
    out.sum().backward()
    assert y.grad is not None and not calls
    # functorch's transforms and forward-mode AD: eager's op, which has their rules
    g = torch.func.grad(lambda t: max_pool2d(t, 3, 2, 1).sum())(x)
    torch.testing.assert_close(g, torch.func.grad(lambda t: F.max_pool2d(t, 3, 2, 1).sum())(x))
    import torch.autograd.forward_ad as fwAD
    with fwAD.dual_level():
        dual = fwAD.make_dual(x, torch.ones_like(x))
        tangent = fwAD.unpack_dual(max_pool2d(dual, 3, 2, 1)).tangent
    assert tangent is not None and not calls
    with config.override(disable=["max_pool_kernel"]):
        max_pool2d(x, 3, 2, 1)
    assert not calls
    with pytest.raises(RuntimeError):
        max_pool2d(x, 3, 2, 2)               # padding past half the kernel: eager's error
    with torch.no_grad():
        max_pool2d(y, 3, 2, 1)
    assert calls                             # no grad mode: the kernel


class Stem(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        self.pool = nn.MaxPool2d(3, 2, 1)

    def forward(self, x):
        return self.pool(torch.relu(self.bn(self.conv(x)))) + 1.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_scripted_stem_calls_it(dtype, monkeypatch):
    calls = _ran_kernel(monkeypatch)
    m = Stem().cuda().eval().to(dtype)
    x = torch.randn(4, 3, 32, 32, device="cuda", dtype=dtype)
    want = m(x)
    sf = graphfuser.script(m)
    with torch.no_grad():
        for _ in range(4):
            got = sf(x)
    torch.testing.assert_close(got, want, rtol=1e-2 if dtype == torch.bfloat16 else 1e-4, atol=1e-2)
    assert calls, "the scripted stem did not call the max pool kernel"


TRAIN_WINDOWS = [w for w in WINDOWS if w.get("dilation", 1) in (1, [1, 1])]


def _train(x, w, gy_layout="channels_last", pool=None):
    """(output, input gradient) of one forward and backward, for a gradient of random bits."""
    pool = pool or (lambda t: F.max_pool2d(t, **w))
    xr = x.detach().clone().requires_grad_()
    y = pool(xr)
    g = torch.Generator(device="cuda").manual_seed(3)
    gy = (torch.randn(y.shape, device="cuda", generator=g) * 3).to(y.dtype)
    if gy_layout == "channels_last":
        gy = gy.contiguous(memory_format=torch.channels_last)
    elif gy_layout == "expanded":
        gy = gy[:, :1].expand(y.shape)
    return y, torch.autograd.grad(y, xr, gy)[0]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("w", TRAIN_WINDOWS, ids=lambda w: "-".join(f"{k}{v}" for k, v in w.items()))
@pytest.mark.parametrize("shape", [(2, 64, 13, 11), (3, 5, 9, 8), (2, 8, 112, 112)])
@pytest.mark.parametrize("gy_layout", ["channels_last", "contiguous", "expanded"])
def test_training_bits_of_eager(dtype, w, shape, gy_layout, monkeypatch):
    x = _cl(shape, dtype)
    try:
        want = _train(x, w, gy_layout)
    except RuntimeError:
        pytest.skip("eager rejects this window for this size")
    calls = _ran_kernel(monkeypatch)
    got = _train(x, w, gy_layout, pool=lambda t: max_pool2d(t, *_args(w)))
    assert {c[-1] for c in calls} >= {"fwd", "bwd"}, calls
    _same(got[0], want[0])
    _same(got[1], want[1])


@pytest.mark.parametrize("dtype", DTYPES)
def test_training_nan_inf_ties(dtype, monkeypatch):
    """NaN (the last one of a window is chosen, as eager's index), windows all -inf (their
    first element inside the input), constant windows (the first maximum) and signed zeros."""
    x = _cl((2, 16, 9, 9), dtype)
    flat = x.permute(0, 2, 3, 1)
    flat[0, 0, 0, :4] = float("nan")
    flat[0, 1, 0, 2:6] = float("nan")
    flat[0, 4, 4, 4:8] = float("inf")
    flat[1, :4, :4, :8] = float("-inf")
    flat[1, :, :, 8:] = 0.0
    flat[1, 1::2, ::2, 8:] = -0.0
    flat[0, 5:, 5:, 12:] = 2.5
    calls = _ran_kernel(monkeypatch)
    for w in TRAIN_WINDOWS[:4]:
        want = _train(x, w)
        got = _train(x, w, pool=lambda t: max_pool2d(t, *_args(w)))
        _same(got[0], want[0])
        _same(got[1], want[1])
    assert {c[-1] for c in calls} >= {"fwd", "bwd"}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_scripted_stem_trains_with_it(dtype, monkeypatch):
    calls = _ran_kernel(monkeypatch)
    torch.manual_seed(0)
    m = Stem().cuda().to(dtype).to(memory_format=torch.channels_last)
    mf = copy.deepcopy(m)
    sf = graphfuser.script(mf)
    x = torch.randn(4, 3, 32, 32, device="cuda", dtype=dtype).contiguous(memory_format=torch.channels_last)
    tol = dict(rtol=5e-2, atol=5e-2) if dtype == torch.bfloat16 else dict(rtol=1e-4, atol=1e-4)
    for _ in range(4):
        ge = torch.autograd.grad(m(x).square().sum(), list(m.parameters()))
        gf = torch.autograd.grad(sf(x).square().sum(), list(mf.parameters()))
        for a, e in zip(gf, ge):
            torch.testing.assert_close(a, e, **tol)
    assert {c[-1] for c in calls} >= {"fwd", "bwd"}, "the training stem did not call the max pool kernels"
