"""Fused reductions and normalizations on the GPU against eager: every launch variant
(persistent vector / scalar, multi-pass, outer, pointwise-like), dtypes, layouts, ragged and
very wide rows, grid-stride row loops and size reuse."""
import pytest
import torch
import torch.nn.functional as F

from helpers import make_input, run_fused

pytestmark = pytest.mark.cuda

FLOATS = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
TOL = {torch.float16: dict(rtol=1e-2, atol=1e-2), torch.bfloat16: dict(rtol=4e-2, atol=4e-2),
       torch.float32: dict(rtol=2e-5, atol=2e-5), torch.float64: dict(rtol=1e-9, atol=1e-9)}


def _flat(x):
    return [t for e in x for t in _flat(e)] if isinstance(x, (tuple, list)) else [x]


def run(fn, *args, tol=None, n=3):
    if tol is None:
        tol = max((TOL.get(t.dtype, dict(rtol=0, atol=0)) for t in _flat(fn(*args))), key=lambda t: t["rtol"])
    sf = run_fused(fn, *args, tol=tol, n=n)
    assert "CudaFusionGroup" in str(sf._optimized), str(sf._optimized)
    return sf


def r(*shape, dtype=torch.float32, layout="dense", low=None):
    return make_input(*shape, dtype=dtype, layout=layout, low=low, device="cuda")


def last_dim_all(x, w, b):
    n = x.shape[-1]
    return (x.sum(-1), x.mean(-1, keepdim=True), x.amax(-1), x.amin(-1), x.var(-1), x.std(-1, unbiased=False),
            torch.softmax(x, -1), torch.log_softmax(x, -1), F.layer_norm(x, [n], w, b, 1e-5),
            x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(5, 37), (64, 4096), (3, 20000), (2, 100003), (20000, 64), (4, 1, 1)])
def test_last_dim_variants(dtype, shape):
    """37: scalar persistent; 4096: vector persistent; 20000 / 100003: multi-pass (vector /
    scalar); 20000 rows: more rows than blocks (grid-stride); size-1 rows."""
    h = shape[-1]
    tol = dict(TOL[dtype], equal_nan=True)
    if h > 10000 and dtype in (torch.float16, torch.bfloat16):
        tol = dict(rtol=5e-2, atol=5e-2, equal_nan=True)   # eager rounds sums of 1e5 half values
    elif h >= 1000 and dtype == torch.float32:
        # x.sum(-1) of thousands of normal values is ~sqrt(h) in size: summed in another order
        # than eager's, it differs by a few ulps of that (2.7e-5 once at h = 4096)
        tol = dict(rtol=2e-5, atol=1e-4, equal_nan=True)
    run(last_dim_all, r(*shape, dtype=dtype), r(h, dtype=dtype), r(h, dtype=dtype), tol=tol)


@pytest.mark.parametrize("layout", ["transposed", "sliced"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_last_dim_layouts(layout, dtype):
    run(last_dim_all, r(33, 1000, dtype=dtype, layout=layout), r(1000, dtype=dtype), r(1000, dtype=dtype))


def first_dim(x):
    return x.sum(0, keepdim=True), x.mean(0), x.amax(0), x.var(0), torch.softmax(x, 0), torch.log_softmax(x, 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(333, 129), (5000, 3), (2, 7000)])
def test_outer_reduction(dtype, shape):
    run(first_dim, r(*shape, dtype=dtype))


def reds_two(x):
    return x.sum([0, 2]), x.mean([-1, 0]), x.amin([0, 2]), torch.var_mean(x, [0, 2], correction=0)


def reds_all(x):
    return x.sum(), x.mean(), x.amax(), torch.std_mean(x)


def int_reds(x):
    return x.sum(-1), x.amax(-1), x.prod(-1), x.sum(0)


def test_multi_dim_all_dim_and_int():
    run(reds_two, r(16, 50, 70))
    run(reds_all, r(3, 1, 50001), tol=dict(rtol=1e-4, atol=1e-4))
    run(int_reds, r(40, 9, dtype=torch.int32))
    run(int_reds, r(40, 9, dtype=torch.int64))


def bn_eval(x, rm, rv, w, b):
    return F.batch_norm(x, rm, rv, w, b, False, 0.1, 1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("fmt", ["contiguous", "channels_last", "odd"])
def test_batch_norm_inference(dtype, fmt):
    x = r(8, 32, 14, 14, dtype=dtype) if fmt != "odd" else r(3, 5, 7, 9, dtype=dtype)
    if fmt == "channels_last":
        x = x.to(memory_format=torch.channels_last)
    c = x.shape[1]
    run(bn_eval, x, r(c, dtype=dtype), r(c, dtype=dtype, low=0.5), r(c, dtype=dtype), r(c, dtype=dtype))


def inorm(x, w, b):
    return F.instance_norm(x, None, None, w, b, True, 0.1, 1e-5)


def grad_sum(g, x):
    return (g * 2.0).sum_to_size(x.shape)


def broadcast_sum(t0, t1):
    return ((t0 + t1) * 3).sum(-1)


def bias_softmax_cast(x, b):
    return torch.softmax(x + b, -1).to(torch.float16)


def native_ln(x, w, b):
    return torch.native_layer_norm(x, [x.shape[-1]], w, b, 1e-5)


def test_more_rows():
    run(inorm, r(4, 8, 33, 17), r(8), r(8))
    run(grad_sum, r(16, 50, 64), r(50, 1))
    run(broadcast_sum, r(16, 1, 2048), r(16, 64, 2048), tol=dict(rtol=1e-4, atol=1e-3))
    run(bias_softmax_cast, r(100, 1024), r(1024))
    run(native_ln, r(64, 768, dtype=torch.bfloat16), r(768, dtype=torch.bfloat16), r(768, dtype=torch.bfloat16))


def softmax(x):
    return torch.softmax(x, -1)


def test_new_sizes_pick_other_variants_of_one_kernel():
    from graphfuser.executor import compiled

    sf = run(softmax, r(8, 4096))
    builds = compiled.STATS["builds"]
    for shape in [(8, 4100), (3, 70000), (1000, 8), (2, 65536), (4096, 2048)]:
        x = r(*shape)
        torch.testing.assert_close(sf(x), softmax(x), **TOL[torch.float32])
    assert compiled.STATS["builds"] == builds


def test_nan_and_inf_rows():
    x = r(4, 3000)
    x[1, 5] = float("nan")
    x[2, :] = float("-inf")
    x[3, 7] = float("inf")
    run(last_dim_all, x, r(3000), r(3000), tol=dict(rtol=1e-5, atol=1e-5, equal_nan=True))
