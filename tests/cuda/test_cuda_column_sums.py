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

pytestmark = pytest.mark.cuda

SHAPES = [(64, 128), (33, 77), (1, 4096), (7, 3000), (2048, 1024), (300, 20000)]


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
