"""The CUDA reduction schedule knobs against eager: prefetch into registers or shared-memory
stages, computed values kept or recomputed, elements per thread, thread counts per row, the
64-bit index variants, and grids smaller than the row count (grid-stride rows with a prefetch
of the next row)."""
import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.config import config
from graphfuser.executor import compiled_reduction, reduction_launch
from graphfuser.tools.zoo_train import fused_groups
from helpers import fallback_counter

pytestmark = pytest.mark.cuda

# sums of up to 12288 values: summation order moves fp32 results by a few 1e-5
TOL = {torch.float32: dict(rtol=1e-4, atol=2e-4, equal_nan=True), torch.bfloat16: dict(rtol=4e-2, atol=4e-2, equal_nan=True),
       torch.float16: dict(rtol=1e-2, atol=1e-2, equal_nan=True)}


def norms(x, w, b):
    n = x.shape[-1]
    return (torch.softmax(x, -1), F.layer_norm(x, [n], w, b, 1e-5),
            x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w, (x + 0).sum(-1, dtype=torch.float32) * 3,
            x.amax(-1))


def check(*args, **knobs):
    ref = norms(*args)
    with config.override(cuda=knobs.pop("cuda", {}), disable=["fallback"] + knobs.pop("disable", [])):
        sf = graphfuser.script(norms)
        for _ in range(4):
            out = sf(*args)
        counts = fallback_counter(sf)
    assert counts["fallback"] == 0 and "CudaFusionGroup" in str(sf._optimized), str(sf._optimized)
    for o, e in zip(out, ref):
        torch.testing.assert_close(o, e, **TOL[args[0].dtype])


def inputs(rows, n, dtype, sliced=False):
    x = torch.randn(rows, 2 * n if sliced else n, device="cuda").to(dtype)
    x = x[:, ::2] if sliced else x
    x[0, 0] = float("nan") if rows > 1 else x[0, 0]
    return x, torch.randn(n, device="cuda").to(dtype), torch.randn(n, device="cuda").to(dtype)


@pytest.mark.parametrize("stages", [0, 1, 2, 3])
@pytest.mark.parametrize("cache", [True, False])
@pytest.mark.parametrize("shape", [(1000, 4096), (37, 1000), (9, 12288), (300, 64), (2, 8)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_prefetch_stages_and_caching(stages, cache, shape, dtype):
    check(*inputs(*shape, dtype), cuda={"reduction_prefetch_stages": stages, "reduction_cache_computed": cache})


@pytest.mark.parametrize("reg, min_threads", [(8, 32), (16, 128), (32, 64), (32, 512)])
def test_elements_and_threads_per_row(reg, min_threads):
    for shape in [(513, 1024), (64, 3072), (17, 8200)]:
        check(*inputs(*shape, torch.float16),
              cuda={"reduction_register_elements": reg, "reduction_min_threads": min_threads})


def test_no_prefetch_and_unaligned_rows():
    check(*inputs(200, 4096, torch.bfloat16), disable=["prefetch"])
    check(*inputs(200, 1001, torch.bfloat16, sliced=True))          # strided rows: scalar variants


@pytest.mark.parametrize("bps", [0, 1])
def test_more_rows_than_blocks(bps):
    """One block per SM: every block walks many rows, prefetching each next one."""
    check(*inputs(50000, 256, torch.bfloat16), cuda={"reduction_blocks_per_sm": bps})


def _loaded_halves() -> set[str]:
    """'i32' / 'i64' for every reduction variant some launcher has loaded so far."""
    from graphfuser.executor import compiled

    out = set()
    for runner in compiled._MEMORY.values():
        fns = getattr(runner, "namespace", {}).get("_fns")
        if fns and isinstance(getattr(runner, "compiled", None), compiled_reduction.ReductionGroup):
            out |= {runner.compiled.variants[i][3] for i, f in enumerate(fns) if f is not None}
    return out


def test_32_and_64_bit_index_variants(monkeypatch):
    """Small tensors take the 32-bit variants; with the limit lowered, the 64-bit ones."""
    from graphfuser.executor import compiled

    monkeypatch.setattr(compiled, "_MEMORY", {})
    check(*inputs(64, 4096, torch.bfloat16))
    assert _loaded_halves() == {"int"}
    monkeypatch.setattr(compiled, "_MEMORY", {})
    monkeypatch.setattr(reduction_launch, "INDEX_LIMIT", 100)
    check(*inputs(64, 4096, torch.bfloat16))
    check(*inputs(5, 100, torch.float32))
    assert _loaded_halves() == {"long long"}


def full_reductions(x, y):
    return (x.sum(), (x * y).sum(-1), x.abs().amax(), x.mean(dim=[0, 1], keepdim=True), (x - y).amin(-1))


@pytest.mark.parametrize("shape", [(3, 1_000_003), (1, 4_194_304), (40, 70001)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_rows_split_across_blocks(shape, dtype):
    """Few long rows: each row is split across blocks, the last block combines; NaN still
    propagates through the max; calls repeat (the per-row counters reset themselves)."""
    x, y = torch.randn(shape, device="cuda").to(dtype), torch.randn(shape, device="cuda").to(dtype)
    x[-1, -1] = float("nan")
    sf = graphfuser.script(full_reductions)
    n = shape[0] * shape[1]      # sums of n values drift like sqrt(n) ulps with the order
    tol = {torch.float64: dict(rtol=1e-9, atol=1e-9), torch.float32: dict(rtol=1e-4, atol=1e-5 * n ** 0.5),
           torch.bfloat16: dict(rtol=2e-2, atol=2e-2 * n ** 0.5)}[dtype]
    with config.override(disable=["fallback"]):
        for _ in range(5):
            out = sf(x, y)
            for o, e in zip(out, full_reductions(x.double(), y.double())):
                torch.testing.assert_close(o.double(), e, equal_nan=True, **tol)
    assert "CudaFusionGroup" in str(sf._optimized)
    loaded = {runner.compiled.variants[i][2].tag for runner in _reduction_runners()
              for i, f in enumerate(runner.namespace["_fns"]) if f is not None}
    assert any(t.startswith("split") for t in loaded), loaded


def test_integer_sum_split_across_blocks():
    x = torch.randint(-1000, 1000, (2, 3_000_000), device="cuda", dtype=torch.int32)
    sf = graphfuser.script(lambda_free_int_sum)
    with config.override(disable=["fallback"]):
        for _ in range(4):
            out = sf(x)
    assert out.dtype == torch.int64 and torch.equal(out, (x * 2).sum(-1))


def lambda_free_int_sum(x):
    return (x * 2).sum(-1)


def test_normalizations_of_long_rows_do_not_split():
    """Softmax over few long rows needs several passes: the multi-pass variant, not the split."""
    x = torch.randn(2, 300_000, device="cuda")
    sf = graphfuser.script(lambda_free_softmax)
    with config.override(disable=["fallback"]):
        for _ in range(4):
            out = sf(x)
    torch.testing.assert_close(out, torch.softmax(x * 2, -1), rtol=1e-5, atol=1e-7)


def lambda_free_softmax(x):
    return torch.softmax(x * 2, -1)


def _reduction_runners():
    from graphfuser.executor import compiled

    return [r for r in compiled._MEMORY.values()
            if isinstance(getattr(r, "compiled", None), compiled_reduction.ReductionGroup) and r.compiled.target == "cuda"]


@pytest.mark.parametrize("threads", [None, 1, 64, 512])
@pytest.mark.parametrize("stages", [0, 2])
@pytest.mark.parametrize("shape", [(20003, 96), (5001, 8), (777, 40), (3, 200), (50000, 24), (129, 1)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_narrow_rows_several_per_block(threads, stages, shape, dtype):
    """Rows of a warp's threads or fewer share blocks (blockDim.y rows of blockDim.x threads):
    rows not a multiple of the block's, a row count below it, grid-stride rows."""
    check(*inputs(*shape, dtype), cuda={"reduction_row_block_threads": threads, "reduction_prefetch_stages": stages})


def test_narrow_rows_several_per_block_grid_stride():
    """One block per SM: each block's row groups walk many rows (prefetching the next), and
    the rows of one warp leave the loop at different times."""
    check(*inputs(100001, 40, torch.bfloat16), cuda={"reduction_blocks_per_sm": 1})
    check(*inputs(100001, 96, torch.float16, sliced=True), cuda={"reduction_blocks_per_sm": 1})


def _layer_norm_gelu(x, w, b):
    return F.gelu(F.layer_norm(x, [x.shape[-1]], w, b, 1e-6)) * 2


@pytest.mark.parametrize("n", [96, 24, 200])
def test_narrow_layer_norm_training(n):
    """The forward's row outputs (mean, rstd) and the backward's row reductions, narrow rows."""
    f = _layer_norm_gelu
    x = torch.randn(64, 13, 17, n, device="cuda", dtype=torch.bfloat16)
    w, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    args = [t.clone().requires_grad_() for t in (x, w, b)]
    ref_args = [t.clone().requires_grad_() for t in (x, w, b)]
    sf = graphfuser.script(f)
    with config.override(disable=["fallback"]), torch.autocast("cuda", torch.bfloat16):
        for _ in range(4):
            for t in args:
                t.grad = None
            out = sf(*args)
            out.float().square().sum().backward()
    with torch.autocast("cuda", torch.bfloat16):
        ref = f(*ref_args)
    ref.float().square().sum().backward()
    torch.testing.assert_close(out.float(), ref.float(), rtol=4e-2, atol=4e-2)
    for a, r in zip(args, ref_args):
        torch.testing.assert_close(a.grad.float(), r.grad.float(), rtol=5e-2, atol=5e-2 * (1 + r.grad.abs().max().item()))
    with torch.autocast("cuda", torch.bfloat16):
        fw, _ = fused_groups(sf)
    assert fw >= 1
