"""CUDA exp and sigmoid (and so silu and tanh-GELU) through the hardware's ex2.approx and
rcp.approx against eager and float64, over edge values: signed zeros, the ends of float32's
exponent range (subnormal results kept), infinities and NaN, fp32 / fp16 / bf16. With
PYTORCH_NVFUSER_DISABLE=fast_math the kernels use expf and IEEE division instead."""
import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.config import config

pytestmark = pytest.mark.cuda

EDGES = [0.0, -0.0, 1e-30, -1e-30, 0.5, -0.5, 3.0, -3.0, 15.0, -15.0, 20.0, -20.0, 80.0, -80.0, 87.0,
         -87.0, 88.5, -88.5, 95.0, -95.0, 104.0, -104.0, 120.0, -120.0, 1e4, -1e4, 3e38, -3e38,
         float("inf"), float("-inf"), float("nan")]


def _sigmoid(x):
    return torch.sigmoid(x * 1.0)


def _silu(x):
    return F.silu(x * 1.0)


def _gelu_tanh(x):
    return F.gelu(x * 1.0, approximate="tanh")


def _exp(x):
    return torch.exp(x * 1.0)


def _exact(fn, x):
    """float64 values by formulas without cancellation: eager's tanh-GELU, 0.5 x (1 + tanh(u)),
    is 0 in float64 too once tanh(u) rounds to -1 (x below about -9 there); x sigmoid(2u) is the
    same function and keeps those tiny values."""
    x = x.double()
    if fn is _gelu_tanh:
        u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        return x * torch.sigmoid(2 * u)
    return fn(x)


def _data(dtype):
    torch.manual_seed(0)
    x = torch.cat([torch.tensor(EDGES), torch.randn(4096) * 8, torch.randn(1021) * 100])
    return x.to(dtype).cuda()


def _fused(fn, x):
    sf = graphfuser.script(fn)
    with config.override(disable=["fallback"]):
        for _ in range(3):
            out = sf(x)
    assert "FusionGroup" in str(graphfuser.last_executed_optimized_graph())
    return out


@pytest.mark.parametrize("precise", [False, True], ids=["fast", "precise"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("fn", [_sigmoid, _silu, _gelu_tanh, _exp], ids=lambda f: f.__name__[1:])
def test_fast_exp_and_sigmoid_against_eager(fn, dtype, precise):
    x = _data(dtype)
    with config.override(disable=["fast_math"] if precise else []):
        out = _fused(fn, x)
    ref = fn(x)
    exact = _exact(fn, x)
    # same NaNs, infinities and zeros (signs included) as eager
    assert torch.equal(out.isnan(), ref.isnan())
    finite = ref.isfinite()
    assert torch.equal(out[~finite & ~ref.isnan()], ref[~finite & ~ref.isnan()])
    zero = ref == 0
    assert torch.equal(out[zero].signbit(), ref[zero].signbit()) or dtype != torch.float32
    # within eager's own distance from float64 and a few units of the result's last place
    err = (out.double() - exact).abs()[finite]
    err_eager = (ref.double() - exact).abs()[finite]
    ulp = torch.finfo(dtype).eps * exact.abs()[finite]
    # float32 exp's argument rounding: |x| log2(e) 2^-24 relative (about 1.2e-5 at |x| = 88)
    slack = 4 * ulp + exact.abs()[finite] * x.double().abs()[finite].clamp(max=120) * 1e-7
    tiny = torch.finfo(dtype).tiny if dtype == torch.float32 else 0.0
    bad = err > err_eager + slack + tiny
    assert not bool(bad.any()), (x[finite][bad][:5], out[finite][bad][:5], ref[finite][bad][:5])
