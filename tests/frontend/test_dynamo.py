"""The torch.compile backend: FX graphs -> graphfuser IR -> the same executor; every test
compares with eager."""
from __future__ import annotations

import copy
import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import graphfuser
from graphfuser.config import ConfigError, config
from graphfuser.executor.executor import ScriptedFunction
from graphfuser.frontend import fx as fx_frontend
from graphfuser.frontend.dynamo import graphfuser_backend, knobs_for, registered_backend
from graphfuser.runtime import cache


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


class Recorder:
    """A backend that hands each graph to graphfuser's and keeps what it returned."""

    def __init__(self, **kw) -> None:
        self.fns: list = []
        self.gms: list = []
        self.kw = kw

    def __call__(self, gm, example_inputs, **kw):
        self.gms.append(gm)
        fn = graphfuser_backend(gm, example_inputs, **{**self.kw, **kw})
        self.fns.append(getattr(fn, "__wrapped__", fn))
        return fn

    def kinds(self, i: int = -1) -> list[str]:
        return [n.kind for n in self.fns[i].graph.all_nodes()]


def run_steady(fn, *args, calls: int = 3):
    out = None
    for _ in range(calls):
        out = fn(*args)
    return out


def groups(g) -> int:
    return len(set(re.findall(r"prim::CpuFusionGroup_(\d+)", str(g)))) if g is not None else 0


# -- capture: the vocabulary --------------------------------------------------------------------
class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(16, 16)
        self.ln = nn.LayerNorm(16)
        self.drop = nn.Dropout(0.1)

    def forward(self, x, mask):
        b, t, c = x.shape
        h = self.ln(self.lin(x)).view(b, t, 4, 4).transpose(1, 2)
        h = h.masked_fill(mask, 0.0) * 2 + 1
        h = F.silu(h).float()
        y = self.drop(F.softmax(h, dim=-1))
        return y.reshape(b, t, c)


def test_fx_calls_become_the_aten_nodes_torchscript_makes():
    rec = Recorder()
    m = Block().eval()
    x, mask = torch.randn(2, 3, 16), torch.rand(2, 4, 3, 4) > 0.5
    c = torch.compile(m, backend=rec)
    with torch.no_grad():
        out = run_steady(c, x, mask)
        torch.testing.assert_close(out, m(x, mask))
    kinds = rec.kinds()
    for k in ("aten::linear", "aten::layer_norm", "aten::view", "aten::transpose", "aten::masked_fill",
              "aten::mul", "aten::add", "aten::silu", "aten::to", "aten::softmax", "aten::dropout", "aten::reshape"):
        assert k in kinds, k
    assert "prim::PythonOp" not in kinds
    # parameters are graph inputs, read from every call's arguments
    assert len(rec.fns[-1].graph.inputs) == 2 + 4
    assert groups(graphfuser.last_executed_optimized_graph()) >= 1


def test_parameters_are_read_every_call():
    m = nn.Sequential(nn.Linear(8, 8), nn.GELU())
    c = torch.compile(m, backend=graphfuser_backend)
    x = torch.randn(4, 8)
    with torch.no_grad():
        run_steady(c, x)
        m[0].weight.mul_(2.0)
        torch.testing.assert_close(c(x), m(x))


def test_backend_fuses_a_pointwise_chain_and_matches_eager():
    def f(x, y):
        return torch.tanh(x * 2.0 + y).relu() - 0.5 * y

    c = torch.compile(f, backend=graphfuser_backend)
    x, y = torch.randn(5, 7), torch.randn(5, 7)
    out = run_steady(c, x, y)
    torch.testing.assert_close(out, f(x, y))
    g = graphfuser.last_executed_optimized_graph()
    assert groups(g) == 1 and "prim::CpuFusionGuard" in str(g)


# -- options and modes --------------------------------------------------------------------------
def test_options_are_config_knobs():
    assert knobs_for(None, {"single_node_mode": True, "cpu.omp_threshold": 7}) == \
        {"single_node_mode": True, "cpu": {"omp_threshold": 7}}
    with pytest.raises(ConfigError, match="valid knobs are: .*single_node_mode"):
        knobs_for(None, {"no_such_knob": 1})
    with pytest.raises(ConfigError, match="valid options are"):
        knobs_for(None, {"disable": ["no_such_option"]})
    with pytest.raises(ConfigError, match="valid modes are: default, reduce-overhead"):
        knobs_for("fastest", None)


def test_modes_map_to_cuda_graph_replay():
    with config.override(disable=["cuda_graphs", "fma"]):
        assert knobs_for("reduce-overhead", None)["disable"] == ["fma"]
        assert "disable" not in knobs_for("default", None)
        assert "disable" not in knobs_for("max-autotune", None)
    assert set(knobs_for("max-autotune-no-cudagraphs", None)["disable"]) >= {"cuda_graphs", "cuda_graphs_training"}


def test_unknown_option_through_torch_compile_is_a_clear_error():
    c = torch.compile(lambda x: x + 1, backend=graphfuser_backend, options={"nope": 1})
    with pytest.raises(Exception, match="unknown knob 'nope'; valid knobs are"):
        c(torch.ones(2))


def test_options_apply_to_their_model_only():
    def f(x):
        return (x * 3.0).sigmoid() + 1.0

    before = config.as_dict()
    rec = Recorder()
    c = torch.compile(f, backend=rec, options={"enabled": False})
    x = torch.randn(4, 4)
    torch.testing.assert_close(run_steady(c, x), f(x))
    assert rec.fns[-1]._program is None            # fusion off for this model
    assert config.as_dict() == before
    c2 = torch.compile(f, backend=graphfuser_backend, mode="reduce-overhead")
    torch.testing.assert_close(run_steady(c2, x), f(x))
    assert groups(graphfuser.last_executed_optimized_graph()) == 1


# -- what has no aten spelling still runs --------------------------------------------------------
def test_python_calls_mutations_and_graph_breaks_run():
    def f(x, y):
        a = x * 2.0 + 1.0
        a[:, 0] = 5.0                       # setitem on an intermediate, between two fusible ops
        b = a.sigmoid() * y
        y.add_(1.0)                         # an input written in place
        torch._dynamo.graph_break()
        c = b[..., 1:] * b.size(1)
        return F.scaled_dot_product_attention(c[None], c[None], c[None]), a

    x, y = torch.randn(4, 6), torch.randn(4, 6)
    y_ref = y.clone()
    rec = Recorder()
    c = torch.compile(f, backend=rec)
    for _ in range(3):
        ya, yb = y.clone(), y_ref.clone()
        out = c(x, ya)
        ref = f(x, yb)
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(ya, yb)
    assert len(rec.fns) == 2
    assert "prim::PythonOp" in rec.kinds(0)
    assert "aten::scaled_dot_product_attention" in rec.kinds(1)


def test_python_calls_take_fx_containers_of_symbolic_sizes():
    def f(x):
        n = x.shape[0]
        y = F.pad(x, [0, n])                         # a Python call given a list holding a SymInt
        return y.reshape(torch.Size([n, -1])).sin() * 2.0

    rec = Recorder()
    c = torch.compile(f, backend=rec, dynamic=True)
    for n in (3, 4, 5):
        x = torch.randn(n, 4)
        torch.testing.assert_close(run_steady(c, x), f(x))
    assert len(rec.fns) == 1 and rec.fns[0]._torchscript is None      # no fallback to the graph module


INDEXING = {
    "slice": (lambda x: x[:, :2] * 2.0, ["aten::slice"]),
    "none_ellipsis": (lambda x: x[..., None, 1:].sin(), ["aten::unsqueeze", "aten::slice"]),
    "int": (lambda x: x[0, :, None] + 1.0, ["aten::select", "aten::unsqueeze"]),
    "negative": (lambda x: x[:, -3:-1, -1] + 1.0, ["aten::slice", "aten::select"]),
    "step": (lambda x: x[1:, ::2].cos(), ["aten::slice"]),
    "symbolic": (lambda x: x[:, x.shape[1] // 2:] - 1.0, ["aten::slice"]),
    "advanced": (lambda x: x[[0, 1]] * 2.0, ["prim::PythonOp"]),
}


@pytest.mark.parametrize("case", list(INDEXING))
def test_basic_indexing_becomes_views(case):
    f, expected = INDEXING[case]
    rec = Recorder()
    c = torch.compile(f, backend=rec, dynamic=True)
    for n in (4, 6):
        x = torch.randn(n, 6, 3)
        torch.testing.assert_close(run_steady(c, x), f(x))
    kinds = rec.kinds()
    assert all(k in kinds for k in expected)
    assert ("prim::PythonOp" in kinds) == (case in ("advanced", "symbolic"))   # (symbolic: the size's // 2)


def test_higher_order_ops_run():
    def g(x):
        return torch.sin(x) * 2.0

    def f(x):
        return torch.utils.checkpoint.checkpoint(g, x, use_reentrant=False).relu() + 1.0

    x = torch.randn(8, 8, requires_grad=True)
    c = torch.compile(f, backend=graphfuser_backend)
    for _ in range(3):
        out = c(x)
        (gx,) = torch.autograd.grad(out.sum(), x)
        ref = f(x)
        (rx,) = torch.autograd.grad(ref.sum(), x)
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(gx, rx)


def test_disabled_fallback_raises_with_a_repro(monkeypatch):
    def broken(self):
        raise RuntimeError("converter says no")

    monkeypatch.setattr(fx_frontend._Converter, "convert", broken)
    f = torch.compile(lambda x: x.cos() + 1.0, backend=graphfuser_backend)
    with pytest.warns(UserWarning, match="runs eagerly"):
        torch.testing.assert_close(f(torch.ones(3)), torch.ones(3).cos() + 1.0)
    torch._dynamo.reset()
    with config.override(disable=["fallback"]):
        g = torch.compile(lambda x: x.sin() + 1.0, backend=graphfuser_backend)
        with pytest.raises(Exception, match="(?s)converter says no.*repro.*def forward"):
            g(torch.ones(3))


# -- dynamic shapes -------------------------------------------------------------------------------
def _f(x, w):
    return F.gelu(x @ w) * 0.5 + x.sum(-1, keepdim=True)


def test_automatic_dynamic_reuses_kernels():
    rec = Recorder()
    c = torch.compile(_f, backend=rec)
    w = torch.randn(16, 16)
    for n in (3, 5):
        x = torch.randn(n, 16)
        torch.testing.assert_close(run_steady(c, x, w), _f(x, w))
    assert len(rec.fns) == 2                               # static, then symbolic
    assert rec.fns[1].graph.inputs[0].type.name == "int"   # the SymInt placeholder: a run-time int
    compiles = cache.STATS["compiles"]
    for n in (7, 11, 2):
        x = torch.randn(n, 16)
        torch.testing.assert_close(run_steady(c, x, w), _f(x, w))
    assert len(rec.fns) == 2 and cache.STATS["compiles"] == compiles


@pytest.mark.parametrize("how", ["dynamic", "mark_dynamic"])
def test_symbolic_sizes_from_the_start(how):
    rec = Recorder()
    c = torch.compile(_f, backend=rec, dynamic=True if how == "dynamic" else None)
    w = torch.randn(16, 16)
    for n in (3, 6, 9):
        x = torch.randn(n, 16)
        if how == "mark_dynamic":
            torch._dynamo.mark_dynamic(x, 0)
        torch.testing.assert_close(run_steady(c, x, w), _f(x, w))
    assert len(rec.fns) == 1
    assert any(v.type.name == "int" for v in rec.fns[0].graph.inputs)


# -- training -------------------------------------------------------------------------------------
class Net(nn.Module):
    def __init__(self, p: float = 0.0) -> None:
        super().__init__()
        self.fc1 = nn.Linear(12, 24)
        self.bn = nn.BatchNorm1d(24)
        self.fc2 = nn.Linear(24, 6)
        self.p = p

    def forward(self, x):
        h = F.dropout(F.gelu(self.bn(self.fc1(x))), self.p, self.training)
        return self.fc2(h * torch.sigmoid(h))


def test_training_with_batch_norm_and_optimizer_steps_matches_eager():
    torch.manual_seed(0)
    m = Net()
    ref = copy.deepcopy(m)
    rec = Recorder()
    c = torch.compile(m, backend=rec)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(4):
        x = torch.randn(8, 12)
        for model, o in ((c, opt), (ref, opt_ref)):
            o.zero_grad()
            model(x).pow(2).mean().backward()
            o.step()
        for p, q in zip(m.parameters(), ref.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(m.bn.running_mean, ref.bn.running_mean)
        torch.testing.assert_close(m.bn.running_var, ref.bn.running_var)
    assert "aten::batch_norm" in rec.kinds() and "prim::PythonOp" not in rec.kinds()
    assert groups(graphfuser.last_executed_optimized_graph()) >= 1


def test_dropout_is_reproducible_under_manual_seed():
    m = Net(p=0.5)
    c = torch.compile(m, backend=graphfuser_backend)
    x = torch.randn(8, 12)

    def step(seed):
        torch.manual_seed(seed)
        out = c(x)
        grads = torch.autograd.grad(out.sum(), list(m.parameters()))
        return out, grads

    for _ in range(3):
        step(0)
    a, ga = step(1)
    b, gb = step(1)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    for u, v in zip(ga, gb):      # the same masks (a different one moves grads by far more)
        torch.testing.assert_close(u, v, rtol=1e-5, atol=1e-6)
    d, _ = step(2)
    assert not torch.equal(a, d)


def test_autocast_and_grad_mode_switches_inside_the_graph():
    w = torch.randn(16, 16, requires_grad=True)

    def f(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = (x @ w).relu()
        with torch.no_grad():
            s = (y.float() * 2.0).sum()
        return y.float() * 3.0 + 1.0, s

    rec = Recorder()
    c = torch.compile(f, backend=rec)
    x = torch.randn(4, 16)
    for _ in range(3):
        out, s = c(x)
        ref, rs = f(x)
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(s, rs)
        assert not s.requires_grad and out.requires_grad
        (g,) = torch.autograd.grad(out.sum(), w)
        (rg,) = torch.autograd.grad(ref.sum(), w)
        torch.testing.assert_close(g, rg)
    calls = [str(n.attrs["call"]) for n in rec.fns[0].graph.all_nodes() if n.kind == "prim::PythonOp"]
    assert any("_enter_autocast" in c for c in calls) and any("_set_grad_enabled" in c for c in calls)


def test_the_executor_does_not_know_the_frontend():
    rec = Recorder()
    c = torch.compile(lambda x: x.exp() - 1.0, backend=rec)
    run_steady(c, torch.randn(3))
    assert type(rec.fns[0]) is ScriptedFunction
    assert rec.fns[0]._captured.module is None and rec.fns[0]._captured.scripted is rec.gms[0]


# -- what CUDA graph replay may take --------------------------------------------------------------
def test_replay_takes_pure_python_calls_and_reads_parameters_in_place():
    from graphfuser.executor.cuda_graphs import ineligible_reason

    def pure(x, w):
        return (x[:, :2] @ w).relu()

    def effects(x, w):
        y = x @ w
        y[:, 0] = 1.0
        return y.relu()

    reasons = []
    for f, w in ((pure, torch.randn(2, 2)), (effects, torch.randn(3, 2))):
        torch._dynamo.reset()
        rec = Recorder()
        c = torch.compile(f, backend=rec)
        x = torch.randn(4, 3)
        torch.testing.assert_close(run_steady(c, x, w), f(x, w))
        reasons.append(ineligible_reason(rec.fns[0].graph, False))
    assert reasons[0] is None and "Python call" in reasons[1]
    lin = nn.Linear(3, 3)
    torch._dynamo.reset()
    rec = Recorder()
    c = torch.compile(lin, backend=rec)
    run_steady(c, torch.randn(2, 3))
    cap = rec.fns[0]._captured
    assert [cap.arg_names[i] for i in cap.static_inputs] == [n for n in cap.arg_names if "parameters" in n]
    assert len(cap.static_inputs) == 2



class _NoGradRegion(nn.Module):
    """Hugging Face's rotary embedding: angles computed under ``torch.no_grad()`` in a forward
    that trains (Dynamo hands the region over as ``_set_grad_enabled`` calls)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        with torch.no_grad():
            angles = torch.arange(x.shape[-1], dtype=x.dtype) * 0.5
        return (self.lin(x) * angles.cos()).sum()


def test_replay_takes_a_grad_mode_region_the_graph_closes():
    from graphfuser.executor.cuda_graphs import ineligible_reason

    m = _NoGradRegion()
    torch._dynamo.reset()
    rec = Recorder()
    c = torch.compile(m, backend=rec)
    x = torch.randn(3, 4)
    for _ in range(3):
        c(x).backward()
    f = rec.fns[0]
    assert "_set_grad_enabled" in str(f.graph)
    assert ineligible_reason(f.graph, False, f._captured.static_inputs) is None
    # a switch left unmatched (a graph that ends in no_grad) stays ineligible
    last = [n for n in f.graph.all_nodes() if "_set_grad_enabled" in str(n.attrs.get("call", ""))][-1]
    last.owner.remove(last)         # (the host program is built: the graph is not run again)
    assert "grad-mode" in ineligible_reason(f.graph, False, f._captured.static_inputs)


def test_replay_takes_batch_norm_training_that_writes_its_buffers_in_place():
    """A Dynamo graph of batch norm in training writes the module's buffers, which it takes as
    static arguments (running stats, ``num_batches_tracked += 1``): replay writes them in place,
    as a TorchScript graph's attributes, so the graph is eligible given its static inputs, and
    not without them (where a static copy would take the writes)."""
    from graphfuser.executor.cuda_graphs import ineligible_reason

    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()).train()
    torch._dynamo.reset()
    rec = Recorder()
    c = torch.compile(m, backend=rec)
    x = torch.randn(2, 3, 6, 6)
    for _ in range(3):
        c(x).sum().backward()
    f = rec.fns[0]
    g = f.graph
    static = f._captured.static_inputs
    assert any("num_batches_tracked" in f._captured.arg_names[i] for i in static)
    assert ineligible_reason(g, False, static) is None
    assert "in-place" in ineligible_reason(g, False) or "running-stats" in ineligible_reason(g, False)


# -- F.cross_entropy as the ops eager runs -------------------------------------------------------
def _lm_loss(logits, target, reduction="mean", weight=None, smoothing=0.0):
    # a language model's loss: the bf16 logits made float32, then cross entropy over the vocabulary
    return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), target.view(-1), weight=weight,
                           ignore_index=-100, reduction=reduction, label_smoothing=smoothing)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy_fuses_its_log_softmax_and_matches_eager(reduction, weighted):
    from graphfuser.config import config

    g = torch.Generator().manual_seed(3)
    weight = torch.rand(11, generator=g) + 0.5 if weighted else None
    torch._dynamo.reset()
    c = torch.compile(_lm_loss, backend=registered_backend())
    with config.override(disable=["fallback"]):
        for step in range(5):
            logits = (torch.randn(2, 7, 11, generator=g) * 4).bfloat16().requires_grad_()
            target = torch.randint(0, 11, (2, 7), generator=g)
            target[0, ::3] = -100                       # ignored positions
            if step == 4:
                target[:] = -100                        # every position ignored: eager's 0 / 0
            got = c(logits, target, reduction, weight)
            graph = graphfuser.last_executed_optimized_graph()     # the forward's (before backward)
            ref_logits = logits.detach().clone().requires_grad_()
            ref = _lm_loss(ref_logits, target, reduction, weight)
            torch.testing.assert_close(got, ref, equal_nan=True)
            gl = torch.randn_like(ref, dtype=torch.float32) if reduction == "none" else torch.ones_like(ref)
            torch.testing.assert_close(torch.autograd.grad(got, logits, gl)[0],
                                       torch.autograd.grad(ref, ref_logits, gl)[0], equal_nan=True)
    assert "functional.cross_entropy" not in str(graph)
    groups = [n for n in graph.all_nodes() if n.kind.endswith("FusionGroup")]
    kinds = [{m.kind for m in gr.subgraph.all_nodes()} for gr in groups]
    if weighted:
        # eager's nll_loss_nd of a log-softmax fused with the float32 copy of the logits
        assert "aten::nll_loss_nd" in str(graph)
        assert any({"aten::to", "aten::log_softmax"} <= k for k in kinds), str(graph)
    else:
        # per-row ops: the float32 copy, the shift, the sum of exponentials and the target's
        # column in one group; no log-softmax tensor and no nll_loss
        assert "aten::nll_loss_nd" not in str(graph) and "aten::log_softmax" not in str(graph)
        assert any({"aten::to", "aten::amax", "aten::exp", "aten::where"} <= k for k in kinds), str(graph)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_cross_entropy_rows_on_ill_conditioned_logits(dtype):
    # huge means with a small spread, a row of -inf but its target, NaN and +inf logits, a
    # masked vocabulary (-inf columns), one row ignored, odd sizes: loss and gradient as eager's
    torch._dynamo.reset()
    c = torch.compile(_lm_loss, backend=registered_backend())
    g = torch.Generator().manual_seed(5)
    base = torch.randn(3, 5, 13, generator=g, dtype=torch.float64)
    base[0, 0] += 1e6
    base[0, 1] = 7.0                                   # a constant row
    base[1, 2, :] = -float("inf")
    base[1, 2, 4] = 0.5
    base[1, 3, 6] = float("nan")
    base[2, 0, 9] = float("inf")
    base[2, 1:, 11:] = -float("inf")
    target = torch.randint(0, 11, (3, 5), generator=g)
    target[1, 2] = 4
    target[2, 4] = -100
    with config.override(disable=["fallback"]):
        for reduction in ("none", "sum", "mean"):
            for _ in range(4):
                logits = base.to(dtype).requires_grad_()
                ref_logits = base.to(dtype).requires_grad_()
                got, ref = c(logits, target, reduction), _lm_loss(ref_logits, target, reduction)
                torch.testing.assert_close(got, ref, equal_nan=True)
                gl = torch.ones_like(ref)
                torch.testing.assert_close(torch.autograd.grad(got, logits, gl)[0],
                                           torch.autograd.grad(ref, ref_logits, gl)[0], equal_nan=True)


def test_cross_entropy_forms_it_does_not_take_stay_python_calls():
    torch._dynamo.reset()
    rec = Recorder()
    g = torch.Generator().manual_seed(4)
    logits = torch.randn(3, 5, 6, generator=g)
    target = torch.randint(0, 6, (3, 5), generator=g)
    smoothed = torch.compile(lambda x, t: _lm_loss(x, t, smoothing=0.1), backend=rec)
    torch.testing.assert_close(run_steady(smoothed, logits, target), _lm_loss(logits, target, smoothing=0.1))
    assert "functional.cross_entropy" in str(rec.fns[0].graph)
    torch._dynamo.reset()
    probs = torch.softmax(torch.randn(4, 6, generator=g), -1)
    soft = torch.compile(lambda x, p: F.cross_entropy(x, p), backend=registered_backend())
    torch.testing.assert_close(run_steady(soft, logits[0, :4], probs), F.cross_entropy(logits[0, :4], probs))


def test_cross_entropy_over_a_long_row_saves_its_statistics_for_the_backward():
    # a vocabulary's rows (longer than saved.LONG_ROW): the forward saves the max and the sum of
    # exponentials, and the backward group is pointwise (no reduction over the row again)
    from graphfuser.autodiff.saved import LONG_ROW

    torch._dynamo.reset()
    width = LONG_ROW + 11
    c = torch.compile(_lm_loss, backend=registered_backend())
    g = torch.Generator().manual_seed(6)
    with config.override(disable=["fallback"]):
        for _ in range(4):
            logits = (torch.randn(2, 3, width, generator=g) * 3).bfloat16().requires_grad_()
            target = torch.randint(0, width, (2, 3), generator=g)
            target[0, 1] = -100
            got = c(logits, target)
            graph = str(graphfuser.last_executed_optimized_graph())
            ref_logits = logits.detach().clone().requires_grad_()
            ref = _lm_loss(ref_logits, target)
            torch.testing.assert_close(got, ref)
            torch.testing.assert_close(torch.autograd.grad(got, logits)[0], torch.autograd.grad(ref, ref_logits)[0])
    lines = graph[graph.index("backward:"):].splitlines()[1:]
    # (the backward section is indented under its group; the next unindented line ends it)
    backward = "\n".join(lines[:next((i for i, line in enumerate(lines) if not line.startswith(" ")), len(lines))])
    assert "%saved_0" in backward and "%saved_1" in backward
    assert "aten::amax" not in backward and "aten::exp" in backward, backward


def test_cross_entropy_target_out_of_range_raises_as_eager_does():
    torch._dynamo.reset()
    c = torch.compile(_lm_loss, backend=registered_backend())
    logits, target = torch.randn(2, 3, 5), torch.randint(0, 5, (2, 3))
    for _ in range(4):
        torch.testing.assert_close(c(logits, target), _lm_loss(logits, target))
    for wrong in (5, -1, -101):
        bad = target.clone()
        bad[1, 2] = wrong
        with pytest.raises(IndexError, match="out of bounds"):
            _lm_loss(logits, bad)
        with pytest.raises(RuntimeError, match=re.escape("outside [0, n_classes) and is not ignore_index")):
            c(logits, bad)
