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
