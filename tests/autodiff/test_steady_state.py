"""The steady state of a training loop, by counting: after warm-up no step profiles, optimizes,
compiles, re-specializes or misses a guard (in the forward program or any backward graph), and
every differentiable group runs its fused forward and backward once per step."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.autodiff import STATS as AUTODIFF
from graphfuser.autodiff.function import DifferentiableGroup
from graphfuser.config import config
from graphfuser.executor.compiled import STATS as BUILDS
from graphfuser.executor.fusion import STATS as EXEC


class ConvBlock(torch.nn.Module):
    """A ResNet-like block: conv, batch norm in training, ReLU, residual add."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(c)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)) + x)


class MlpBlock(torch.nn.Module):
    """A ConvNeXt / transformer-like block: layer norm, linear, GELU, linear, scale, residual."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(c)
        self.fc1 = torch.nn.Linear(c, 2 * c)
        self.fc2 = torch.nn.Linear(2 * c, c)
        self.gamma = torch.nn.Parameter(torch.full((c,), 0.5))

    def forward(self, x):
        return x + self.gamma * self.fc2(F.gelu(self.fc1(self.norm(x))))


def _counts() -> dict:
    return {**EXEC, "builds": BUILDS["builds"], "forward": AUTODIFF["forward"], "backward": AUTODIFF["backward"]}


def _groups(sf: graphfuser.ScriptedFunction, amp) -> list[DifferentiableGroup]:
    with torch.autocast("cpu", dtype=amp, enabled=amp is not None):
        inner = sf._specialized()     # the specialization for this autocast state
    return [r for r in inner._runners.values() if isinstance(r, DifferentiableGroup)]


@pytest.mark.parametrize("amp", [None, torch.bfloat16])
@pytest.mark.parametrize("make,shape", [
    (lambda: torch.nn.Sequential(ConvBlock(4), ConvBlock(4)), (2, 4, 6, 6)),
    (lambda: torch.nn.Sequential(MlpBlock(8), MlpBlock(8)), (2, 5, 8)),
], ids=["conv-bn", "mlp"])
def test_training_loop_reaches_a_steady_state(make, shape, amp):
    torch.manual_seed(0)
    model = make()
    eager = copy.deepcopy(model)
    sf = graphfuser.script(model)
    x, target = torch.randn(shape), torch.randn(shape)
    opts = [torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9) for m in (eager, model)]

    def step(fn, opt) -> float:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=amp, enabled=amp is not None):
            out = fn(x)
        loss = ((out.float() - target) ** 2).mean()
        loss.backward()
        opt.step()
        return loss.item()

    with config.override(disable=["fallback"]):
        for _ in range(4):          # profiling of the forward, then of every backward graph
            e, g = step(eager, opts[0]), step(sf, opts[1])
        # the groups that ran: a module's batch norm reads its training flag at run time, and the
        # eval block of its If holds a group (the ReLU / residual add) that training never runs
        groups = [dg for dg in _groups(sf, amp) if dg.backward._calls]
        assert groups, "no differentiable group: nothing to check"
        assert all(dg.backward._fast is not None for dg in groups), "a backward graph still profiles"
        assert not any(dg.backward._replayable for dg in groups)     # backward graphs never replay
        before = _counts()
        steps = 3
        for _ in range(steps):
            e, g = step(eager, opts[0]), step(sf, opts[1])
        after = _counts()
    for k in ("profiling_calls", "optimizations", "respecializations", "fallbacks", "builds"):
        assert after[k] == before[k], (k, before[k], after[k])
    # every differentiable group ran fused, forward and backward, once per step
    assert after["forward"] - before["forward"] == steps * len(groups)
    assert after["backward"] - before["backward"] == steps * len(groups)
    assert g == pytest.approx(e, rel=2e-2 if amp else 1e-4)
