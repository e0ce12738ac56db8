"""Bias gradients through the consumer's fused backward (passes/bias.py, route_bias_gradients):
a linear / addmm under grad keeps its bias in the GEMM (every forward value is eager's) and its
bias gradient is summed by the fused backward of the op its result goes on to, where eager's
addmm backward reads the gradient once more. Gradients against eager, fp32 and under bf16
autocast, through both frontends; the knob; the eager program of graphfuser::bias_grad."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import graphfuser
from graphfuser.config import config
from graphfuser.frontend.dynamo import registered_backend
from graphfuser.ops.pointwise import _eager_bias_grad
from helpers import cuda_ptx, fusion_groups


class Conv1D(nn.Module):
    """GPT-2's: ``addmm(bias, x.view(-1, nx), weight).view(...)``."""

    def __init__(self, nf: int, nx: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.1)
        self.bias = nn.Parameter(torch.randn(nf))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size_out = x.size()[:-1] + (self.weight.size(-1),)
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(size_out)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = Conv1D(48, 16)
        self.proj = nn.Linear(48, 16)
        self.ln = nn.LayerNorm(16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x + self.proj(F.gelu(self.fc(x), approximate="tanh")))


@pytest.fixture(autouse=True)
def on_cpu(monkeypatch):
    # the route is taken on CUDA (passes/bias.py ROUTE_DEVICES); here on the CPU too
    from graphfuser.passes import bias

    monkeypatch.setattr(bias, "ROUTE_DEVICES", ("cuda", "cpu"))


def _entry(front, m):
    if front == "script":
        return graphfuser.script(m)
    torch._dynamo.reset()
    return torch.compile(m, backend=registered_backend())


def _train_against_eager(m: nn.Module, front: str, dtype, relative: bool = False):
    """Five training steps of ``m`` through ``front`` beside eager's (batches 3 and 5), outputs
    and every gradient compared; returns the last forward's optimized graph. ``relative``: bf16
    gradients within 1% of their largest magnitude (a fused chain's float32 intermediates)."""
    ref = copy.deepcopy(m)
    f = _entry(front, m)
    tol = dict(rtol=2e-2, atol=2e-2) if dtype else dict(rtol=1e-5, atol=1e-5)
    g = None
    with config.override(disable=["fallback"]):
        for batch in (3, 3, 3, 3, 5):
            x = torch.randn(batch, 7, 16)
            before = graphfuser.last_executed_optimized_graph()
            with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
                out, want = f(x), ref(x)
            if graphfuser.last_executed_optimized_graph() is not before:
                # the forward's, where it ran optimized (through torch.compile, the new batch size
                # is a new graph, profiling: the last optimized graph is then a backward's)
                g = graphfuser.last_executed_optimized_graph()
            torch.testing.assert_close(out, want, **tol)
            out.float().pow(2).sum().backward()
            want.float().pow(2).sum().backward()
            for (name, p), q in zip(m.named_parameters(), ref.parameters()):
                assert p.grad.dtype == q.grad.dtype, name
                scale = dict(atol=1e-2 * q.grad.abs().max().item(), rtol=2e-2) if dtype and relative else tol
                torch.testing.assert_close(p.grad, q.grad, **scale, msg=name)
                p.grad = q.grad = None
    return g


@pytest.mark.parametrize("front", ["script", "compile"])
@pytest.mark.parametrize("dtype", [None, torch.bfloat16])
def test_bias_gradients_match_eager(front, dtype):
    torch.manual_seed(0)
    g = _train_against_eager(Block(), front, dtype)
    # both biases route through a fused group (fc's after GPT-2's view, proj's into the residual add)
    routed = [n for gr in fusion_groups(g) for n in gr.subgraph.all_nodes() if n.kind == "graphfuser::bias_grad"]
    assert len(routed) == 2 or (dtype is None and len(routed) == 1), str(g)   # (fp32: proj's add is split off)
    # the products' biases are detached: their gradients come from the groups' backward
    products = [n for n in g.all_nodes() if n.kind in ("aten::addmm", "aten::linear")]
    assert any(n.inputs[0 if n.kind == "aten::addmm" else 2].node.kind == "aten::detach" for n in products)


class GPT2MLP(nn.Module):
    """GPT-2's MLP: its tanh GELU written out reads the product three times; the projection
    goes through a training dropout (beside its random state's size read) into the residual add."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.fc, self.proj, self.drop = Conv1D(48, 16), Conv1D(16, 48), nn.Dropout(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        h = 0.5 * h * (1.0 + torch.tanh(0.7978845608028654 * (h + 0.044715 * torch.pow(h, 3.0))))
        return x + self.drop(self.proj(h))


def _routed(g) -> int:
    return sum(n.kind == "graphfuser::bias_grad" for gr in fusion_groups(g) for n in gr.subgraph.all_nodes())


@pytest.mark.parametrize("front", ["script", "compile"])
@pytest.mark.parametrize("dtype", [None, torch.bfloat16])
def test_a_product_read_by_several_fused_ops_routes_its_bias_gradient(front, dtype):
    torch.manual_seed(0)
    # bf16: the fused GELU keeps its intermediates in float32 (eager rounds each), a few bf16
    # steps on gradients of up to ~100 either way
    g = _train_against_eager(GPT2MLP(0.0), front, dtype, relative=True)
    assert _routed(g) >= 1, str(g)      # fc's, through the GELU's three reads


@pytest.mark.parametrize("front", ["script", "compile"])
def test_a_training_dropout_routes_its_bias_gradient(front):
    """Past a training dropout: the same gradients as with the route off (the same masks, one
    seed), the bias's gradient from the group's backward."""
    grads, graphs = [], []
    for disable in ([], ["bias_gradients"]):
        torch.manual_seed(0)
        m = GPT2MLP(0.3)
        f = _entry(front, m)
        with config.override(disable=["fallback"] + disable):
            for _ in range(4):
                torch.manual_seed(1)
                out = f(torch.randn(3, 7, 16))
                graphs.append(graphfuser.last_executed_optimized_graph())
                out.pow(2).sum().backward()
                step = [p.grad.clone() for p in m.parameters()]
                m.zero_grad(set_to_none=True)
        grads.append(step)
    assert _routed(graphs[3]) == 2 and _routed(graphs[-1]) == 0, str(graphs[3])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_knob_keeps_eager_bias_gradients():
    torch.manual_seed(1)
    m = Block()
    with config.override(disable=["bias_gradients"]):
        s = graphfuser.script(m)
        for _ in range(4):
            s(torch.randn(2, 3, 16)).sum().backward()
    assert "graphfuser::bias_grad" not in str(graphfuser.last_executed_optimized_graph())


def test_eager_program_sums_the_gradient_into_the_bias():
    x = torch.randn(4, 3, 5, dtype=torch.float64, requires_grad=True)
    b = torch.randn(5, dtype=torch.float64, requires_grad=True)
    # (not a function of b: gradcheck's numerical Jacobian is 0 there; b borrows the gradient the
    # product's own bias would have had)
    y = _eager_bias_grad(x, b)
    assert torch.equal(y, x)
    up = torch.randn_like(y)
    gx, gb = torch.autograd.grad(y, (x, b), up)
    assert torch.equal(gx, up)
    torch.testing.assert_close(gb, up.sum((0, 1)))


@pytest.mark.parametrize("make, shape", [(lambda: Block(), (3, 7, 16)), (lambda: ConvNeXtTail(), (3, 4, 5, 16))],
                         ids=["gpt2_like", "convnext_tail"])
def test_groups_forward_and_backward_compile_for_cuda(make, shape):
    # the CUDA rendering of the groups graphfuser::bias_grad joins, and of their backward (the
    # bias's column sum in the GELU's backward kernel), as NVRTC compiles them
    from graphfuser.autodiff.function import live_groups
    from graphfuser.executor.compiled_reduction import ReductionGroup
    from graphfuser.runtime import nvrtc

    ok, why = nvrtc.available()
    if not ok:
        pytest.skip(f"NVRTC unavailable: {why}")
    torch.manual_seed(2)
    m = make()
    s = graphfuser.script(m)
    for _ in range(5):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = s(torch.randn(*shape))
        y.float().sum().backward()
    # (the autocast specialization's forward, and every live group's backward)
    graphs = [s._optimized] + [v._optimized for v in (s._variants or {}).values()] + \
        [getattr(dg.backward, "_optimized", None) for dg in live_groups()]
    subs = [g.subgraph for opt in graphs if opt is not None for g in fusion_groups(opt)]
    routed = [sub for sub in subs if sub is not None and any(n.kind == "graphfuser::bias_grad"
                                                             for n in sub.all_nodes())]
    assert len(routed) >= 2         # a forward group and its backward
    for sub in routed:
        cg = ReductionGroup(sub, "cuda", torch.device("cuda", 0), "k")
        cuda_ptx(cg.source, cg.variants[0][0], 90)


class InplaceBeside(nn.Module):
    """A product written in place (``relu_``) and read again after (CPU fuzz graph 861 of seed
    34611): its bias gradient stays eager's, the write a write."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = self.fc(x)
        v.relu_()
        return F.relu6(v) * 2.0


@pytest.mark.parametrize("front", ["script", "compile"])
def test_a_product_written_in_place_beside_other_reads_is_not_routed(front):
    torch.manual_seed(0)
    g = _train_against_eager(InplaceBeside(), front, None)
    assert _routed(g) == 0


class ConvNeXtTail(nn.Module):
    """timm's ConvNeXt block tail: the MLP's second linear, permuted back to channels first,
    scaled per channel, added to the shortcut. Its bias gradient routes past the permute, the
    bias as [C, 1, 1]."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 6)
        self.gamma = nn.Parameter(torch.randn(6) * 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x.permute(0, 3, 1, 2)[:, :6]
        y = self.fc(x).permute(0, 3, 1, 2)
        return y.mul(self.gamma.reshape(1, -1, 1, 1)) + shortcut


@pytest.mark.parametrize("front", ["script", "compile"])
@pytest.mark.parametrize("dtype", [None, torch.bfloat16])
def test_a_permuted_product_routes_its_bias_gradient(front, dtype):
    torch.manual_seed(0)
    m = ConvNeXtTail()
    ref = copy.deepcopy(m)
    f = _entry(front, m)
    tol = dict(rtol=2e-2, atol=2e-2) if dtype else dict(rtol=1e-5, atol=1e-5)
    with config.override(disable=["fallback"]):
        for batch in (3, 3, 3, 3, 5):
            x = torch.randn(batch, 4, 5, 16)
            with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
                out, want = f(x), ref(x)
            g = graphfuser.last_executed_optimized_graph()
            torch.testing.assert_close(out, want, **tol)
            out.float().pow(2).sum().backward()
            want.float().pow(2).sum().backward()
            for (name, p), q in zip(m.named_parameters(), ref.parameters()):
                assert p.grad.dtype == q.grad.dtype and p.grad.shape == q.grad.shape, name
                torch.testing.assert_close(p.grad, q.grad, **tol, msg=name)
                p.grad = q.grad = None
    # (float32: the bias is split off past the permute instead, its add in the group)
    assert _routed(g) == (1 if dtype else 0), str(g)
    if dtype is None:
        assert any(n.kind == "aten::linear" and n.inputs[2].type.name == "NoneType" for n in g.all_nodes())


class TailThenMean(ConvNeXtTail):
    """ConvNeXt's last block into the head's global average pool: the routed bias's gradient
    is constant along the pooled dims, and counts each of them (it had counted once)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x.permute(0, 3, 1, 2)[:, :6]
        y = self.fc(x).permute(0, 3, 1, 2)
        return (y.mul(self.gamma.reshape(1, -1, 1, 1)) + shortcut).mean((2, 3))


@pytest.mark.parametrize("front", ["script", "compile"])
def test_a_routed_bias_before_a_mean_gets_its_whole_gradient(front):
    torch.manual_seed(0)
    m = TailThenMean()
    ref = copy.deepcopy(m)
    f = _entry(front, m)
    with config.override(disable=["fallback"]):
        for batch in (3, 3, 3, 3, 5):
            x = torch.randn(batch, 4, 5, 16)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out, want = f(x), ref(x)
            g = graphfuser.last_executed_optimized_graph()
            out.float().pow(2).sum().backward()
            want.float().pow(2).sum().backward()
            for (name, p), q in zip(m.named_parameters(), ref.parameters()):
                torch.testing.assert_close(p.grad, q.grad, rtol=2e-2, atol=2e-2 * q.grad.abs().max().item(), msg=name)
                p.grad = q.grad = None
    assert _routed(g) == 1, str(g)


def _written_view(x0, x2, x3):
    v0 = F.linear(x0, x2.to(x0.dtype), x3.to(x0.dtype))
    v1 = v0.view(-1)
    v1.mul_(2)
    return v1


@pytest.mark.parametrize("front", ["script", "compile"])
def test_a_product_written_through_a_returned_view_is_not_routed(front):
    """A product viewed (to the same shape), the view written in place and returned (CPU fuzz
    graph 486 of seed 34634): routed, the write went into ``bias_grad``'s result and the
    returned view missed it (12 where eager has 24)."""
    f = graphfuser.script(_written_view) if front == "script" else _entry(front, _written_view)
    torch.manual_seed(0)
    with config.override(disable=["fallback"]):
        for _ in range(5):
            args = [torch.randint(-3, 3, (16,)).half().requires_grad_(), torch.randn(3, 16, requires_grad=True),
                    torch.randn(3, requires_grad=True)]
            ref = [a.detach().clone().requires_grad_() for a in args]
            out, want = f(*args), _written_view(*ref)
            torch.testing.assert_close(out, want)
            for a, r, g, w in zip("x0 w b".split(), args, torch.autograd.grad(out.float().sum(), args),
                                  torch.autograd.grad(want.float().sum(), ref)):
                torch.testing.assert_close(g, w, rtol=1e-2, atol=1e-2, msg=a)
