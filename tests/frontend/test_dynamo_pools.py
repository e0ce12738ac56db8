"""Pools through ``torch.compile(backend="graphfuser")``: ``nn.MaxPool2d`` (``F.max_pool2d``, a
``boolean_dispatch`` wrapper) is the aten node TorchScript has for it, in a training step too."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

from test_dynamo import Recorder, _fresh_dynamo  # noqa: F401 (the fixture: Dynamo reset around each test)


class PoolStem(nn.Module):
    """torchvision's ResNet stem: conv, batch norm, in-place ReLU, max pool."""

    def __init__(self, **pool) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.pool = nn.MaxPool2d(**pool)

    def forward(self, x):
        return self.pool(self.relu(self.bn(self.conv(x)))) * 2.0


@pytest.mark.parametrize("pool", [dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=2),
                                  dict(kernel_size=3, stride=2, ceil_mode=True, dilation=2)])
def test_max_pool_is_an_aten_node_and_matches_eager(pool):
    """``nn.MaxPool2d`` is ``aten::max_pool2d``, not a Python call: a Python call may read
    strides, which kept the channels-last plan off every graph holding one."""
    rec = Recorder()
    m = PoolStem(**pool)
    x = torch.randn(2, 3, 11, 11)
    mc = copy.deepcopy(m)
    c = torch.compile(mc, backend=rec)
    for _ in range(3):
        out = c(x)
        ref = m(x)
        torch.testing.assert_close(out, ref)
        out.sum().backward()
        ref.sum().backward()
    torch.testing.assert_close(mc.conv.weight.grad, m.conv.weight.grad, rtol=1e-4, atol=1e-4)   # (sum orders)
    torch.testing.assert_close(mc.bn.running_var, m.bn.running_var)
    kinds = rec.kinds(0)
    assert "aten::max_pool2d" in kinds and "prim::PythonOp" not in kinds, kinds
