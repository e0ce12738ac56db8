"""Partition with reductions and normalizations: graph text in -> groups out (no compiler)."""
import logging

from graphfuser.config import config
from graphfuser.ir import parse_graph, print_graph, verify
from graphfuser.ops import fusible
from graphfuser.ops.axes import analyze, input_axes
from graphfuser.passes import partition
from helpers import FT, assert_in_order

X = FT(4, 8)
ROW = FT(4, 1)
VEC = FT(4)
W = FT(8)


def run(text: str):
    g = verify(parse_graph(text))
    groups = partition(g)
    verify(g)
    return print_graph(g), groups


RMS = f"""
graph(%x : {X}, %w : {W}):
  %m1 : int = prim::Constant[value=-1]()
  %two : int = prim::Constant[value=2]()
  %t : bool = prim::Constant[value=1]()
  %none : NoneType = prim::Constant()
  %eps : float = prim::Constant[value=1e-06]()
  %one : int = prim::Constant[value=1]()
  %dims : int[] = prim::ListConstruct(%m1)
  %p : {X} = aten::pow(%x, %two)
  %ms : {ROW} = aten::mean(%p, %dims, %t, %none)
  %a : {ROW} = aten::add(%ms, %eps, %one)
  %r : {ROW} = aten::rsqrt(%a)
  %y : {X} = aten::mul(%x, %r)
  %z : {X} = aten::mul(%y, %w)
  return (%z)
"""


def test_rms_norm_chain_is_one_group_with_its_dim_list():
    out, groups = run(RMS)
    assert len(groups) == 1
    sub = str(groups[0].subgraph)
    assert_in_order(sub, "aten::pow", "prim::ListConstruct(%m1)", "aten::mean", "aten::rsqrt", "aten::mul", "aten::mul")
    axes = analyze(list(groups[0].subgraph.block.nodes))
    assert len(axes.reduced) == 1
    x_axes, w_axes = input_axes(groups[0].subgraph)
    assert w_axes == (x_axes[1],)        # the weight walks the reduced (last) axis


TWO_DOMAINS = f"""
graph(%x : {X}):
  %m1 : int = prim::Constant[value=-1]()
  %z : int = prim::Constant[value=0]()
  %f : bool = prim::Constant[value=0]()
  %none : NoneType = prim::Constant()
  %d1 : int[] = prim::ListConstruct(%m1)
  %d0 : int[] = prim::ListConstruct(%z)
  %e : {X} = aten::exp(%x)
  %s : {VEC} = aten::sum(%e, %d1, %f, %none)
  %n : {VEC} = aten::neg(%s)
  %s0 : Float(strides=[], requires_grad=0, device=cpu) = aten::sum(%n, %d0, %f, %none)
  %o : Float(strides=[], requires_grad=0, device=cpu) = aten::sigmoid(%s0)
  return (%o)
"""


def test_reductions_over_other_axes_start_a_new_group_and_say_why(caplog):
    caplog.set_level(logging.INFO, logger="graphfuser")
    with config.override(log_level=">partition"):
        out, groups = run(TWO_DOMAINS)
    assert len(groups) == 2
    assert [n.kind for n in groups[0].subgraph.block.nodes if n.kind.startswith("aten")] == \
        ["aten::exp", "aten::sum", "aten::neg"]
    assert "reductions over different axes cannot share one kernel" in caplog.text


TRANSPOSED = f"""
graph(%x : {FT(8, 8)}):
  %one : int = prim::Constant[value=1]()
  %f : bool = prim::Constant[value=0]()
  %none : NoneType = prim::Constant()
  %d : int[] = prim::ListConstruct(%one)
  %e : {FT(8, 8)} = aten::exp(%x)
  %s : {FT(8)} = aten::sum(%e, %d, %f, %none)
  %y : {FT(8, 8)} = aten::sub(%x, %s, %one)
  %z : {FT(8, 8)} = aten::relu(%y)
  return (%z)
"""


def test_broadcast_against_a_reduced_value_that_would_transpose_is_split():
    out, groups = run(TRANSPOSED)
    assert len(groups) == 2
    assert "walk one loop axis with two of its dims" in analyze(
        [n for n in parse_graph(TRANSPOSED).block.nodes])


SOFTMAX = f"""
graph(%x : {X}):
  %m1 : int = prim::Constant[value=-1]()
  %none : NoneType = prim::Constant()
  %y : {X} = aten::softmax(%x, %m1, %none)
  return (%y)
"""


def test_a_lone_normalization_is_fused_a_lone_sum_is_not():
    out, groups = run(SOFTMAX)
    assert len(groups) == 1
    lone_sum = f"""
graph(%x : {X}):
  %m1 : int = prim::Constant[value=-1]()
  %f : bool = prim::Constant[value=0]()
  %none : NoneType = prim::Constant()
  %d : int[] = prim::ListConstruct(%m1)
  %s : {VEC} = aten::sum(%x, %d, %f, %none)
  return (%s)
"""
    assert run(lone_sum)[1] == []


def test_fusible_reasons_for_reductions():
    g = parse_graph(f"""
graph(%x : {X}, %d : int, %xi : {FT(4, 8, dtype="Long")}):
  %f : bool = prim::Constant[value=0]()
  %none : NoneType = prim::Constant()
  %m1 : int = prim::Constant[value=-1]()
  %l : int[] = prim::ListConstruct(%d)
  %c : int[] = prim::ListConstruct(%m1, %m1)
  %a : {VEC} = aten::sum(%x, %l, %f, %none)
  %b : {VEC} = aten::sum(%x, %c, %f, %none)
  %e : {FT(4, dtype="Long")} = aten::mean(%xi, %c, %f, %none)
  return (%a, %b, %e)
""")
    a, b, e = [n for n in g.block.nodes if n.kind.startswith("aten")]
    assert "must be a constant" in fusible(a)
    assert "repeats a dim" in fusible(b)
    assert "needs dtype=" in fusible(e)
