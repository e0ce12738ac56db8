"""verify() catches broken graphs and names the broken invariant."""
import pytest

from graphfuser.ir import Graph, VerifyError, parse_graph, verify
from graphfuser.ir.types import BOOL, INT, TENSOR
from helpers import FT

F = FT(4, 8)

GOOD = f"""
graph(%x : {F}, %c : bool, %n : int):
  %t : bool = prim::Constant[value=1]()
  %a : {F} = aten::relu(%x)
  %b : {F} = aten::sigmoid(%a)
  %y : {F} = prim::If(%c)
    block0():
      %p : {F} = aten::neg(%b)
      -> (%p)
    block1():
      -> (%b)
  %z : {F} = prim::Loop(%n, %t, %y)
    block0(%i : int, %acc : {F}):
      %q : {F} = aten::exp(%acc)
      -> (%t, %q)
  return (%z)
"""


def good():
    return parse_graph(GOOD)


def node(g, kind):
    return next(n for n in g.all_nodes() if n.kind == kind)


def test_good_graph_verifies():
    g = good()
    assert verify(g) is g


def test_use_before_def():
    g = good()
    relu, sigmoid = g.block.nodes[1], g.block.nodes[2]
    g.block.nodes[1], g.block.nodes[2] = sigmoid, relu
    with pytest.raises(VerifyError, match=r"input %a is used before it is defined.*aten::sigmoid"):
        verify(g)


def test_value_of_inner_block_used_outside():
    g = good()
    p = node(g, "aten::neg").output
    loop = node(g, "prim::Loop")
    loop.replace_input(2, p)
    with pytest.raises(VerifyError, match=r"%p is used before it is defined or outside its scope"):
        verify(g)


def test_if_with_one_block():
    g = good()
    ifn = node(g, "prim::If")
    ifn.blocks.pop()
    with pytest.raises(VerifyError, match="prim::If needs exactly two blocks"):
        verify(g)


def test_if_block_return_arity():
    g = good()
    ifn = node(g, "prim::If")
    ifn.blocks[1].returns.append(g.inputs[0])
    with pytest.raises(VerifyError, match="prim::If block returns do not match its outputs"):
        verify(g)


def test_if_arity_from_text():
    text = f"""
graph(%x : {F}, %c : bool):
  %y : {F}, %w : {F} = prim::If(%c)
    block0():
      -> (%x)
    block1():
      -> (%x)
  return (%y)
"""
    with pytest.raises(VerifyError, match="prim::If block returns"):
        verify(parse_graph(text))


def test_loop_signature():
    g = good()
    loop = node(g, "prim::Loop")
    loop.blocks[0].returns.pop()
    with pytest.raises(VerifyError, match="prim::Loop block signature"):
        verify(g)


def test_loop_output_count():
    text = f"""
graph(%x : {F}, %n : int):
  %t : bool = prim::Constant[value=1]()
  %z : {F}, %extra : {F} = prim::Loop(%n, %t, %x)
    block0(%i : int, %acc : {F}):
      -> (%t, %acc)
  return (%z)
"""
    with pytest.raises(VerifyError, match="prim::Loop outputs"):
        verify(parse_graph(text))


def test_returned_value_out_of_scope():
    g = good()
    g.block.returns = [node(g, "aten::exp").output]
    with pytest.raises(VerifyError, match="returned value %q is not defined in scope"):
        verify(g)


def test_value_defined_twice():
    g = Graph()
    x = g.add_input("x", TENSOR)
    a = g.create("aten::relu", [x], [TENSOR], out_names=["a"])
    b = g.create("aten::neg", [x], [TENSOR], out_names=["b"])
    b.outputs[0].name = "a"
    g.block.append(a)
    g.block.append(b)
    g.block.returns = [b.output]
    with pytest.raises(VerifyError, match="%a defined twice"):
        verify(g)


def test_broken_use_list():
    g = good()
    relu = node(g, "aten::relu")
    g.inputs[0].uses.remove((relu, 0))
    with pytest.raises(VerifyError, match="use list of %x misses this node"):
        verify(g)


def test_wrong_owner():
    g = good()
    relu = node(g, "aten::relu")
    relu.owner = node(g, "prim::If").blocks[0]
    with pytest.raises(VerifyError, match="owner"):
        verify(g)


def test_fusion_group_signature_mismatch():
    text = f"""
graph(%x : {F}, %y : {F}):
  %o : {F} = prim::CpuFusionGroup_0(%x, %y)
  return (%o)
with prim::CpuFusionGroup_0 = graph(%x : {F}):
  %r : {F} = aten::relu(%x)
  return (%r)
"""
    with pytest.raises(VerifyError, match="subgraph signature does not match"):
        verify(parse_graph(text))


def test_subgraph_is_verified_too():
    text = f"""
graph(%x : {F}):
  %o : {F} = prim::CpuFusionGroup_0(%x)
  return (%o)
with prim::CpuFusionGroup_0 = graph(%x : {F}):
  %r : {F} = aten::relu(%x)
  %s : {F} = aten::neg(%r)
  return (%s)
"""
    g = parse_graph(text)
    sub = g.block.nodes[0].subgraph
    sub.block.nodes.reverse()
    with pytest.raises(VerifyError, match="%r is used before"):
        verify(g)


def test_group_without_subgraph():
    g = Graph()
    x = g.add_input("x", TENSOR)
    n = g.create("prim::CpuFusionGroup", [x], [TENSOR])
    g.block.append(n)
    g.block.returns = [n.output]
    with pytest.raises(VerifyError, match="without a subgraph"):
        verify(g)
