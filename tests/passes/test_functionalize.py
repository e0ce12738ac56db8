"""functionalize: in-place ops on fresh intermediates become functional; everything else stays."""
import logging

from graphfuser.config import config
from graphfuser.ir import parse_graph, print_graph, verify
from graphfuser.passes import functionalize, partition
from helpers import FT, assert_in_order, assert_not_in

F = FT(4, 8)
HEAD = f"""
graph(%x : {F}, %y : {F}, %c : bool):
  %1 : int = prim::Constant[value=1]()
  %two : float = prim::Constant[value=2.]()
"""


def run(body: str) -> str:
    g = verify(parse_graph(HEAD + body))
    functionalize(g)
    return print_graph(verify(g))


def test_inplace_on_intermediate_becomes_functional():
    out = run(f"""
  %a : {F} = aten::mul(%x, %two)
  %b : {F} = aten::add_(%a, %y, %1)
  %e : {F} = aten::relu_(%b)
  %d : {F} = aten::sigmoid(%a)
  return (%a, %d)
""")
    assert_not_in(out, "aten::add_", "aten::relu_")
    # later readers of %a (and of %b, the alias add_ returned) see the written value
    assert_in_order(out, "%b : ", "aten::add(%a, %y, %1)", "%e : ", "aten::relu(%b)",
                    "aten::sigmoid(%e)", "return (%e, %d)")


def test_functional_inplace_chain_fuses():
    g = verify(parse_graph(HEAD + f"""
  %a : {F} = aten::mul(%x, %two)
  %b : {F} = aten::add_(%a, %y, %1)
  %c : {F} = aten::relu_(%a)
  return (%a)
"""))
    functionalize(g)
    groups = partition(g)
    verify(g)
    assert len(groups) == 1
    assert [n.kind for n in groups[0].subgraph.nodes() if n.kind != "prim::Constant"] == [
        "aten::mul", "aten::add", "aten::relu"]


def test_inplace_on_graph_input_is_kept():
    out = run(f"""
  %b : {F} = aten::add_(%x, %y, %1)
  %c : {F} = aten::relu(%x)
  return (%c)
""")
    assert_in_order(out, "aten::add_(%x, %y, %1)", "aten::relu(%x)")


def test_inplace_on_a_view_is_kept():
    out = run(f"""
  %a : {F} = aten::mul(%x, %two)
  %s : int[] = prim::Constant[value=[8, 4]]()
  %v : Float(8, 4, strides=[4, 1], requires_grad=0, device=cpu) = aten::view(%a, %s)
  %w : Float(8, 4, strides=[4, 1], requires_grad=0, device=cpu) = aten::relu_(%v)
  return (%a)
""")
    assert "aten::relu_(%v)" in out


def test_inplace_after_an_aliasing_use_is_kept(caplog):
    caplog.set_level(logging.INFO, logger="graphfuser")
    with config.override(log_level=">partition"):
        out = run(f"""
  %a : {F} = aten::mul(%x, %two)
  %s : int[] = prim::Constant[value=[8, 4]]()
  %v : Float(8, 4, strides=[4, 1], requires_grad=0, device=cpu) = aten::view(%a, %s)
  %b : {F} = aten::add_(%a, %y, %1)
  return (%v)
""")
    assert "aten::add_(%a, %y, %1)" in out
    assert "may be aliased by an earlier use" in caplog.text


def test_inplace_on_value_used_in_nested_block_is_kept():
    out = run(f"""
  %a : {F} = aten::mul(%x, %two)
  %r : {F} = prim::If(%c)
    block0():
      %n : {F} = aten::neg(%a)
      -> (%n)
    block1():
      -> (%x)
  %b : {F} = aten::add_(%a, %y, %1)
  return (%r, %a)
""")
    assert "aten::add_(%a, %y, %1)" in out


def test_inplace_on_value_returned_by_nested_block_is_kept():
    # the If yields %a itself (an alias): rewriting add_ would hand the If the unwritten value
    out = run(f"""
  %a : {F} = aten::mul(%x, %two)
  %b : {F} = aten::add_(%a, %y, %1)
  %r : {F} = prim::If(%c)
    block0():
      -> (%a)
    block1():
      -> (%x)
  return (%r)
""")
    assert "aten::add_(%a, %y, %1)" in out


def test_inplace_inside_a_block_on_a_block_local_value():
    out = run(f"""
  %r : {F} = prim::If(%c)
    block0():
      %a : {F} = aten::mul(%x, %two)
      %b : {F} = aten::add_(%a, %y, %1)
      -> (%a)
    block1():
      -> (%x)
  return (%r)
""")
    assert_in_order(out, "aten::add(%a, %y, %1)", "-> (%b)")
