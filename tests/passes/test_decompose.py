"""linear_decomposition / conv_decomposition: the bias add leaves linear / conv and fuses with the
activation after it; results equal eager's; off by default."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import graphfuser
from graphfuser.config import config
from tests.helpers import check


class LinearGelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 32)

    def forward(self, x):
        return F.gelu(self.fc(x)) * 2.0


class ConvRelu(nn.Module):
    def __init__(self, conv):
        super().__init__()
        self.conv = conv

    def forward(self, x):
        return torch.relu(self.conv(x) + 1.0)


@pytest.fixture(autouse=True)
def _inference():
    with torch.no_grad():
        yield


def _group_kinds(sf):
    return [m.kind for n in sf._optimized.all_nodes() if n.kind.endswith("FusionGroup")
            for m in n.subgraph.block.nodes]


def test_off_by_default_linear_keeps_its_bias():
    sf = check(LinearGelu().eval(), torch.randn(4, 16))
    assert "aten::add" not in _group_kinds(sf)


def test_linear_decomposition_fuses_bias_with_gelu():
    m = LinearGelu().eval()
    with config.override(enable=["linear_decomposition"]):
        sf = check(m, torch.randn(4, 16))
        sf3 = check(m, torch.randn(2, 3, 16))
    assert "aten::add" in _group_kinds(sf) and "aten::gelu" in _group_kinds(sf)
    assert "aten::add" in _group_kinds(sf3)


@pytest.mark.parametrize("conv,shape", [(nn.Conv1d(3, 8, 3), (2, 3, 9)), (nn.Conv2d(3, 8, 3, padding=1), (2, 3, 7, 5)),
                                         (nn.Conv3d(2, 4, 1), (1, 2, 3, 4, 5))])
def test_conv_decomposition(conv, shape):
    m = ConvRelu(conv).eval()
    with config.override(enable=["conv_decomposition"]):
        sf = check(m, torch.randn(*shape))
    assert "aten::add" in _group_kinds(sf)


def test_conv_without_bias_is_left_alone():
    m = ConvRelu(nn.Conv2d(3, 8, 3, bias=False)).eval()
    with config.override(enable=["conv_decomposition"]):
        sf = check(m, torch.randn(2, 3, 6, 6))
    assert "aten::conv2d" in str(sf._optimized)


class SqueezeExcite(nn.Module):
    def __init__(self, c=16):
        super().__init__()
        self.fc1 = nn.Conv2d(c, 4, 1)
        self.fc2 = nn.Conv2d(4, c, 1)

    def forward(self, x):
        s = F.adaptive_avg_pool2d(x, 1)
        s = F.hardsigmoid(self.fc2(F.relu(self.fc1(s))))
        return x * s


class Head(nn.Module):
    def forward(self, x):
        return torch.flatten(F.adaptive_avg_pool2d(torch.relu(x * 2.0), 1), 1)


class PoolModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d((1, 1))

    def forward(self, x):
        return torch.flatten(self.pool(torch.relu(x * 2.0)), 1)


@pytest.mark.parametrize("cl", [False, True])
def test_global_pool_is_a_fused_mean(cl):
    x = torch.randn(2, 16, 7, 5)
    if cl:
        x = x.contiguous(memory_format=torch.channels_last)
    sf = check(Head().eval(), x)
    assert "aten::mean" in _group_kinds(sf) and "adaptive_avg_pool2d" not in str(sf._optimized)
    check(SqueezeExcite().eval(), x)
    sf = check(PoolModule().eval(), x, fused=None)
    assert "adaptive_avg_pool2d" not in str(sf._optimized)


def test_pools_to_other_sizes_are_kept():
    def f(x):
        return F.adaptive_avg_pool2d(x * 2.0, [2, 2]) + F.adaptive_avg_pool1d(x.flatten(2), 1).unsqueeze(-1)

    sf = check(f, torch.randn(2, 3, 6, 6), fused=None)
    assert "adaptive_avg_pool2d" in str(sf._optimized)
