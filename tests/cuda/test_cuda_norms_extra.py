"""Fused instance norm and group norm (num_groups=1) on the GPU against eager, with a pointwise
producer and consumer: dtypes, channels-last, short rows (persistent variants), long rows
(multi-pass variants), more rows than blocks, and new sizes reusing the kernel."""
import pytest
import torch
import torch.nn.functional as F

from helpers import fusion_groups, run_fused

pytestmark = pytest.mark.cuda

FLOATS = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
TOL = {torch.float16: dict(rtol=1e-2, atol=1e-2), torch.bfloat16: dict(rtol=4e-2, atol=4e-2),
       torch.float32: dict(rtol=1e-4, atol=1e-4), torch.float64: dict(rtol=1e-9, atol=1e-9)}


def run(fn, *args, n=3):
    sf = run_fused(fn, *args, tol=TOL[args[0].dtype], n=n)
    (group,) = fusion_groups(sf._optimized)
    kinds = [k.kind for k in group.subgraph.nodes() if k.kind.startswith("aten::")]
    assert kinds[0] == "aten::mul" and kinds[-1] == "aten::relu" and len(kinds) == 4, kinds
    return sf


def r(*shape, dtype=torch.float32, low=None):
    t = torch.randn(shape, device="cuda") if low is None else torch.rand(shape, device="cuda") + low
    return t.to(dtype)


def inorm(x, w, b):
    return torch.instance_norm(x * 2 + 1, w, b, None, None, True, 0.1, 1e-5, False).relu()


def inorm_running(x, rm, rv, w, b):
    return F.instance_norm(x * 2 + 1, rm, rv, w, b, False, 0.1, 1e-5).relu()


def gnorm(x, w, b):
    return torch.group_norm(x * 2 + 1, 1, w, b, 1e-5, False).relu()


SHAPES = [(2, 6, 7, 5), (8, 32, 14, 14), (2, 4, 150, 150), (300, 3, 9, 1)]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("fmt", ["contiguous", "channels_last"])
def test_norms(dtype, shape, fmt):
    """7x5 / 14x14: persistent rows; 150x150 (22500) and group norm's 4x22500: multi-pass rows;
    300 samples x 3 channels: more rows than blocks for instance norm."""
    x = r(*shape, dtype=dtype)
    if fmt == "channels_last":
        x = x.to(memory_format=torch.channels_last)
    c = shape[1]
    w, b = r(c, dtype=dtype), r(c, dtype=dtype)
    run(inorm, x, w, b)
    run(gnorm, x, w, b)
    run(inorm_running, x, r(c, dtype=dtype), r(c, dtype=dtype, low=0.5), w, b)


def test_new_sizes_reuse_the_kernel():
    from graphfuser.executor import compiled

    sf_i, sf_g = run(inorm, r(2, 6, 7, 5), r(6), r(6)), run(gnorm, r(2, 6, 7, 5), r(6), r(6))
    builds = compiled.STATS["builds"]
    for shape in [(3, 6, 40, 40), (1, 6, 300, 301), (64, 6, 3, 3)]:
        x, w, b = r(*shape), r(6), r(6)
        torch.testing.assert_close(sf_i(x, w, b), inorm(x, w, b), **TOL[torch.float32])
        torch.testing.assert_close(sf_g(x, w, b), gnorm(x, w, b), **TOL[torch.float32])
    assert compiled.STATS["builds"] == builds


def _ln_shift(x, w, b):
    return F.layer_norm(x * 1.0, [x.shape[-1]], w, b, 1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("width", [5, 4096])
def test_layer_norm_of_rows_whose_sums_overflow(dtype, width):
    """Rows of finite values whose sums overflow float32 (two 3e38 after a first element of 0.5:
    the shifted sum is inf): eager's CUDA layer norm gives the bias there (its Welford mean stays
    finite, its variance is inf, its rstd 0), and so does the kernel (it had made those rows NaN,
    as for data holding an inf); rows holding an inf or a NaN stay NaN, ordinary rows keep their
    values."""
    import graphfuser
    from graphfuser.config import config

    x = torch.randn(6, width, device="cuda")
    x[0, :3] = torch.tensor([0.5, 3e38, 3e38])
    x[1, :3] = torch.tensor([-1.0, -3e38, -3e38])
    x[2, 2] = float("inf")
    x[3, 0] = float("nan")
    x = x.to(dtype)
    w, b = r(width, dtype=dtype), r(width, dtype=dtype)
    sf = graphfuser.script(_ln_shift)
    with config.override(disable=["fallback"]):
        for _ in range(3):
            out = sf(x, w, b)
    assert fusion_groups(sf._optimized)
    ref = _ln_shift(x, w, b)
    torch.testing.assert_close(out[:2], b.expand(2, width), **TOL[dtype])
    torch.testing.assert_close(out, ref, equal_nan=True, **TOL[dtype])
