"""Automatic bias decomposition on the GPU: conv bias adds fuse with the ReLU after them in fp32,
fp16 and bf16 (cuDNN rounds the conv output before adding its bias, so the split adds no rounding);
a linear's bias is split only in fp32 (the GEMM epilogue rounds once) and under training (without
its bias, cuBLAS may run a slower GEMM: inference keeps addmm)."""
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
    expected = ["None", "bias", "bias"]
    assert _biases(g) == expected, g


class _LinearGelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 256)

    def forward(self, x):
        return nn.functional.gelu(self.fc(x))


def test_linear_bias_split_only_under_training():
    """Inference keeps addmm (the bias in the GEMM's epilogue) where ``cuda.linear_bias_split`` says
    so (``auto`` times the two GEMMs: a GPU shared with other test workers may time either way);
    training splits the bias whatever the knob, so its gradient's column sum joins the fused
    backward. Both match eager."""
    from graphfuser.config import config

    torch.manual_seed(0)
    m = _LinearGelu().cuda()
    x = torch.randn(32, 64, device="cuda")
    sf = graphfuser.script(m)
    with torch.no_grad(), config.override(cuda={"linear_bias_split": False}):
        for _ in range(4):
            torch.testing.assert_close(sf(x), m(x), rtol=1e-4, atol=1e-4)
        assert _biases(sf._optimized) == ["bias"]
    sf = graphfuser.script(m)
    with config.override(cuda={"linear_bias_split": False}):
        for _ in range(4):
            m.zero_grad()
            sf(x).sum().backward()
    got = m.fc.bias.grad.clone()
    m.zero_grad()
    m(x).sum().backward()
    torch.testing.assert_close(got, m.fc.bias.grad, rtol=1e-4, atol=1e-4)
    assert _biases(sf._optimized) == ["None"]
