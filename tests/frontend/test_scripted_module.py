"""``graphfuser.script(module)`` is an ``nn.Module`` sharing the original's state (issue 31)."""
from __future__ import annotations

import copy
import io
import pickle

import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.frontend.module import ScriptedModule
from helpers import fusion_groups


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.drop = torch.nn.Dropout(0.5)
        self.fc2 = torch.nn.Linear(16, 4)
        self.register_buffer("shift", torch.randn(4))
        self.register_buffer("scratch", torch.zeros(2), persistent=False)
        self.scale = 2.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.drop(F.gelu(self.fc1(x)))) * self.scale + self.shift


def _add_one(x: torch.Tensor) -> torch.Tensor:
    return x + 1.0


def _run(sm, x: torch.Tensor, calls: int = 3) -> torch.Tensor:
    for _ in range(calls):
        out = sm(x)
    return out


def test_is_a_module_sharing_the_original_state():
    torch.manual_seed(0)
    m = Net()
    sm = graphfuser.script(m)
    assert isinstance(sm, torch.nn.Module) and isinstance(sm, ScriptedModule)
    assert sm.original is m
    assert [n for n, _ in sm.named_parameters()] == [n for n, _ in m.named_parameters()]
    assert all(a is b for a, b in zip(sm.parameters(), m.parameters()))
    assert [n for n, _ in sm.named_buffers()] == [n for n, _ in m.named_buffers()]
    assert list(sm.state_dict()) == list(m.state_dict())      # same keys, no prefix; "scratch" not persistent
    assert "scratch" not in sm.state_dict()
    assert sm.fc1 is m.fc1 and sm.get_submodule("fc2") is m.fc2      # submodule access
    assert sm.scale == 2.0                                              # plain attributes of the original
    sm.scale = 3.0
    assert m.scale == 3.0 and "scale" not in sm.__dict__
    assert graphfuser.script(sm) is sm
    assert type(graphfuser.script(_add_one)) is graphfuser.ScriptedFunction
    text = repr(sm)
    assert text.startswith("ScriptedModule(") and "original_name=Net" in text and "(fc1): Linear" in text


def test_runs_fused_and_exposes_graphs():
    torch.manual_seed(0)
    m = Net().eval()
    sm = graphfuser.script(m)
    x = torch.randn(5, 8)
    with torch.no_grad():
        torch.testing.assert_close(_run(sm, x), m(x))
        g = sm.graph_for(x)
    assert fusion_groups(g) and sm._optimized is g                     # executor state reads through
    assert "def forward" in sm.code and str(sm.graph).startswith("graph(%self")
    assert sm.function._optimized is g


def test_train_eval_follow_the_original():
    torch.manual_seed(0)
    m = Net()
    sm = graphfuser.script(m)
    x = torch.randn(64, 8)
    sm.eval()
    assert not m.training and not m.drop.training and not sm.training
    with torch.no_grad():
        torch.testing.assert_close(_run(sm, x), m(x))
    sm.train()
    assert m.training and m.drop.training and sm.training
    with torch.no_grad():
        out = _run(sm, x)
    assert not torch.allclose(out, m.eval()(x))     # dropout is on in training
    m.train()
    sm.training = False                             # the attribute is the original's too
    assert not m.training


def test_load_state_dict_both_ways():
    torch.manual_seed(0)
    m, other = Net().eval(), Net().eval()
    sm = graphfuser.script(m)
    x = torch.randn(5, 8)
    with torch.no_grad():
        _run(sm, x)
        sm.load_state_dict(other.state_dict())          # an eager checkpoint into the scripted model
        torch.testing.assert_close(sm(x), other(x))
        torch.testing.assert_close(m.fc1.weight, other.fc1.weight)
        fresh = Net().eval()
        fresh.load_state_dict(sm.state_dict())          # and the other way
        torch.testing.assert_close(fresh(x), sm(x))
    with pytest.raises(RuntimeError, match="Missing key"):
        sm.load_state_dict({"fc1.weight": other.fc1.weight})


def test_to_dtype_profiles_again():
    torch.manual_seed(0)
    m = Net().eval()
    sm = graphfuser.script(m)
    x = torch.randn(5, 8)
    with torch.no_grad():
        _run(sm, x)
        before = sm.function
        assert sm.double() is sm and m.fc1.weight.dtype == torch.float64
        assert sm.function is not before                 # a fresh executor over the captured graph
        torch.testing.assert_close(_run(sm, x.double()), m(x.double()))
        assert "Double(" in str(sm._optimized) and fusion_groups(sm._optimized)
        same = sm.function
        sm.to(torch.float64)                             # nothing changed: nothing profiled again
        assert sm.function is same
        m.float()                                        # moved behind its back: the guards take it
        torch.testing.assert_close(_run(sm, x), m(x))


def test_deepcopy_is_independent():
    torch.manual_seed(0)
    m = Net().eval()
    sm = graphfuser.script(m)
    x = torch.randn(5, 8)
    with torch.no_grad():
        _run(sm, x)
        d = copy.deepcopy(sm)
        assert isinstance(d, ScriptedModule) and d.original is not m
        assert d.fc1.weight is not sm.fc1.weight
        torch.testing.assert_close(_run(d, x), sm(x))
        d.fc1.weight.add_(1.0)                            # the copy's own parameters
        torch.testing.assert_close(d(x), d.original(x))
        torch.testing.assert_close(sm(x), m(x))
        assert not torch.allclose(d(x), sm(x))


def test_pickles_where_the_original_does():
    torch.manual_seed(0)
    m = Net().eval()
    sm = graphfuser.script(m)
    x = torch.randn(5, 8)
    with torch.no_grad():
        _run(sm, x)
        buf = io.BytesIO()
        torch.save(sm, buf)
        buf.seek(0)
        loaded = torch.load(buf, weights_only=False)
        assert isinstance(loaded, ScriptedModule)
        torch.testing.assert_close(_run(loaded, x), sm(x))
        assert fusion_groups(loaded._optimized)
    m.hook = lambda t: t                                  # the eager module no longer pickles: nor does this
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        pickle.dumps(sm)
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        pickle.dumps(m)


TOL = {"rtol": 1e-5, "atol": 1e-6}     # fused fp32 kernels round differently in the last bits


def _steps(model: torch.nn.Module, opt: torch.optim.Optimizer, data: list) -> list[float]:
    losses = []
    for x, y in data:
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_optimizer_and_checkpoint_round_trip():
    torch.manual_seed(0)
    eager = Net()
    eager.drop.p = 0.0
    model = copy.deepcopy(eager)
    sm = graphfuser.script(model)
    data = [(torch.randn(16, 8), torch.randn(16, 4)) for _ in range(8)]
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.05, momentum=0.9)
    opt_s = torch.optim.SGD(sm.parameters(), lr=0.05, momentum=0.9)
    torch.testing.assert_close(_steps(sm, opt_s, data[:4]), _steps(eager, opt_e, data[:4]), **TOL)
    assert fusion_groups(sm._optimized)
    # checkpoint the scripted model and its optimizer; resume in an eager model and in a new scripted one
    buf = io.BytesIO()
    torch.save({"model": sm.state_dict(), "opt": opt_s.state_dict()}, buf)
    buf.seek(0)
    ckpt = torch.load(buf)
    buf.seek(0)
    ckpt2 = torch.load(buf)      # optimizers loading one dict would share its momentum buffers
    resumed = Net()
    resumed.drop.p = 0.0
    resumed.load_state_dict(ckpt["model"])
    opt_r = torch.optim.SGD(resumed.parameters(), lr=0.05, momentum=0.9)
    opt_r.load_state_dict(ckpt["opt"])
    rescripted = graphfuser.script(copy.deepcopy(resumed))
    opt_rs = torch.optim.SGD(rescripted.parameters(), lr=0.05, momentum=0.9)
    opt_rs.load_state_dict(ckpt2["opt"])
    want = _steps(eager, opt_e, data[4:])
    torch.testing.assert_close(_steps(sm, opt_s, data[4:]), want, **TOL)
    torch.testing.assert_close(_steps(resumed, opt_r, data[4:]), want, **TOL)
    torch.testing.assert_close(_steps(rescripted, opt_rs, data[4:]), want, **TOL)
    for a, b in zip(sm.parameters(), eager.parameters()):
        torch.testing.assert_close(a, b, **TOL)
    for a, b in zip(rescripted.parameters(), eager.parameters()):
        torch.testing.assert_close(a, b, **TOL)


def test_scripting_keeps_the_modules_mode():
    """Wrapping a module in eval mode leaves it in eval mode (its forward's eval branch runs)."""
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5)).eval()
    sm = graphfuser.script(m)
    assert not m.training and not sm.training
    x = torch.randn(3, 4)
    for _ in range(3):
        torch.testing.assert_close(sm(x), m(x))
    m2 = torch.nn.Linear(4, 4).train()
    assert graphfuser.script(m2).training and m2.training
