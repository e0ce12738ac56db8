"""On the GPU: norm backwards whose weight / bias gradients are column sums accumulated by the
row kernel (per-block partials in registers or in the block's slot, summed by the launcher),
against eager: dtypes, odd sizes, one row, fewer rows than blocks, zero rows, constant rows, and
the training benchmark's RMSNorm shape."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "autodiff"))
from column_cases import TOL, assert_grads_close, backward_groups, column_kernels, train_grads  # noqa: E402
from helpers import live_instances  # noqa: E402

pytestmark = pytest.mark.cuda

# (6304, 384): vit_small's layer norm rows; (3001, 96): narrow ones, several to a block, a slot per thread row
SHAPES = [(64, 128), (33, 77), (1, 4096), (7, 3000), (2048, 1024), (300, 20000), (6304, 384), (3001, 96)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", ["rmsnorm_bench", "rms_norm", "layer_norm"])
def test_column_sum_grads_match_eager_on_cuda(name, shape, dtype):
    got, ref, sf = train_grads(name, shape, dtype, "cuda")
    assert_grads_close(got, ref, dtype)
    assert bool(column_kernels(sf)) == (shape[0] > 1) and backward_groups(sf) == 1


@pytest.mark.parametrize("kind", ["constant_rows"])
@pytest.mark.parametrize("name", ["rmsnorm_bench", "nn.LayerNorm"])
def test_column_sums_constant_rows_on_cuda(name, kind):
    got, ref, _ = train_grads(name, (129, 256), torch.float32, "cuda", kind)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, **TOL[torch.float32])


def test_column_sums_zero_rows_on_cuda():
    got, ref, _ = train_grads("layer_norm", (0, 64), torch.float32, "cuda", calls=1)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b)


def test_bench_rmsnorm_shape_on_cuda():
    got, ref, sf = train_grads("rmsnorm_bench", (16384, 4096), torch.bfloat16, "cuda")
    for a, b in zip(got, ref):
        torch.testing.assert_close(a.float(), b.float(), rtol=5e-2, atol=5e-2)
    assert backward_groups(sf) == 1


def _column_launchers(sf) -> list[str]:
    from graphfuser.executor.compiled_reduction import ReductionGroup

    return [o.launcher_source for o in live_instances(ReductionGroup)
            if getattr(o, "launcher_source", None) and "gf_slots" in o.source]


def test_column_sums_finalize_in_one_launch_and_repeat_bitwise():
    """The slots are added up by ``runtime/column_sums.py``'s kernel (no torch ops after the row
    kernel), in a fixed order: two backward passes give the same bits."""
    got, ref, sf = train_grads("layer_norm", (4096, 384), torch.float32, "cuda")
    assert_grads_close(got, ref, torch.float32)
    srcs = _column_launchers(sf)
    assert srcs and all("_colsum.launch(" in s and ".sum(" not in s and "_zeros" not in s for s in srcs)
    again, _, _ = train_grads("layer_norm", (4096, 384), torch.float32, "cuda")
    for a, b in zip(got, again):
        assert torch.equal(a, b)


def test_column_sums_workspace_reused_between_kernels():
    """Kernels that add into their slots (rows too wide for registers) get a zeroed workspace
    after kernels that wrote theirs whole on the same stream left values in it."""
    for shape in [(2048, 1024), (300, 20000), (2048, 1024), (300, 20000)]:
        got, ref, _ = train_grads("layer_norm", shape, torch.float32, "cuda")
        assert_grads_close(got, ref, torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64], ids=str)
def test_finalizing_kernel_against_torch_sum(dtype):
    """The finalizing kernel alone: [slots, nr] partials per output, odd sizes, every output
    dtype, against the slots summed by torch and cast."""
    from graphfuser.runtime.column_sums import MAX_OUTPUTS, column_sum_kernel, launch_shape
    from graphfuser.runtime.cuda_driver import raw_stream

    acc = torch.float64 if dtype == torch.float64 else torch.float32
    k = column_sum_kernel(acc, dtype, 0)
    for slots, nr in [(1, 1), (3, 33), (131, 77), (1056, 384), (40, 5000)]:
        span = (slots * nr + 63) // 64 * 64
        n = 3
        w = torch.randn(n * span, dtype=acc, device="cuda")
        outs = [torch.empty(nr, dtype=dtype, device="cuda") for _ in range(n)]
        ptrs = [o.data_ptr() for o in outs] + [0] * (MAX_OUTPUTS - n)
        # blocks of 32 columns, and the launcher's choice (8 columns where 32 leave SMs idle)
        for grid, block in [(((nr + 31) // 32, n, 1), (32, 32 if slots >= 32 else 8, 1)),
                            launch_shape(nr, n, slots, 132), launch_shape(nr, n, slots, 1)]:
            for o in outs:
                o.fill_(float("nan"))
            k.launch(grid, block, raw_stream(0), w.data_ptr(), span, slots, nr, *ptrs)
            for i, o in enumerate(outs):
                want = w[i * span:i * span + slots * nr].view(slots, nr).sum(0).to(dtype)
                torch.testing.assert_close(o, want, rtol=1e-5 if dtype in (torch.float32, torch.float64) else 1e-2,
                                           atol=1e-4 if dtype in (torch.float32, torch.float64) else 1e-2)


def test_finalizing_kernel_with_a_dtype_per_output():
    """Outputs of different dtypes in one launch (float32 norm gradients, a bf16 bias gradient)."""
    from graphfuser.runtime.column_sums import MAX_OUTPUTS, column_sum_kernel, launch_shape
    from graphfuser.runtime.cuda_driver import raw_stream

    outs_dt = (torch.float32, torch.bfloat16, torch.float32)
    k = column_sum_kernel(torch.float32, outs_dt, 0)
    for slots, nr in [(1, 1), (131, 77), (1056, 384)]:
        span = (slots * nr + 63) // 64 * 64
        w = torch.randn(len(outs_dt) * span, device="cuda")
        outs = [torch.empty(nr, dtype=d, device="cuda") for d in outs_dt]
        ptrs = [o.data_ptr() for o in outs] + [0] * (MAX_OUTPUTS - len(outs))
        grid, block = launch_shape(nr, len(outs), slots, 132)
        k.launch(grid, block, raw_stream(0), w.data_ptr(), span, slots, nr, *ptrs)
        for i, o in enumerate(outs):
            want = w[i * span:i * span + slots * nr].view(slots, nr).sum(0)
            tol = 1e-5 if o.dtype == torch.float32 else 1e-2
            torch.testing.assert_close(o, want.to(o.dtype), rtol=tol, atol=tol)


def test_narrow_rows_share_blocks_with_column_sums():
    """Layer norm backward rows of 96 channels (ConvNeXt-T's first stage): the several-rows twin
    runs them, a slot of partials per thread row, and the gradients are eager's and repeat
    bitwise."""
    from torch.profiler import ProfilerActivity, profile

    got, ref, sf = train_grads("layer_norm", (20000, 96), torch.bfloat16, "cuda")
    assert_grads_close(got, ref, torch.bfloat16)
    x = torch.randn(20000, 96, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn_like(x)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        sf(x).backward(g)
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if "cuda_fusion" in e.name]
    assert any("_mr_" in n for n in names), names
    again, _, _ = train_grads("layer_norm", (20000, 96), torch.bfloat16, "cuda")
    for a, b in zip(got, again):
        assert torch.equal(a, b)
