"""Lent buffers of replayed training calls (graphfuser/executor/cuda_graphs_train.py,
executor/lent.py): outputs and gradients handed out as the graphs' own memory while no caller
holds them, the host program where one does, copies after a signature is captured again, and a
recompute where a caller wrote a lent output in place before its backward. Every test runs with
every buffer lent and with copies handed out (the fixtures of test_cuda_graphs_train.py)."""
import pytest
import torch
import torch.nn as nn

from graphfuser.executor.cuda_graphs import STATS
from test_cuda_graphs_train import (FRONTENDS, TOL, _keep_every_capture, _lending, _mlp, _pair,  # noqa: F401
                                    _replays, _same, _sgd_step)

pytestmark = pytest.mark.cuda


@FRONTENDS
def test_kept_outputs_and_gradients_keep_their_values(frontend, _lending):
    """A loop that keeps every step's output and every step's ``.grad`` (lent: a replay must not
    write buffers the caller holds: those backwards differentiate the host program until the
    signature is captured again handing out copies), with one step that writes its output in
    place before the backward: everything kept equals eager's, and replay resumes."""
    m, twin, sf = _pair(_mlp, frontend)
    kept, ref = [], []
    before, held = _replays(), STATS.get("held_grads", 0)
    for k in range(24):
        x = torch.randn(16, 32, device="cuda")
        for model, fn, into in ((m, sf, kept), (twin, twin, ref)):
            for p in model.parameters():
                p.grad = None
            out = fn(x)
            if k == 5:
                out.mul_(0.5)                 # (the last Linear's backward does not read it)
            out.square().mean().backward()
            into.append((out.detach(), [p.grad for p in model.parameters()]))
        if k == 17:
            mid = _replays()
    for (o, gs), (ro, rgs) in zip(kept, ref):
        torch.testing.assert_close(o, ro, **TOL)
        for g, rg in zip(gs, rgs):
            torch.testing.assert_close(g, rg, **TOL)
    assert _replays() > mid > before
    if _lending == "lent":
        assert STATS.get("held_grads", 0) > held


@FRONTENDS
def test_outputs_are_lent_until_a_caller_keeps_one(frontend, _lending):
    """A replay hands out its outputs as its static buffers (no copy: the same memory each step
    where they are lent); a caller that keeps one through the next call makes that call run the
    host program, the kept values stay eager's, and after ``HELD_LIMIT`` such calls the signature
    is captured again handing out copies, and replays resume while the caller keeps them all."""
    m, twin, sf = _pair(_mlp, frontend)
    ptrs = []
    for _ in range(8):
        x = torch.randn(16, 32, device="cuda")
        out = sf(x)
        out.square().mean().backward()
        ptrs.append(out.data_ptr())
        del out
    if _lending == "lent":          # (copies may land at one address too: the allocator's cache)
        assert ptrs[-1] == ptrs[-2], ptrs
    kept, held, before = [], STATS.get("held_outputs", 0), _replays()
    for k in range(16):
        x = torch.randn(16, 32, device="cuda")
        out = sf(x)
        out.square().mean().backward()
        kept.append((out, twin(x).detach()))
        if k == 10:
            mid = _replays()
    for o, r in kept:
        torch.testing.assert_close(o, r, **TOL)
    assert _replays() > mid > before or _lending == "copied"
    assert (STATS.get("held_outputs", 0) > held) == (_lending == "lent")


@FRONTENDS
def test_an_output_written_in_place_before_its_backward(frontend, _lending):
    """The model's output is the tanh's, which its backward reads: a caller's in-place write to
    a lent output before the backward would change what the replayed backward graph reads, so
    that backward differentiates the host program (eager raises here: the saved output was
    modified). The gradients are those of ``2 * model(x)``."""
    def make():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32), nn.Tanh()).cuda().train()

    m, twin, sf = _pair(make, frontend)
    for _ in range(6):
        sf(torch.randn(16, 32, device="cuda")).square().mean().backward()
    for p in list(m.parameters()) + list(twin.parameters()):
        p.grad = None
    x = torch.randn(16, 32, device="cuda")
    out = sf(x)
    out.mul_(2)
    out.square().mean().backward()
    (twin(x) * 2).square().mean().backward()
    _same(m, twin)


@FRONTENDS
def test_gradients_are_lent_in_the_usual_loop(frontend, _lending, monkeypatch):
    """The usual loop (``zero_grad()`` sets ``.grad`` to None, the output is dropped after its
    loss): replayed steps hand out the backward graph's gradient buffers themselves (where they
    are lent), nothing finds them held, and every step matches eager's."""
    from graphfuser.executor.cuda_graphs import _LIVE
    from graphfuser.executor.cuda_graphs_train import TrainingReplayer

    # (every replay kept: a tiny net's replay can enqueue slower than its host program)
    monkeypatch.setattr(TrainingReplayer, "_judge", lambda self, key, entry, seconds: None)
    m, twin, sf = _pair(_mlp, frontend)
    opts = [torch.optim.SGD(a.parameters(), lr=0.05, momentum=0.9) for a in (m, twin)]
    before, held = _replays(), STATS.get("held_grads", 0)
    earlier = list(_LIVE)       # (other tests' replayers, lent or not, may live on; held: no id reuse)
    for k in range(10):
        _sgd_step(m, twin, sf, opts, torch.randn(16, 32, device="cuda"))
    assert _replays() > before and STATS.get("held_grads", 0) == held
    lent = [any(e.lent_grads.lend) for r in list(_LIVE) if r.training is not None and all(r is not e for e in earlier)
            for e in r.training.entries.values()]
    assert lent
    assert any(lent) if _lending == "lent" else not any(lent)


@FRONTENDS
def test_a_kept_loss_does_not_hold_the_outputs_it_came_from(frontend, _lending, monkeypatch):
    """Two replayed calls, the second (the loss) taking the first's lent output, in a loop that
    keeps its ``loss`` bound into the next step: the loss's node saved its arguments for its
    backward and freed them after it, so the next step finds the first call's output free and
    replays; every loss and gradient matches eager's."""
    import graphfuser
    from graphfuser.executor.cuda_graphs_train import TrainingReplayer

    from graphfuser.executor import lent

    monkeypatch.setattr(TrainingReplayer, "_judge", lambda self, key, entry, seconds: None)
    if _lending == "lent":
        # the model's [16, 4] output lent, the scalar loss (kept by the loop) copied
        monkeypatch.setattr(lent, "LEND_BYTES", 64)
    m, twin, sf = _pair(_mlp, frontend)

    def mse(out: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return (out.tanh() - t).square().mean()

    if frontend == "compile":
        from graphfuser.frontend.dynamo import graphfuser_backend

        sl = torch.compile(mse, backend=graphfuser_backend)
    else:
        sl = graphfuser.script(mse)
    opts = [torch.optim.SGD(a.parameters(), lr=0.05, momentum=0.9) for a in (m, twin)]
    loss = [None, None]         # each bound until the next step's loss replaces it
    for k in range(14):
        x, t = torch.randn(16, 32, device="cuda"), torch.randn(16, 4, device="cuda")
        if k == 8:
            held, before = STATS.get("held_outputs", 0), _replays()
        for j, (fn, lf, o) in enumerate(((sf, sl, opts[0]), (twin, mse, opts[1]))):
            o.zero_grad(set_to_none=True)
            loss[j] = lf(fn(x), t)
            loss[j].backward()
            o.step()
        torch.testing.assert_close(loss[0], loss[1], **TOL)
        _same(m, twin)
    assert _replays() > before
    assert STATS.get("held_outputs", 0) == held
