"""Permuted activations made dense before their rows are normalized (passes/row_layout.py), run
on the CPU here (the plan itself is made for CUDA only): values and output strides are eager's,
the fused layer norms read dense rows, and the plan is made only where nothing can see a layout."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import graphfuser
from graphfuser.config import config
from graphfuser.ir.types import TensorType
from graphfuser.passes import row_layout

from helpers import backend_graph_with


@pytest.fixture(autouse=True)
def _cpu_plans(monkeypatch):
    monkeypatch.setattr(row_layout, "DEVICES", ("cuda", "cpu"))


class Encoder(nn.Module):
    """Whisper's encoder in small: conv1d, GELU, permute to [N, T, C], positions, pre-norm layers."""

    def __init__(self, c: int = 16, t: int = 12, layers: int = 2) -> None:
        super().__init__()
        self.conv = nn.Conv1d(4, c, 3, padding=1)
        self.pos = nn.Parameter(torch.randn(t, c))
        self.norms = nn.ModuleList(nn.LayerNorm(c) for _ in range(layers))
        self.fcs = nn.ModuleList(nn.Linear(c, c) for _ in range(layers))
        self.final = nn.LayerNorm(c)

    def stream(self, x):
        h = F.gelu(self.conv(x)).permute(0, 2, 1) + self.pos
        for norm, fc in zip(self.norms, self.fcs):
            h = h + F.gelu(fc(norm(h)))
        return h

    def forward(self, x):
        return self.final(self.stream(x))


class ReturnsStream(Encoder):
    """The residual stream itself is returned: its strided layout is eager's, kept."""

    def forward(self, x):
        h = self.stream(x)
        return self.final(h), h


class Viewed(Encoder):
    """A ``view`` of the stream's transpose works on eager's layout only."""

    def forward(self, x):
        h = self.stream(x)
        return self.final(h), h.transpose(1, 2).view(h.size(0), -1).sum(-1)


def _nodes(sf):
    """The optimized graph's nodes and those of its fusion groups."""
    for n in sf._optimized.all_nodes():
        yield n
        sub = getattr(n, "subgraph", None)
        if sub is not None:
            yield from sub.all_nodes()


def _planned(sf) -> int:
    """Permuted values the plan made dense (later passes move the permute: ``sink_views``)."""
    plan = getattr(sf, "_row_plan", None)
    return len(plan.views) if plan else 0


def _strided_norm_inputs(sf) -> int:
    """Fused layer norms whose input rows are strided."""
    count = 0
    for m in _nodes(sf):
        t = m.inputs[0].type if m.kind == "aten::layer_norm" and m.inputs else None
        if isinstance(t, TensorType) and t.strides is not None and t.strides[-1] != 1:
            count += 1
    return count


def _check(cls, x, calls=5, disable=(), grad=False):
    torch.manual_seed(0)
    m = cls()
    sf = graphfuser.script(m)
    with torch.set_grad_enabled(grad), config.override(disable=["fallback", *disable]):
        for _ in range(calls):
            got, want = sf(x), m(x)
            got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
            for g, w in zip(got, want):
                torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
                assert g.stride() == w.stride()
    return sf


def test_the_stream_is_dense_and_values_are_eagers():
    sf = _check(Encoder, torch.randn(3, 4, 12))
    assert _planned(sf) == 1, str(sf._optimized)
    assert _strided_norm_inputs(sf) == 0, str(sf._optimized)


def test_without_the_plan_the_norms_read_strided_rows():
    """(what the plan is for: the check above would pass on a graph that never saw strided rows)"""
    sf = _check(Encoder, torch.randn(3, 4, 12), disable=["row_layout"])
    assert _planned(sf) == 0
    assert _strided_norm_inputs(sf) > 0, str(sf._optimized)


def test_a_returned_stream_keeps_the_graph_as_it_is():
    sf = _check(ReturnsStream, torch.randn(3, 4, 12))
    assert _planned(sf) == 0


def test_a_view_of_the_stream_keeps_the_graph_as_it_is():
    sf = _check(Viewed, torch.randn(3, 4, 12))
    assert _planned(sf) == 0


def test_other_sizes_reuse_the_plan():
    torch.manual_seed(0)
    m = Encoder(t=12)
    sf = graphfuser.script(m)
    with torch.no_grad(), config.override(disable=["fallback"]):
        for n in (3, 3, 3, 5, 1, 0):
            x = torch.randn(n, 4, 12)
            torch.testing.assert_close(sf(x), m(x), rtol=1e-5, atol=1e-5)
    assert _planned(sf) == 1


def test_under_grad_gradients_are_eagers():
    torch.manual_seed(0)
    m, ref = Encoder(), Encoder()
    ref.load_state_dict(m.state_dict())
    sf = graphfuser.script(m)
    x = torch.randn(3, 4, 12)
    for _ in range(5):
        for mod, fn in ((m, sf), (ref, ref)):
            mod.zero_grad(set_to_none=True)
            with config.override(disable=["fallback"]):
                fn(x).square().sum().backward()
        for (name, p), q in zip(m.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4, msg=name)
    assert _planned(sf) == 1


def test_the_backends_graph_gets_the_plan_too():
    torch.manual_seed(0)
    sf = backend_graph_with(Encoder(), torch.randn(3, 4, 12), "aten::conv1d")
    assert sf is not None and _planned(sf) == 1


def _linear_permute_softmax(x, w, b):
    v = F.linear(x, w, b).permute(0, 3, 1, 2)
    return torch._softmax(v, 3, False), v


def test_through_torch_compile_a_returned_permuted_value_keeps_eagers_strides():
    """The torch.compile frontend returns a tuple typed ``Any``: the plan made the permuted value
    dense and, not seeing it among the returned tensors, handed out the dense copy ((6, 2, 2, 1)
    where eager's view has (6, 1, 6, 3)); now the plan gives it back its profiled layout.
    (Fuzz graph 55 of seed 36554, shrunk.)"""
    from graphfuser.frontend.dynamo import registered_backend

    torch._dynamo.reset()
    f = torch.compile(_linear_permute_softmax, backend=registered_backend())
    for n in (1, 1, 1, 1, 2):
        x = torch.randn(n, 1, 2, 1, dtype=torch.float64)
        w, b = torch.randn(3, 1, dtype=torch.float64), torch.randn(3, dtype=torch.float64)
        with config.override(disable=["fallback"]):
            got = f(x, w, b)
        want = _linear_permute_softmax(x, w, b)
        for g, e in zip(got, want):
            torch.testing.assert_close(g, e)
            assert g.stride() == e.stride(), (g.stride(), e.stride())
