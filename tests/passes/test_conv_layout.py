"""The channels-last plan for convolutions (passes/conv_layout.py), run on the CPU here (oneDNN
has NHWC convolutions too; the plan itself is made for CUDA only): values and output strides are
eager's, the plan is made only where nothing can see a layout."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import graphfuser
from graphfuser.config import config
from graphfuser.passes import conv_layout

from helpers import backend_graph_with


@pytest.fixture(autouse=True)
def _cpu_plans(monkeypatch):
    monkeypatch.setattr(conv_layout, "DEVICES", ("cuda", "cpu"))


class Block(nn.Module):
    def __init__(self, c: int = 8, groups: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, groups=groups)
        self.bn2 = nn.BatchNorm2d(c)
        self.fc = nn.Linear(c, 5)

    def features(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + y)


class Classifier(Block):
    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


class MaxPooled(Block):
    """torchvision's ResNet stem: a max pool between the convolutions and the head."""

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(F.max_pool2d(self.features(x), 3, 2, 1), 1), 1))


class FeatureMap(Block):
    def forward(self, x):
        f = self.features(x)
        return f, self.fc(f.mean((2, 3))), f.size(1)


class Viewed(Block):
    def forward(self, x):
        f = self.features(x)
        return self.fc(f.view(f.size(0), f.size(1), -1).mean(-1))


def _model(cls, **kw):
    torch.manual_seed(0)
    m = cls(**kw).eval()
    for bn in (m.bn1, m.bn2):
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
    return m


def _planned(sf) -> int:
    g = sf._optimized
    return sum(1 for n in g.all_nodes() if n.kind == "aten::contiguous" and n.inputs[1].is_constant
               and n.inputs[1].constant() == conv_layout.CHANNELS_LAST
               and any(u.kind == "aten::conv2d" for u, _ in n.output.uses))


def _check(cls, x, calls=5, disable=(), **kw):
    m = _model(cls, **kw)
    sf = graphfuser.script(m)
    with torch.no_grad(), config.override(disable=["fallback", *disable]):
        for _ in range(calls):
            got, want = sf(x), m(x)
            got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
            for g, w in zip(got, want):
                if isinstance(w, torch.Tensor):
                    torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
                    assert g.stride() == w.stride()
                else:
                    assert g == w
    return sf


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_classifier_convs_run_channels_last_with_eagers_values(layout):
    x = torch.randn(2, 3, 9, 11)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    sf = _check(Classifier, x)
    assert _planned(sf) == 2, str(sf._optimized)
    assert any(n.kind == "prim::CpuFusionGroup" for n in sf._optimized.all_nodes())


def test_returned_feature_maps_keep_eagers_strides():
    sf = _check(FeatureMap, torch.randn(2, 3, 6, 5))
    assert _planned(sf) == 2
    sf = _check(FeatureMap, torch.randn(2, 3, 6, 5).contiguous(memory_format=torch.channels_last))
    assert _planned(sf) == 2


def test_a_view_of_a_conv_result_keeps_the_graph_as_it_is():
    sf = _check(Viewed, torch.randn(2, 3, 6, 5))
    assert _planned(sf) == 0


def test_grouped_convolutions_keep_the_graph_as_it_is():
    sf = _check(Classifier, torch.randn(2, 3, 6, 5), groups=2)
    assert _planned(sf) == 0
    sf = _check(Classifier, torch.randn(2, 3, 6, 5), groups=8)     # depthwise: planned
    assert _planned(sf) == 1        # (a depthwise weight [8, 1, 3, 3] is channels-last already)


def test_disabled_by_its_knob():
    sf = _check(Classifier, torch.randn(2, 3, 6, 5), disable=["conv_layout"])
    assert _planned(sf) == 0


@pytest.mark.parametrize("disable", [[], ["conv_layout_training"]], ids=["planned", "knob_off"])
def test_under_grad_gradients_are_eagers(disable):
    """Training steps get the plan too (``PYTORCH_NVFUSER_DISABLE=conv_layout_training``: not):
    gradients, their layouts (each parameter's own) and the running statistics are eager's."""
    m = _model(Classifier).train()
    ref = _model(Classifier).train()
    sf = graphfuser.script(m)
    x = torch.randn(4, 3, 7, 7)
    for _ in range(5):
        for mod, fn in ((m, sf), (ref, ref)):
            mod.zero_grad(set_to_none=True)
            with config.override(disable=disable):
                fn(x).square().sum().backward()
        for (name, p), q in zip(m.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4, msg=name)
            assert p.grad.stride() == q.grad.stride(), name
        torch.testing.assert_close(m.bn1.running_mean, ref.bn1.running_mean)
    assert _planned(sf) == (0 if disable else 2)        # both convolutions


@pytest.mark.parametrize("cls", [Classifier, MaxPooled])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_the_backends_graph_gets_the_plan_too(layout, cls):
    """Through ``torch.compile(backend=graphfuser)`` the classifier's head is a call of
    ``F.adaptive_avg_pool2d``, now the aten op TorchScript sees, so the convolutions are planned as
    through ``graphfuser.script`` (a Python call reading the feature map used to block the plan:
    resnet50 ran 7.81 ms through the backend against 6.37 through script, H100). ``F.max_pool2d``
    likewise (it was a Python call: resnet50's training step ran 156 layout conversions per step
    through the backend, 10.1 ms of kernels against 8.4 through script, H200)."""
    x = torch.randn(2, 3, 9, 11)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    sf = backend_graph_with(_model(cls), x, "aten::conv2d")
    assert sf is not None and _planned(sf) == 2, str(sf and sf._optimized)
