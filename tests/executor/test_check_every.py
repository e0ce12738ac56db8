"""``check_every``: a fused group checks itself against its eager program and is quarantined when wrong."""
from __future__ import annotations

import glob
import os
import warnings
from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.config import Config, ConfigError, config
from graphfuser.executor import compiled
from graphfuser.executor.fusion import STATS, FusionFailure, compare
from helpers import fusion_groups


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


@pytest.fixture(autouse=True)
def _checks_off_after():
    yield
    graphfuser.set_check_every(0)


def two_groups(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    a = (x * 2.0).relu()
    b = a @ w
    return torch.tanh(b) + 1.0


def wrong_kernel(monkeypatch, marker: str, perturb: Callable[[torch.Tensor], torch.Tensor] = lambda o: o * 1.5 + 1
                 ) -> dict:
    """Compiled runners of groups whose subgraph mentions ``marker`` return perturbed outputs;
    the returned dict counts their calls."""
    original = compiled.compile_group
    calls = {"n": 0}

    def compile_group(group, *args, **kwargs):
        run = original(group, *args, **kwargs)
        if marker not in str(group.subgraph):
            return run

        def wrong(*inputs: Any) -> tuple:
            calls["n"] += 1
            return tuple(perturb(o) for o in run(*inputs))
        return wrong

    monkeypatch.setattr(compiled, "compile_group", compile_group)
    return calls


def _quarantine_warnings(record: list) -> list[str]:
    return [str(r.message) for r in record if "Quarantined" in str(r.message)]


@pytest.mark.parametrize("device", DEVICES)
def test_wrong_group_is_quarantined_with_one_warning_and_a_repro(monkeypatch, device):
    calls = wrong_kernel(monkeypatch, "aten::tanh")
    repro_dir = config.repro_dir
    before = set(glob.glob(os.path.join(repro_dir, "*"))) if os.path.isdir(repro_dir) else set()
    graphfuser.set_check_every(3)
    sf = graphfuser.script(two_groups)
    x, w = torch.randn(8, 8, device=device), torch.randn(8, 8, device=device)
    want = two_groups(x, w)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        outs = [sf(x, w) for _ in range(12)]
    found = _quarantine_warnings(record)
    assert len(found) == 1, found
    kind = "prim::CudaFusionGroup" if device == "cuda" else "prim::CpuFusionGroup"
    assert kind in found[0] and "of two_groups" in found[0] and "Repro written to" in found[0]
    # the wrong kernel ran on the steady calls before the third (the checked one, which returns
    # eager's result and finds it suspect) and on the fourth (checked in full: quarantined), never after
    assert calls["n"] == 4
    wrong = [i for i, out in enumerate(outs) if not torch.allclose(out, want)]
    assert len(wrong) == 2 and wrong[1] == wrong[0] + 1           # the two unchecked steady calls
    for out in outs[wrong[1] + 1:]:                               # the checked calls and every later one
        torch.testing.assert_close(out, want)
    sites = set(sf._sites.values())
    assert sorted(s.quarantined for s in sites) == [False, True]  # the other group stays fused and checked
    assert len(fusion_groups(sf._optimized)) == 2
    after = set(glob.glob(os.path.join(repro_dir, "*"))) - before
    txt = [p for p in after if p.endswith(".txt")]
    assert txt and any(p.endswith(".inputs.pt") for p in after)
    text = open(txt[0]).read()
    assert "disagrees with its eager program" in text and "aten::tanh" in text
    saved = torch.load([p for p in after if p.endswith(".inputs.pt")][0])
    assert set(saved) == {"inputs", "fused", "eager"}


def test_every_call_checked_returns_eager_on_the_bad_call(monkeypatch):
    wrong_kernel(monkeypatch, "aten::relu")
    graphfuser.set_check_every(1)
    sf = graphfuser.script(two_groups)
    x, w = torch.randn(8, 8), torch.randn(8, 8)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for _ in range(6):
            torch.testing.assert_close(sf(x, w), two_groups(x, w))
    assert len(_quarantine_warnings(record)) == 1


def test_knob_set_on_a_running_function(monkeypatch):
    calls = wrong_kernel(monkeypatch, "aten::tanh")
    sf = graphfuser.script(two_groups)
    x, w = torch.randn(8, 8), torch.randn(8, 8)
    for _ in range(4):
        sf(x, w)
    assert calls["n"] == 2                                         # off: nothing checks it
    assert graphfuser.set_check_every(2) == 0
    with pytest.warns(RuntimeWarning, match="Quarantined"):
        for _ in range(3):                                         # quick check, then the full one
            sf(x, w)
    n = calls["n"]
    for _ in range(3):
        torch.testing.assert_close(sf(x, w), two_groups(x, w))
    assert calls["n"] == n


def test_steady_program_is_the_same_with_the_knob_on_or_off():
    # the host program of the steady calls binds the compiled runners either way; the knob adds
    # a checking program, run for every N-th call of the function (and nothing else per call)
    sf = graphfuser.script(two_groups)
    x, w = torch.randn(8, 8), torch.randn(8, 8)
    for _ in range(3):
        sf(x, w)
    runners = [getattr(r, "run", r) for r in sf._runners.values() if not callable(getattr(r, "__self__", None))]

    def checked(program):
        return sum(getattr(f, "__name__", "") == "checked" for f in program.fn.__globals__.values())

    bound = list(sf._program.fn.__globals__.values())
    assert not checked(sf._program) and sf._checking is None
    assert any(any(f is r for f in bound) for r in runners)        # the compiled runners themselves
    graphfuser.set_check_every(5)
    assert not checked(sf._program) and checked(sf._checking) == 2
    bound = list(sf._program.fn.__globals__.values())
    assert any(any(f is r for f in bound) for r in runners)
    before = STATS["checks"]
    for _ in range(10):
        sf(x, w)
    assert STATS["checks"] - before == 2 * 2                        # calls 5 and 10, both groups
    graphfuser.set_check_every(0)
    assert not checked(sf._program) and sf._checking is None


def test_fallback_disabled_raises(monkeypatch):
    wrong_kernel(monkeypatch, "aten::tanh")
    graphfuser.set_check_every(1)
    sf = graphfuser.script(two_groups)
    x, w = torch.randn(8, 8), torch.randn(8, 8)
    with config.override(disable=["fallback"]):
        with pytest.raises(FusionFailure, match="disagrees with its eager program"):
            for _ in range(4):
                sf(x, w)


def test_config_key_env_and_api():
    assert Config(env={}).check_every == 0
    assert Config(env={"GRAPHFUSER_CHECK_EVERY": "100"}).check_every == 100
    with pytest.raises(ConfigError, match="check_every"):
        Config(env={"GRAPHFUSER_CHECK_EVERY": "-1"})
    with pytest.raises(ConfigError, match="check_every"):
        Config(env={"GRAPHFUSER_CHECK_EVERY": "often"})
    assert graphfuser.set_check_every(7) == 0 and config.check_every == 7
    with pytest.raises(ConfigError):
        graphfuser.set_check_every(-2)
    assert config.check_every == 7


# -- a correct model is never quarantined ------------------------------------------------------
def pointwise_and_reductions(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    a = torch.exp(x) * y - x / (y + 1.0)
    s = F.softmax(a, dim=-1)
    n = F.layer_norm(x * y, (x.shape[-1],))
    return s, n, (a * a).sum(-1)


def _ill(dtype: torch.dtype) -> list[tuple[torch.Tensor, torch.Tensor]]:
    big = torch.finfo(dtype).max
    gen = torch.Generator().manual_seed(3)
    out = []
    for kind in ("nan", "inf", "huge", "tiny", "edge", "normal"):
        x = torch.randn(6, 33, generator=gen, dtype=torch.float64)
        y = torch.randn(6, 33, generator=gen, dtype=torch.float64)
        if kind == "nan":
            x[1, 3], y[2, :5] = float("nan"), float("nan")
        elif kind == "inf":
            x[0, 0], x[3, 7], y[4, 1] = float("inf"), float("-inf"), float("inf")
        elif kind == "huge":
            x *= 1e4 if dtype == torch.float16 else 1e30
        elif kind == "tiny":
            x *= 1e-30 if dtype != torch.float16 else 1e-6
        elif kind == "edge":
            edge = big / 2 if dtype != torch.float16 else 60000.0
            y[:, ::2], y[:, 1::2] = edge, -edge
        out.append((x.to(dtype), y.to(dtype)))
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_correct_model_is_not_quarantined_on_ill_conditioned_inputs(dtype, device):
    graphfuser.set_check_every(1)
    sf = graphfuser.script(pointwise_and_reductions)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for x, y in _ill(dtype) * 2:
            x, y = x.to(device), y.to(device)
            got = sf(x, y)
            want = pointwise_and_reductions(x, y)
            assert len(got) == len(want)
    assert not _quarantine_warnings(record), _quarantine_warnings(record)
    assert fusion_groups(sf._optimized) and not any(s.quarantined for s in sf._sites.values())
    assert STATS["checks"] > 0


class Trainable(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 6, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(6)
        self.fc = torch.nn.Linear(6, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.bn(self.conv(x)))
        return self.fc(h.mean((2, 3)))


def test_checked_training_matches_eager_and_updates_running_stats_once():
    """Checked calls of differentiable groups and of groups writing running statistics into
    their inputs: gradients, losses and the running statistics are eager's (no double update)."""
    graphfuser.set_check_every(1)
    torch.manual_seed(0)
    eager = Trainable()
    model = Trainable()
    model.load_state_dict(eager.state_dict())
    sm = graphfuser.script(model)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt_s = torch.optim.SGD(sm.parameters(), lr=0.1)
    checks = STATS["checks"]
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for step in range(5):
            x, y = torch.randn(4, 3, 8, 8), torch.randn(4, 4)
            for m, opt in ((eager, opt_e), (sm, opt_s)):
                opt.zero_grad()
                F.mse_loss(m(x), y).backward()
                opt.step()
    assert not _quarantine_warnings(record)
    assert STATS["checks"] > checks
    tol = {"rtol": 1e-4, "atol": 1e-5}
    torch.testing.assert_close(model.bn.running_mean, eager.bn.running_mean, **tol)
    torch.testing.assert_close(model.bn.running_var, eager.bn.running_var, **tol)
    assert int(model.bn.num_batches_tracked) == 5
    for a, b in zip(model.parameters(), eager.parameters()):
        torch.testing.assert_close(a, b, **tol)


def test_compare_policy():
    """The verdicts themselves: NaN positions, integers, fp16 overflow in eager, edge of overflow."""
    def f64(*vals):
        return lambda: tuple(vals)

    x = (torch.ones(4),)
    a = torch.tensor([1.0, 2.0, float("nan"), 4.0])
    assert compare((a,), (a.clone(),), x, f64(None)) is None
    b = a.clone()
    b[2] = 3.0                                                        # NaN lost on a finite call
    assert "differ" in compare((b,), (a,), x, f64(a.double()))
    assert compare((b,), (a,), (torch.tensor([float("nan")]),), f64(a.double())) is None   # ill-conditioned call
    assert "differ" in compare((a * 1.01,), (a,), x, f64(a.double()))                     # 1% off in fp32
    ints = torch.tensor([1, 2, 3])
    assert compare((ints,), (ints + 0,), x, f64(None)) is None
    assert "differ" in compare((ints + 1,), (ints,), x, f64(None))
    # fp16: eager overflowed in an intermediate, the fused fp32 intermediate did not; float64 agrees with fused
    h_eager = torch.tensor([float("inf"), 1.0], dtype=torch.float16)
    h_fused = torch.tensor([90.0, 1.0], dtype=torch.float16)
    assert compare((h_fused,), (h_eager,), x, f64(torch.tensor([90.0, 1.0], dtype=torch.float64))) is None
    # a sum at the edge of overflow: inf in one summation order, finite in another
    e = torch.tensor([3e38], dtype=torch.float32)
    assert compare((torch.tensor([float("inf")]),), (e,), x, f64(e.double())) is None
    assert "outputs" in compare((a, a), (a,), x, f64(None))


@pytest.mark.cuda
def test_cuda_graph_replay_stays_on_between_checks():
    # the steady calls replay their CUDA graph; every N-th runs the checking program instead
    graphfuser.set_check_every(4)
    sf = graphfuser.script(two_groups)
    x, w = torch.randn(64, 64, device="cuda"), torch.randn(64, 64, device="cuda")
    with torch.no_grad():
        for _ in range(6):
            sf(x, w)
        assert sf._replay is not None
        before = STATS["checks"]
        for _ in range(8):
            torch.testing.assert_close(sf(x, w), two_groups(x, w))
    assert STATS["checks"] - before == 2 * 2
