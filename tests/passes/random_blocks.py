"""Lines of the random blocks the partition's property tests draw (``test_partition_reach_bound``,
``test_partition_whole_block``): pointwise ops and matrix products over [4, 4] values."""
from graphfuser.ir import parse_graph, print_graph, verify
from graphfuser.passes import partition
from helpers import FT

F = FT(4, 4)
UNARY = ["aten::sin", "aten::cos", "aten::exp", "aten::tanh", "aten::relu", "aten::sigmoid"]


def op_line(draw, st, kind: str, name: str, a: str, b: str) -> str:
    """``name = kind(a[, b])``: a unary op hypothesis draws, an add (``%one`` its alpha), a mul
    or an ``aten::mm`` (which no group takes)."""
    if kind == "unary":
        return f"  {name} : {F} = {draw(st.sampled_from(UNARY))}({a})"
    if kind == "add":
        return f"  {name} : {F} = aten::add({a}, {b}, %one)"
    if kind == "mul":
        return f"  {name} : {F} = aten::mul({a}, {b})"
    return f"  {name} : {F} = aten::mm({a}, {b})"


def partitioned(text: str) -> str:
    """The block of ``text`` partitioned, printed (the graph verified before and after)."""
    g = verify(parse_graph(text))
    partition(g)
    verify(g)
    return print_graph(g)
