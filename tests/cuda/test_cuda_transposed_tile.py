"""On the GPU, rows walked in sector tiles (``reduction_schedule.transposed_tile``): a residual
add + group norm (one group) whose residual stream is channels-last among NCHW tensors, against
eager over dtypes, sizes the tile does not divide (7 x 7, 3 x 3), sizes that take the split,
multi-pass and persistent variants, an empty batch and rows holding a constant, an inf or a
NaN."""
import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.config import config

pytestmark = pytest.mark.cuda

TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.bfloat16: dict(rtol=5e-2, atol=5e-2),
       torch.float16: dict(rtol=1e-2, atol=1e-2)}


def residual_group_norm(x, y, p, ls, w, b):
    xn = x + ls * (p - y)
    return xn, F.group_norm(xn, 1, w, b, 1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(64, 64, 56, 56), (8, 320, 14, 14), (4, 512, 7, 7), (3, 5, 3, 3), (0, 8, 4, 4),
                                   (2, 24, 9, 9)])
@pytest.mark.parametrize("cl", ["x", "y", "both"])
def test_mixed_layout_group_norm_matches_eager(dtype, shape, cl):
    N, C = shape[:2]
    torch.manual_seed(0)
    x, y, p = (torch.randn(shape, device="cuda", dtype=dtype) for _ in range(3))
    if N >= 2:
        x[1] = 0.0
        p[1] = y[1]                      # a constant row (zeros: eager's Welford mean is exact)
    if N >= 3:
        x[2, 0, 0, 0] = float("inf")
    cl_fmt = torch.channels_last
    if cl in ("x", "both"):
        x = x.contiguous(memory_format=cl_fmt)
    if cl in ("y", "both"):
        y, p = y.contiguous(memory_format=cl_fmt), p.contiguous(memory_format=cl_fmt)
    ls = torch.randn(C, 1, 1, device="cuda", dtype=dtype)
    w, b = torch.randn(C, device="cuda", dtype=dtype), torch.randn(C, device="cuda", dtype=dtype)
    sf = graphfuser.script(residual_group_norm)
    with torch.no_grad(), config.override(disable=["fallback"]):
        for _ in range(3):
            got = sf(x, y, p, ls, w, b)
    want = residual_group_norm(x, y, p, ls, w, b)
    for g, r in zip(got, want):
        assert g.stride() == r.stride() or g.numel() == 0
        torch.testing.assert_close(g, r, equal_nan=True, **TOL[dtype])
