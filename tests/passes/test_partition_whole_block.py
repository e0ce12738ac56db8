"""The whole-block check (``_BlockPartition.whole_block``): a small block whose fusible nodes are
one piece and fit one kernel becomes one group after one analysis, where the greedy merges ask
for one per node and producer group. Random blocks of pointwise ops, row and column sums,
broadcasts against them, matrix products (no group takes them: paths through them) and unrelated
pieces partition exactly as the greedy merges alone partition them, in either single-node mode."""
import importlib

from hypothesis import example, given, settings, strategies as st

from graphfuser.config import config
from helpers import FT
from random_blocks import F, op_line, partitioned

ROW, COL = FT(4, 1), FT(1, 4)
P = importlib.import_module("graphfuser.passes.partition")


@st.composite
def blocks(draw):
    n_in = draw(st.integers(1, 3))
    full = [f"%x{i}" for i in range(n_in)]     # [4, 4] values
    small: list[tuple[str, str]] = []           # ([4, 1] or [1, 4] value, its type)
    lines = []
    for k in range(draw(st.integers(2, 16))):
        kind = draw(st.sampled_from(["unary", "unary", "mul", "add", "mm", "rowsum", "colsum", "bcast"]))
        a, b = draw(st.sampled_from(full)), draw(st.sampled_from(full))
        name = f"%v{k}"
        if kind in ("unary", "add", "mul", "mm"):
            lines.append(op_line(draw, st, kind, name, a, b))
        elif kind in ("rowsum", "colsum"):
            dims, t = ("%d1", ROW) if kind == "rowsum" else ("%d0", COL)
            lines.append(f"  {name} : {t} = aten::sum({a}, {dims}, %true, %none)")
            small.append((name, t))
            continue
        else:
            if not small:
                continue
            s, _ = draw(st.sampled_from(small))
            lines.append(f"  {name} : {F} = aten::mul({a}, {s})")
        full.append(name)
    made = full[n_in:] + [s for s, _ in small]
    if not made:
        lines.append(f"  %v99 : {F} = aten::relu(%x0)")
        made = ["%v99"]
    outs = draw(st.lists(st.sampled_from(made), min_size=1, max_size=3, unique=True))
    params = ", ".join(f"%x{i} : {F}" for i in range(n_in))
    return (f"graph({params}):\n"
            "  %one : int = prim::Constant[value=1]()\n"
            "  %true : bool = prim::Constant[value=1]()\n"
            "  %none : NoneType = prim::Constant()\n"
            "  %d0 : int[] = prim::Constant[value=[0]]()\n"
            "  %d1 : int[] = prim::Constant[value=[1]]()\n"
            + "\n".join(lines) + f"\n  return ({', '.join(outs)})\n")


CHAIN = f"""
graph(%x : {F}):
  %one : int = prim::Constant[value=1]()
  %a : {F} = aten::sin(%x)
  %b : {F} = aten::mul(%a, %x)
  %c : {F} = aten::add(%b, %a, %one)
  return (%c)
"""
THROUGH_MM = f"""
graph(%x : {F}):
  %a : {F} = aten::sin(%x)
  %m : {F} = aten::mm(%a, %x)
  %c : {F} = aten::mul(%m, %a)
  return (%c)
"""


@settings(max_examples=200, deadline=None)
@given(blocks(), st.booleans())
@example(CHAIN, False)
@example(THROUGH_MM, False)
def test_whole_block_partitions_as_the_greedy_merges(text, single):
    calls = []
    original = P._BlockPartition.whole_block

    def counted(self):
        found = original(self)
        calls.append(found is not None)
        return found

    with config.override(single_node_mode=single):
        try:
            P._BlockPartition.whole_block = counted
            whole = partitioned(text)
        finally:
            P._BlockPartition.whole_block = original
        limit = P.WHOLE_BLOCK_NODES
        try:
            P.WHOLE_BLOCK_NODES = 0
            greedy = partitioned(text)
        finally:
            P.WHOLE_BLOCK_NODES = limit
    assert whole == greedy, text
    if text is CHAIN:
        assert calls == [True] and "prim::CpuFusionGroup_0" in whole and "prim::CpuFusionGroup_1" not in whole
    if text is THROUGH_MM:
        assert calls == [False]          # sin -> mm -> mul: one group would hold a cycle
