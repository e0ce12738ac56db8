"""Kept weights (``PYTORCH_NVFUSER_ENABLE=weight_cache``, executor/weight_cache.py): under
autocast inference each weight is cast once and kept while the parameter is unchanged; every
way a parameter changes through a tensor op (in place under no_grad, an optimizer step,
load_state_dict, ``param.data = t``) is seen on the next call, through both frontends."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import graphfuser
from helpers import bf16_training_output
from graphfuser.config import config
from graphfuser.executor import weight_cache


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.fc2 = nn.Linear(64, 16)
        self.norm = nn.LayerNorm(64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.norm(self.fc1(x))))


BF16 = {"rtol": 2e-2, "atol": 1e-2}     # graphfuser's fused bf16 chain against eager's, knob on or off


@pytest.fixture
def kept():
    with config.override(enable=["weight_cache"]):
        yield


def _entry(frontend: str, m: nn.Module):
    if frontend == "script":
        return graphfuser.script(m)
    from graphfuser.frontend.dynamo import graphfuser_backend

    torch._dynamo.reset()
    return torch.compile(m, backend=graphfuser_backend)


def _run(f, x):
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        return f(x)


def _changes():
    """(name, how to change the model in place) pairs, each through a tensor op."""
    def in_place(m):
        with torch.no_grad():
            m.fc1.weight.mul_(1.5)

    def optimizer(m):
        opt = torch.optim.SGD(m.parameters(), lr=0.5)
        m(torch.randn(4, 32)).square().sum().backward()
        opt.step()
        m.zero_grad()

    def state_dict(m):
        other = MLP()
        m.load_state_dict(other.state_dict())

    def rebind(m):
        m.fc2.weight.data = torch.randn_like(m.fc2.weight)

    return [("in_place", in_place), ("optimizer", optimizer), ("load_state_dict", state_dict), ("rebind", rebind)]


@pytest.mark.parametrize("frontend", ["script", "compile"])
@pytest.mark.parametrize("name,change", _changes())
def test_kept_weights_follow_their_parameters(frontend, name, change):
    """The kept program's results equal, bit for bit, those of the same model without the knob
    (the same kernels; a kept cast is the cast), before and after each change."""
    torch.manual_seed(0)
    m = MLP().eval()
    x = torch.randn(8, 32)
    with config.override(enable=["weight_cache"]):
        f = _entry(frontend, m)
        for _ in range(4):
            out = _run(f, x)
    plain = graphfuser.script(m)
    for _ in range(4):
        expect = _run(plain, x)
    torch.testing.assert_close(out, _run(m, x), **BF16)
    assert torch.equal(out, expect)
    fills, hits = weight_cache.STATS["fills"], weight_cache.STATS["hits"]
    with config.override(enable=["weight_cache"]):
        _run(f, x)
    assert weight_cache.STATS["hits"] > hits and weight_cache.STATS["fills"] == fills   # kept, not recast
    change(m)
    for _ in range(2):
        with config.override(enable=["weight_cache"]):
            out = _run(f, x)
        assert torch.equal(out, _run(plain, x)), f"after {name}"


def test_only_inference_keeps_weights(kept):
    """Under grad the chain runs every call (autograd sees the cast); off by default."""
    torch.manual_seed(0)
    m = MLP()
    s = graphfuser.script(m)
    x = torch.randn(8, 32)
    bf16_training_output(s, x).float().sum().backward()
    ref = copy.deepcopy(m)
    ref.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref(x).float().sum().backward()
    for a, b in zip(m.parameters(), ref.parameters()):
        assert a.grad is not None
    assert not weight_cache.caches_of(graphfuser.last_executed_optimized_graph())


def test_off_by_default():
    m = MLP().eval()
    s = graphfuser.script(m)
    for _ in range(3):
        _run(s, torch.randn(2, 32))
    assert not weight_cache.caches_of(graphfuser.last_executed_optimized_graph())


def test_kept_graph_shows_the_cache(kept):
    m = MLP().eval()
    s = graphfuser.script(m)
    for _ in range(3):
        _run(s, torch.randn(2, 32))
    g = graphfuser.last_executed_optimized_graph()
    assert len(weight_cache.caches_of(g)) == 4      # fc1 / fc2 weights and biases
    assert "weight_cache" in str(g).split("graph(", 1)[1].split("\n", 1)[1]


def test_release_drops_kept_weights(kept):
    m = MLP().eval()
    s = graphfuser.script(m)
    x = torch.randn(2, 32)
    for _ in range(3):
        _run(s, x)
    assert weight_cache.release_weight_caches() > 0
    torch.testing.assert_close(_run(s, x), _run(m, x), **BF16)


def test_the_race_measures_the_kept_entry_point_beside_the_default(monkeypatch):
    """``python -m graphfuser race --backends ...,graphfuser_compile_kept``: the backend with the
    knob passed as a compile option (the default entry point keeps nothing)."""
    from graphfuser.frontend import dynamo
    from graphfuser.tools import race

    # the function, not the name: compiling by name would register the entry point in this
    # process, which tests/frontend/test_dynamo_entry_point.py checks nothing does
    monkeypatch.setattr(dynamo, "registered_backend", lambda: dynamo.graphfuser_backend)

    torch.manual_seed(0)
    x = torch.randn(4, 32)
    for backend, keeps in (("graphfuser_compile", False), ("graphfuser_compile_kept", True)):
        torch._dynamo.reset()
        m = MLP().eval()
        fills = weight_cache.STATS["fills"]
        f = race._wrap(backend, m)
        for _ in range(4):
            out = _run(f, x)
        torch.testing.assert_close(out, _run(m, x), **BF16)
        assert (weight_cache.STATS["fills"] > fills) == keeps


def test_a_padded_gemms_weight_is_kept_cast_and_padded(kept, monkeypatch):
    """A linear padded for alignment (``passes/gemm_pad.py``: 1001 columns) reads its weight
    through ``graphfuser::pad_rows``, the cast and the pad in one copy: that chain is kept too,
    and follows an in-place change of the weight."""
    from graphfuser.passes import gemm_pad

    monkeypatch.setattr(gemm_pad, "DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(gemm_pad, "MIN_ELEMENTS", 1)
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 1001)).eval()
    s = graphfuser.script(m)
    x = torch.randn(4, 32)
    for _ in range(4):
        out = _run(s, x)
    torch.testing.assert_close(out, _run(m, x), **BF16)
    g = graphfuser.last_executed_optimized_graph()
    assert not any(n.kind == "graphfuser::pad_rows" for n in g.all_nodes()), str(g)   # inside a cache
    assert len(weight_cache.caches_of(g)) == 4
    with torch.no_grad():
        m[2].weight.mul_(0.5)
    torch.testing.assert_close(_run(s, x), _run(m, x), **BF16)
