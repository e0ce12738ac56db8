"""The horizontal merges' search bound (``passes/horizontal.reach_bound``): random graphs of
pointwise ops, matrix products (which no group takes, so cycles through them are possible) and
siblings sharing inputs partition exactly as with the search run to the block's last grouped
node. And the barriers' edges (``_BlockPartition._edges``: a node that writes state is tied to the
barriers beside it only): random graphs with in-place ops partition as with edges from each
barrier to every node."""
import importlib

from hypothesis import example, given, settings, strategies as st

import graphfuser
from graphfuser.config import config
from graphfuser.ir import parse_graph, verify
from graphfuser.passes import partition
from random_blocks import F, op_line, partitioned

P = importlib.import_module("graphfuser.passes.partition")
H = importlib.import_module("graphfuser.passes.horizontal")


@st.composite
def graphs(draw):
    n_in = draw(st.integers(1, 3))
    values = [f"%x{i}" for i in range(n_in)]
    lines = []
    for k in range(draw(st.integers(2, 24))):
        kind = draw(st.sampled_from(["unary", "unary", "mul", "add", "mm"]))
        a = draw(st.sampled_from(values))
        b = draw(st.sampled_from(values))
        name = f"%v{k}"
        lines.append(op_line(draw, st, kind, name, a, b))
        values.append(name)
    outs = draw(st.lists(st.sampled_from(values[n_in:]), min_size=1, max_size=3, unique=True))
    params = ", ".join(f"%x{i} : {F}" for i in range(n_in))
    return (f"graph({params}):\n  %one : int = prim::Constant[value=1]()\n" + "\n".join(lines)
            + f"\n  return ({', '.join(outs)})\n")


STRADDLE = f"""
graph(%x : {F}, %w : {F}):
  %one : int = prim::Constant[value=1]()
  %a : {F} = aten::sin(%x)
  %g1 : {F} = aten::cos(%w)
  %k : {F} = aten::mm(%g1, %w)
  %c : {F} = aten::mul(%x, %k)
  %m : {F} = aten::mm(%a, %w)
  %g2 : {F} = aten::add(%g1, %m, %one)
  return (%c, %g2)
"""


@settings(max_examples=150, deadline=None)
@given(graphs(), st.booleans())
@example(STRADDLE, True)
def test_bounded_search_partitions_as_the_full_one(text, single):
    with config.override(horizontal_mode=True, single_node_mode=single):
        bounded = partitioned(text)
        original = H.reach_bound
        try:
            H.reach_bound = lambda part, nodes, limit: limit
            full = partitioned(text)
        finally:
            H.reach_bound = original
    assert bounded == full, text


def test_bound_moves_past_a_group_that_spans_it():
    """Siblings of %x: the search for a path between them may end at the last of them, but not
    inside a group that straddles that position (here the group of %a and %d, around %m)."""
    text = f"""
graph(%x : {F}, %w : {F}):
  %one : int = prim::Constant[value=1]()
  %a : {F} = aten::sin(%x)
  %m : {F} = aten::mm(%w, %w)
  %c : {F} = aten::cos(%x)
  %d : {F} = aten::add(%a, %m, %one)
  return (%c, %d)
"""
    with config.override(horizontal_mode=True, single_node_mode=True):
        g = verify(parse_graph(text))
        part = P._BlockPartition(g.block, P.AliasSets(g), frozenset())
        nodes = {n.outputs[0].name: n for n in g.block.nodes if n.outputs and n.kind != "prim::Constant"}
        part.group = {nodes["a"]: 0, nodes["d"]: 0, nodes["c"]: 1}
        part.members = {0: [nodes["a"], nodes["d"]], 1: [nodes["c"]]}
        assert H.reach_bound(part, [nodes["c"]], 99) == part.index[nodes["d"]]
        assert H.reach_bound(part, [nodes["c"]], 2) == 2


def test_siblings_joined_through_a_straddling_group_would_make_a_cycle():
    """%a and %c share %x; %a -> mm -> %g2, whose group also holds %g1 (before %c), and %g1 ->
    mm -> %c. A search that stopped at %c's position would miss that path and merge %a with %c
    into a cycle; the bound moves past the group of %g1 and %g2."""
    with config.override(horizontal_mode=True, single_node_mode=True):
        g = verify(parse_graph(STRADDLE))
        groups = partition(g)
        verify(g)
    members = sorted(sorted(n.outputs[0].name for n in grp.subgraph.nodes() if n.kind != "prim::Constant")
                     for grp in groups)
    assert members == [["a"], ["c"], ["g1", "g2"]], members


def _edges_to_every_node(self):
    """The reference: data edges as ``_edges`` makes them, and an edge between each barrier and
    every node before and after it."""
    original_mutates = P._mutates
    try:
        P._mutates = lambda n: False
        P._BlockPartition._chain_edges(self)
    finally:
        P._mutates = original_mutates
    for b in [n for n in self.nodes if P._mutates(n)]:
        i = self.index[b]
        for n in self.nodes:
            if self.index[n] < i:
                self.succ[n].add(b)
                self.pred[b].add(n)
            elif self.index[n] > i:
                self.succ[b].add(n)
                self.pred[n].add(b)


@st.composite
def graphs_with_writes(draw):
    """``graphs`` with in-place ops (barriers) between the others."""
    text = draw(graphs())
    lines = text.splitlines()
    body = [i for i, ln in enumerate(lines) if "= aten::" in ln]
    for k, i in enumerate(sorted(draw(st.sets(st.sampled_from(body), max_size=4)), reverse=True)):
        target = lines[i].split(":")[0].strip()
        lines.insert(i + 1, f"  %w{k} : {F} = aten::mul_({target}, %x0)")
    return "\n".join(lines) + "\n"


@settings(max_examples=150, deadline=None)
@given(graphs_with_writes(), st.booleans(), st.booleans())
def test_barrier_edges_to_neighbours_partition_as_edges_to_every_node(text, single, horizontal):
    """``_edges`` ties each barrier to its neighbouring barriers only; the partition is the one
    that edges from each barrier to every node give."""
    with config.override(horizontal_mode=horizontal, single_node_mode=single):
        chained = partitioned(text)
        original = P._BlockPartition._edges
        try:
            P._BlockPartition._chain_edges = original
            P._BlockPartition._edges = _edges_to_every_node
            full = partitioned(text)
        finally:
            P._BlockPartition._edges = original
            del P._BlockPartition._chain_edges
    assert chained == full, text
