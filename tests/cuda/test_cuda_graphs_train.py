"""CUDA graph replay of training calls (graphfuser/executor/cuda_graphs_train.py): every replayed
step equals eager's (outputs, gradients, parameters after SGD, running stats), with gradient
accumulation, two forwards before one backward, a second backward through a retained graph after
the next forward, double backward, autocast with weights that change, frozen parameters, and the
knob that turns it off. Every test runs twice: with the graphs' outputs and gradients lent to
the caller (executor/lent.py; these nets' buffers are below the size that is lent by default)
and with copies handed out."""
import copy

import pytest
import torch
import torch.nn as nn

import graphfuser
from graphfuser.config import config
from graphfuser.executor.cuda_graphs import STATS
from helpers import philox_dropouts

pytestmark = pytest.mark.cuda

TOL = dict(rtol=2e-3, atol=2e-3)


@pytest.fixture(autouse=True, params=["lent", "copied"])
def _lending(monkeypatch, request):
    from graphfuser.executor import lent

    monkeypatch.setattr(lent, "LEND_BYTES", 0 if request.param == "lent" else 1 << 62)
    return request.param


@pytest.fixture(autouse=True)
def _keep_every_capture(monkeypatch, request):
    """These tests check what replay computes: every capture is kept, whatever its timing (the
    check that keeps only a faster replay has its own test, and tiny nets on a GPU shared with
    other test workers can time either way); the timed replays still run."""
    if "timing" not in request.node.name:
        from graphfuser.executor import cuda_graphs_train

        timed = cuda_graphs_train._replay_seconds
        monkeypatch.setattr(cuda_graphs_train, "_replay_seconds", lambda entry, args: timed(entry, args) * 0.0)


def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.GELU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5)).cuda().train()


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.LayerNorm(64), nn.GELU(), nn.Linear(64, 32), nn.Tanh(),
                         nn.Linear(32, 4)).cuda().train()


def _pair(make, frontend="script"):
    """The model, its eager twin, and the model through ``graphfuser.script`` or the
    ``torch.compile`` backend (whose graphs take the parameters and buffers as arguments: they
    replay in place, never through static copies, so running stats update the module's own)."""
    m = make()
    twin = copy.deepcopy(m)
    if frontend == "compile":
        from graphfuser.frontend.dynamo import graphfuser_backend

        torch._dynamo.reset()
        return m, twin, torch.compile(m, backend=graphfuser_backend)
    return m, twin, graphfuser.script(m)


FRONTENDS = pytest.mark.parametrize("frontend", ["script", "compile"])


def _replays() -> int:
    return STATS.get("train_replays", 0)


def _step(model, fn, opt, x, accumulate=False):
    if not accumulate:
        opt.zero_grad(set_to_none=True)
    out = fn(x)
    loss = out.square().mean()
    loss.backward()
    return out.detach(), loss.detach()


def _sgd_step(m, twin, sf, opts, x):
    """One SGD step of the scripted model and of its eager twin on ``x``: outputs and state match."""
    out, _ = _step(m, sf, opts[0], x)
    ref, _ = _step(twin, twin, opts[1], x)
    torch.testing.assert_close(out, ref, **TOL)
    _same(m, twin)
    for o in opts:
        o.step()


def _same(a: nn.Module, b: nn.Module):
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(p, q, **TOL, msg=lambda m: f"{n}: {m}")
        if q.grad is not None:
            torch.testing.assert_close(p.grad, q.grad, **TOL, msg=lambda m: f"{n}.grad: {m}")
    for (n, p), q in zip(a.named_buffers(), b.buffers()):
        torch.testing.assert_close(p.float(), q.float(), **TOL, msg=lambda m: f"{n}: {m}")


@FRONTENDS
@pytest.mark.parametrize("make, shape", [(_net, (4, 3, 8, 8)), (_mlp, (16, 32))], ids=["conv_bn", "mlp"])
def test_sgd_steps_match_eager_and_replay(make, shape, frontend):
    m, twin, sf = _pair(make, frontend)
    opts = [torch.optim.SGD(a.parameters(), lr=0.05, momentum=0.9) for a in (m, twin)]
    before = _replays()
    for k in range(12):
        _sgd_step(m, twin, sf, opts, torch.randn(*shape, device="cuda"))
    _same(m, twin)
    assert _replays() > before, STATS



class _LossAndLogits(nn.Module):
    """A causal LM's shape of output: the loss and, beside it, the logits it came from."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(32, 64), nn.LayerNorm(64), nn.GELU())
        self.head = nn.Linear(64, 40)

    def forward(self, x, labels):
        logits = self.head(self.body(x))
        return nn.functional.cross_entropy(logits.float(), labels), logits


@FRONTENDS
def test_outputs_without_a_gradient_from_the_caller_stay_out_of_the_backward_graph(frontend):
    """Steps that differentiate the loss only: the backward graph is captured without the logits
    (no zero gradient of their size filled per replay); replays match eager. A later step that
    differentiates the logits too gets eager's gradients (the host program differentiated), and
    the signature stops replaying."""
    from graphfuser.executor.cuda_graphs_train import TrainingReplayer

    m, twin, sf = _pair(lambda: _LossAndLogits().cuda().train(), frontend)
    opts = [torch.optim.SGD(a.parameters(), lr=0.05, momentum=0.9) for a in (m, twin)]
    x, labels = torch.randn(16, 32, device="cuda"), torch.randint(0, 40, (16,), device="cuda")
    before = _replays()
    for k in range(8):
        for fn, o in ((sf, opts[0]), (twin, opts[1])):
            o.zero_grad(set_to_none=True)
            loss, logits = fn(x, labels)
            loss.backward()
        _same(m, twin)
        for o in opts:
            o.step()
    assert _replays() > before, STATS
    from graphfuser.executor.cuda_graphs import _LIVE
    wanted = [e.wanted for r in list(_LIVE) if isinstance(r, TrainingReplayer) for e in r.entries.values()]
    assert [True, False] in wanted, wanted
    failures = STATS["capture_failures"]
    for fn, o in ((sf, opts[0]), (twin, opts[1])):
        o.zero_grad(set_to_none=True)
        loss, logits = fn(x, labels)
        (loss + logits.square().mean()).backward()
    _same(m, twin)
    assert STATS["capture_failures"] == failures + 1, STATS
    replays = _replays()
    for fn in (sf, twin):
        loss, logits = fn(x, labels)
        (loss + logits.square().mean()).backward()
    _same(m, twin)
    assert _replays() == replays, STATS


class _Head(nn.Module):
    """A language model's head whose width (777) breaks cuBLAS's alignment: its result leaves the
    graph as a view of a padded buffer (passes/gemm_pad.py) and is differentiated outside."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(64, 64), nn.GELU())
        self.head = nn.Linear(64, 777)

    def forward(self, x):
        return self.head(self.body(x))


def test_a_padded_head_replays_from_its_padded_gradient(monkeypatch):
    """The backward graph starts from the padded GEMM's result: the logits' gradient is copied into
    the columns they own of a zeroed buffer of the padded width; steps match eager's."""
    from graphfuser.executor.cuda_graphs import _LIVE
    from graphfuser.executor.cuda_graphs_train import TrainingReplayer
    from graphfuser.passes import gemm_pad

    monkeypatch.setattr(gemm_pad, "MIN_ELEMENTS", 0)
    torch.manual_seed(0)
    m, twin, sf = _pair(lambda: _Head().cuda().train(), "compile")
    opts = [torch.optim.SGD(a.parameters(), lr=0.05, momentum=0.9) for a in (m, twin)]
    labels = torch.randint(0, 777, (32,), device="cuda")
    before = _replays()
    for k in range(8):
        x = torch.randn(32, 64, device="cuda")
        for fn, o in ((sf, opts[0]), (twin, opts[1])):
            o.zero_grad(set_to_none=True)
            logits = fn(x)
            nn.functional.cross_entropy(logits, labels).backward()
        _same(m, twin)
        for o in opts:
            o.step()
    assert _replays() > before, STATS
    padded = [s for r in list(_LIVE) if isinstance(r, TrainingReplayer) for e in r.entries.values()
              for s in e.grad_outs if s._base is not None and s._base.shape[-1] == 780]
    assert padded, "no backward graph started from the padded result"


class _Rotary(nn.Module):
    """Angles under ``torch.no_grad()`` inside a training forward (Hugging Face's rotary
    embeddings): Dynamo's graph switches grad mode off and on, which replay takes."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(32, 32)
        self.out = nn.Linear(32, 4)

    def forward(self, x):
        with torch.no_grad():
            pos = torch.arange(x.shape[-1], device=x.device, dtype=x.dtype)
            cos, sin = (pos * 0.1).cos(), (pos * 0.1).sin()
        h = self.lin(x)
        h = h * cos + torch.cat((-h[..., 16:], h[..., :16]), -1) * sin
        return self.out(torch.nn.functional.silu(h))


def test_grad_mode_region_steps_match_eager_and_replay():
    torch.manual_seed(0)
    m, twin, sf = _pair(lambda: _Rotary().cuda().train(), "compile")
    opts = [torch.optim.SGD(a.parameters(), lr=0.05, momentum=0.9) for a in (m, twin)]
    before = _replays()
    for k in range(12):
        _sgd_step(m, twin, sf, opts, torch.randn(16, 32, device="cuda"))
    _same(m, twin)
    assert _replays() > before, STATS


@FRONTENDS
def test_gradient_accumulation_and_input_grads(frontend):
    """No zero_grad between steps: replayed gradients accumulate into .grad (copies, not the
    static buffers the next replay overwrites); an input that requires grad gets its gradient."""
    m, twin, sf = _pair(_mlp, frontend)
    before = _replays()
    for k in range(10):
        x = torch.randn(16, 32, device="cuda", requires_grad=True)
        x2 = x.detach().clone().requires_grad_()
        sf(x).square().mean().backward()
        twin(x2).square().mean().backward()
        torch.testing.assert_close(x.grad, x2.grad, **TOL)
    _same(m, twin)
    assert _replays() > before


@FRONTENDS
def test_two_forwards_before_one_backward(frontend):
    """A siamese loss: the second call runs while the first replay's backward is pending."""
    m, twin, sf = _pair(_mlp, frontend)
    for k in range(10):
        a, b = torch.randn(16, 32, device="cuda"), torch.randn(16, 32, device="cuda")
        (sf(a) - sf(b)).square().mean().backward()
        (twin(a) - twin(b)).square().mean().backward()
    _same(m, twin)


@FRONTENDS
def test_two_forwards_under_autocast_before_one_backward(frontend):
    """The first call's backward runs after the second replay: it differentiates the host program
    again, under the autocast of the forward (the backward itself runs outside autocast)."""
    m, twin, sf = _pair(_mlp, frontend)
    before = _replays()
    for k in range(10):
        a, b = torch.randn(16, 32, device="cuda"), torch.randn(16, 32, device="cuda")
        for f in (sf, twin):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                ya, yb = f(a), f(b)
            (ya.float() - yb.float()).square().mean().backward()
        for p, q in zip(m.parameters(), twin.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=3e-2, atol=3e-2)
    assert _replays() > before, STATS


def test_retained_graph_backward_after_the_next_forward():
    """backward(retain_graph=True), the next call (a replay reusing the buffers), then a second
    backward through the first graph: it recomputes, and matches eager."""
    m, twin, sf = _pair(_mlp)
    for k in range(8):
        x, y = torch.randn(16, 32, device="cuda"), torch.randn(16, 32, device="cuda")
        for f in (sf, twin):
            out = f(x).square().mean()
            out.backward(retain_graph=True)
            f(y).sum().backward()
            out.backward()
    _same(m, twin)


def test_two_backwards_through_a_retained_graph():
    """backward(retain_graph=True) then backward again, no call between: the second backward
    cannot replay the backward graph (its first replay reused the memory of activations it had
    finished with): it recomputes, and the accumulated gradients match eager's."""
    m, twin, sf = _pair(_mlp)
    for k in range(6):
        x = torch.randn(16, 32, device="cuda")
        for f in (sf, twin):
            out = f(x).square().mean()
            out.backward(retain_graph=True)
            out.backward()
    _same(m, twin)


def _drop_mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Dropout(0.3), nn.Linear(64, 32), nn.LayerNorm(32),
                         nn.Dropout(0.2), nn.Linear(32, 4)).cuda().train()


def _drop_pair():
    """The scripted dropout MLP and an eager twin whose nn.Dropout draws graphfuser's masks."""
    m, twin, sf = _pair(_drop_mlp)
    philox_dropouts(twin)
    return m, twin, sf


def _steps_from_one_generator_state(m, twin, sf):
    """SGD steps of the scripted model and of its eager twin, each step of both started from the
    same generator state: outputs, parameters and gradients match, and the generator ends where
    the twin's does."""
    opts = [torch.optim.SGD(a.parameters(), lr=0.05) for a in (m, twin)]
    gen = torch.cuda.default_generators[torch.cuda.current_device()]
    before = _replays()
    for k in range(12):
        x = torch.randn(16, 32, device="cuda")
        state = gen.get_state()
        out, _ = _step(m, sf, opts[0], x)
        after = gen.get_offset()
        gen.set_state(state)
        ref, _ = _step(twin, twin, opts[1], x)
        assert gen.get_offset() == after
        torch.testing.assert_close(out, ref, **TOL)
        _same(m, twin)
        for o in opts:
            o.step()
    assert _replays() > before, STATS


def _retained_backward_after_the_next_forward(m, twin, sf):
    """backward(retain_graph=True), the next call, a second backward through the first graph:
    each round of both models started from the same generator state."""
    gen = torch.cuda.default_generators[torch.cuda.current_device()]
    for k in range(8):
        x, y = torch.randn(16, 32, device="cuda"), torch.randn(16, 32, device="cuda")
        state = gen.get_state()
        for f in (sf, twin):
            gen.set_state(state)
            out = f(x).square().mean()
            out.backward(retain_graph=True)
            f(y).sum().backward()
            out.backward()
    _same(m, twin)


def test_dropout_steps_replay_fresh_masks():
    """Fused dropouts are captured: each replay reserves its offsets from the generator as the
    host program would, so every step draws new masks, the masks of the eager twin started from
    the same generator state, and the generator ends where the twin's does."""
    m, twin, sf = _drop_pair()
    _steps_from_one_generator_state(m, twin, sf)
    x = torch.randn(16, 32, device="cuda")         # the same input twice: two masks
    a = sf(x)
    a.sum().backward()
    b = sf(x)
    assert not torch.equal(a, b)


def test_dropout_seed_reproduces_replayed_steps():
    """torch.manual_seed(s) gives the same replayed masks again."""
    m, twin, sf = _drop_pair()
    x = torch.randn(16, 32, device="cuda")
    for k in range(8):
        sf(x).sum().backward()
    before = _replays()
    runs = []
    for _ in range(2):
        torch.manual_seed(7)
        runs.append([sf(x).detach() for _ in range(3)])
        m.zero_grad()
    assert _replays() > before, STATS
    for a, b in zip(*runs):
        assert torch.equal(a, b)
    assert not torch.equal(runs[0][0], runs[0][1])


def test_dropout_retained_graph_backward_recomputes_the_same_masks():
    """A second backward through a replayed call whose buffers the next replay reused recomputes
    it with the masks that replay drew (not fresh ones)."""
    m, twin, sf = _drop_pair()
    _retained_backward_after_the_next_forward(m, twin, sf)


class _EagerRandomNet(nn.Module):
    """Random ops that run eager's kernels inside the captured graphs: stochastic depth as
    torchvision writes it (``bernoulli_`` of a fresh tensor) and an in-place dropout."""

    def __init__(self):
        super().__init__()
        self.lin1, self.lin2 = nn.Linear(32, 64), nn.Linear(64, 4)

    def forward(self, x):
        h = torch.tanh(self.lin1(x))
        noise = torch.empty([h.shape[0], 1], dtype=h.dtype, device=h.device).bernoulli_(0.7)
        h = h * noise.div_(0.7)
        return self.lin2(torch.nn.functional.dropout(h, 0.2, True, True))


def _eager_random_pair():
    torch.manual_seed(0)
    return _pair(lambda: _EagerRandomNet().cuda().train())


def test_eager_random_ops_replay_as_eager_draws_them():
    """Replayed steps draw what eager draws from the same generator state (the graph-safe
    generator advances past each replay's draws), so they match an eager twin step by step."""
    m, twin, sf = _eager_random_pair()
    _steps_from_one_generator_state(m, twin, sf)


def test_eager_random_ops_retained_graph_backward_recomputes_the_same_draws():
    m, twin, sf = _eager_random_pair()
    _retained_backward_after_the_next_forward(m, twin, sf)


def test_double_backward_gradient_penalty():
    """A gradient penalty (create_graph=True through the model) recomputes the replayed call."""
    m, twin, sf = _pair(_mlp)
    for k in range(8):
        x = torch.randn(16, 32, device="cuda")
        for f in (sf, twin):
            xi = x.clone().requires_grad_()
            (g,) = torch.autograd.grad(f(xi).sum(), xi, create_graph=True)
            (g.square().sum() + f(x).mean()).backward()
    _same(m, twin)


@FRONTENDS
def test_autocast_steps_with_changing_weights(frontend):
    m, twin, sf = _pair(_mlp, frontend)
    opts = [torch.optim.SGD(a.parameters(), lr=0.2) for a in (m, twin)]
    before = _replays()
    for k in range(12):
        x = torch.randn(16, 32, device="cuda")
        outs = []
        for a, f, o in ((m, sf, opts[0]), (twin, twin, opts[1])):
            o.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                y = f(x)
            y.float().square().mean().backward()
            o.step()
            outs.append(y.detach().float())
        torch.testing.assert_close(outs[0], outs[1], rtol=3e-2, atol=3e-2)
    for p, q in zip(m.parameters(), twin.parameters()):
        torch.testing.assert_close(p, q, rtol=3e-2, atol=3e-2)
    assert _replays() > before


@FRONTENDS
def test_frozen_parameters_and_eval_mode_changes(frontend):
    m, twin, sf = _pair(_net, frontend)
    opts = [torch.optim.SGD(a.parameters(), lr=0.05) for a in (m, twin)]
    for k in range(18):
        if k == 6:
            for a in (m, twin):
                a[0].weight.requires_grad_(False)
        if k == 12:
            for a in (m, twin):
                a[1].eval()
        _sgd_step(m, twin, sf, opts, torch.randn(4, 3, 8, 8, device="cuda"))


def test_knob_turns_training_replay_off():
    with config.override(disable=["cuda_graphs_training"]):
        m, twin, sf = _pair(_mlp)
        before = _replays()
        for k in range(8):
            x = torch.randn(16, 32, device="cuda")
            sf(x).square().mean().backward()
            twin(x).square().mean().backward()
        assert _replays() == before
    _same(m, twin)


def test_failed_capture_leaves_the_generator_usable(monkeypatch):
    """A capture that fails inside ``torch.cuda.graph`` is dropped: the signature runs its host
    program, gradients match eager, and random ops still work (the generator is not left marked
    as capturing). Here the backward's capture fails: without the parameter aliases it reaches
    the parameters' own gradient accumulators, made by earlier steps on the default stream (which
    torch 2.11 turns into a warning where every gradient is copied), and the backward's autocast
    context raises while a capture is under way."""
    import contextlib

    from graphfuser.executor import cuda_graphs_train
    from graphfuser.executor.cuda_graphs_train import TrainingReplayer

    plain = cuda_graphs_train._backward_autocast

    @contextlib.contextmanager
    def failing():
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError("the backward's capture fails here")
        with plain():
            yield

    monkeypatch.setattr(TrainingReplayer, "_alias_parameters", lambda self, params, swapped: params)
    monkeypatch.setattr(cuda_graphs_train, "_backward_autocast", failing)
    m, twin, sf = _pair(_mlp)
    fails = STATS["capture_failures"]
    for k in range(8):
        x = torch.randn(16, 32, device="cuda")
        loss = sf(x).square().mean()
        loss.backward()
        twin(x).square().mean().backward()
    assert STATS["capture_failures"] > fails, STATS
    assert torch.randn(4, device="cuda").isfinite().all()
    _same(m, twin)


def test_timing_check_drops_a_slower_replay(monkeypatch):
    """A replayed step slower than the host program's (timed at capture) is not kept."""
    from graphfuser.executor import cuda_graphs_train

    monkeypatch.setattr(cuda_graphs_train, "_replay_seconds", lambda entry, args: float("inf"))
    m, twin, sf = _pair(_mlp)
    before, fails = _replays(), STATS["capture_failures"]
    for k in range(8):
        x = torch.randn(16, 32, device="cuda")
        sf(x).square().mean().backward()
        twin(x).square().mean().backward()
    assert _replays() == before and STATS["capture_failures"] > fails
    assert "replayed step takes" in STATS["last_error"], STATS["last_error"]
    _same(m, twin)
