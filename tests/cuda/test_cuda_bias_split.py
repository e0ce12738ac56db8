"""Automatic bias decomposition on the GPU: conv bias adds fuse with the ReLU after them in fp32,
fp16 and bf16 (cuDNN rounds the conv output before adding its bias, so the split adds no rounding);
a linear's bias is split only in fp32 (the GEMM epilogue rounds once)."""
import pytest
import torch
import torch.nn as nn

import graphfuser
from helpers import fallback_counter, fusion_groups

pytestmark = pytest.mark.cuda


def _biases(g):
    return ["None" if n.inputs[2].node is not None and n.inputs[2].node.kind == "prim::Constant" else "bias"
            for n in g.all_nodes() if n.kind in ("aten::conv2d", "aten::linear")]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_vgg_like_bias_relu_fuses(dtype):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2), nn.Flatten(),
                      nn.Linear(16 * 8 * 8, 32), nn.ReLU(inplace=True), nn.Dropout(), nn.Linear(32, 5))
    m = m.eval().to("cuda", dtype)
    x = torch.randn(4, 3, 16, 16, device="cuda", dtype=dtype)
    sf = graphfuser.script(m)
    with torch.no_grad():
        want = m(x)
        for _ in range(4):
            got = sf(x)
            tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
            torch.testing.assert_close(got, want, **tol)
        g = sf._optimized
        counts = fallback_counter(sf)
        sf(x)
    assert fusion_groups(g) and counts["fallback"] == 0
    expected = ["None", "None", "bias"] if dtype == torch.float32 else ["None", "bias", "bias"]
    assert _biases(g) == expected, g
