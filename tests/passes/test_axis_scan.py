"""``ops.axes.AxisScan``: a scan extended one node at a time reaches the same axes as
``analyze`` of all the nodes at once, and the partition's kept scans give the groups a fresh
analysis of every merge would."""
import importlib

import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.ops.axes import AxisScan, analyze

partition = importlib.import_module("graphfuser.passes.partition")


def block(x, w, b, y):
    h = F.layer_norm(x * 2.0 + 1.0, [x.shape[-1]], w, b)
    s = torch.softmax(h * 0.5, -1)
    return (s * y).sum(-1, keepdim=True) + h.mean(-1, keepdim=True) - y.amax(-1, keepdim=True)


def _graph():
    sf = graphfuser.script(block)
    args = (torch.randn(6, 24), torch.randn(24), torch.randn(24), torch.randn(6, 24))
    for _ in range(3):
        sf(*args)
    return sf._specialized()._work


def test_an_extended_scan_equals_a_fresh_analysis():
    g = _graph()
    sub = max((n.subgraph for n in g.all_nodes() if n.kind.endswith("FusionGroup")), key=lambda s: len(s.block.nodes))
    nodes = [n for n in sub.block.nodes if n.kind.startswith("aten::")]
    assert len(nodes) > 6 and any(n.kind == "aten::layer_norm" for n in nodes)
    for k in range(1, len(nodes) + 1):
        fresh = analyze(nodes[:k])
        scan = AxisScan()
        reasons = [scan.add(n) for n in nodes[:k - 1]]
        if any(reasons):
            continue
        grown = scan.copy()                 # a finished scan, copied, then extended
        scan.finish()
        why = grown.add(nodes[k - 1])
        got = why if why is not None else grown.finish()
        if isinstance(fresh, str):
            assert isinstance(got, str) and got == fresh
            continue
        assert not isinstance(got, str), got
        assert got.of == fresh.of and got.reduced == fresh.reduced
        assert got.node_reduced == fresh.node_reduced and got.size_of == fresh.size_of


def test_kept_scans_leave_the_groups_unchanged(monkeypatch):
    def groups():
        g = _graph()
        return [[n.kind for n in grp.subgraph.block.nodes] for grp in g.all_nodes() if grp.kind.endswith("FusionGroup")]

    kept = groups()
    calls = []
    real = partition._BlockPartition._analyze

    def fresh(self, a, b, union):
        self._scans.clear()                 # nothing kept: every merge analyzed from scratch
        calls.append(1)
        return real(self, a, b, union)

    monkeypatch.setattr(partition._BlockPartition, "_analyze", fresh)
    assert groups() == kept and calls


# -- random blocks with reductions: kept scans partition as fresh analyses do ------------------
from hypothesis import given, settings, strategies as st  # noqa: E402

from graphfuser.ir import parse_graph, print_graph, verify  # noqa: E402
from helpers import FT  # noqa: E402

_M, _R, _C = FT(4, 6), FT(4, 1), FT(1, 6)       # a matrix, its row sums (keepdim), its column sums
_UNARY = ["aten::sin", "aten::exp", "aten::tanh", "aten::relu"]


@st.composite
def reduction_blocks(draw):
    values = {"%x0": _M, "%x1": _M, "%x2": _R}
    lines = []
    for k in range(draw(st.integers(2, 28))):
        name = f"%v{k}"
        kind = draw(st.sampled_from(["unary", "unary", "add", "add", "mul", "rowsum", "colsum", "softmax", "mm"]))
        a = draw(st.sampled_from(sorted(values)))
        b = draw(st.sampled_from(sorted(values)))
        ta, tb = values[a], values[b]
        if kind == "unary":
            t, line = ta, f"{draw(st.sampled_from(_UNARY))}({a})"
        elif kind in ("add", "mul"):
            t = ta if ta == tb else _M
            line = f"aten::add({a}, {b}, %one)" if kind == "add" else f"aten::mul({a}, {b})"
        elif kind in ("rowsum", "colsum") and ta == _M:
            t, line = (_R, f"aten::sum({a}, %last, %t, %none)") if kind == "rowsum" else \
                (_C, f"aten::sum({a}, %first, %t, %none)")
        elif kind == "softmax" and ta == _M:
            t, line = _M, f"aten::softmax({a}, %m1, %none)"
        elif kind == "mm" and ta == _M:
            t, line = _R, f"aten::mm({a}, %w)"
        else:
            continue
        values[name] = t
        lines.append(f"  {name} : {t} = {line}")
    made = [v for v in values if v.startswith("%v")]
    outs = draw(st.lists(st.sampled_from(made), min_size=1, max_size=3, unique=True)) if made else ["%x0"]
    return (f"graph(%x0 : {_M}, %x1 : {_M}, %x2 : {_R}, %w : {FT(6, 1)}):\n"
            "  %one : int = prim::Constant[value=1]()\n  %m1 : int = prim::Constant[value=-1]()\n"
            "  %z : int = prim::Constant[value=0]()\n  %t : bool = prim::Constant[value=1]()\n"
            "  %none : NoneType = prim::Constant()\n  %last : int[] = prim::ListConstruct(%m1)\n"
            "  %first : int[] = prim::ListConstruct(%z)\n" + "\n".join(lines)
            + f"\n  return ({', '.join(outs)})\n")


def _partitioned(text: str) -> str:
    g = verify(parse_graph(text))
    partition.partition(g)
    verify(g)
    return print_graph(g)


@settings(max_examples=200, deadline=None)
@given(reduction_blocks(), st.booleans())
def test_kept_scans_partition_random_reduction_blocks_as_fresh_analyses(text, horizontal):
    with graphfuser.config.override(horizontal_mode=horizontal, single_node_mode=True):
        kept = _partitioned(text)
        real = partition._BlockPartition._analyze

        def fresh(self, a, b, union):
            self._scans.clear()
            return real(self, a, b, union)

        partition._BlockPartition._analyze = fresh
        try:
            assert _partitioned(text) == kept, text
        finally:
            partition._BlockPartition._analyze = real


@settings(max_examples=100, deadline=None)
@given(reduction_blocks())
def test_each_union_answered_once_partitions_as_asking_every_time(text):
    """``misfit`` answers a union from its table: the horizontal merges ask about one pair of
    groups once per tensor they share."""
    with graphfuser.config.override(horizontal_mode=True, single_node_mode=True):
        kept = _partitioned(text)
        real = partition._BlockPartition.misfit
        partition._BlockPartition.misfit = lambda self, a, b: self._misfit(a, b, a | b)
        try:
            assert _partitioned(text) == kept, text
        finally:
            partition._BlockPartition.misfit = real
