"""insert_guards: each group becomes guard + If(group | fallback)."""
from graphfuser.ir import parse_graph, print_graph, verify
from graphfuser.ir.types import TensorType
from graphfuser.passes import dce, insert_guards, partition
from helpers import FT, assert_in_order, normalize

F = FT(4, 8)
F1 = FT(4, 1)


def pipeline(text: str):
    g = verify(parse_graph(text))
    groups = partition(g)
    ifs = insert_guards(g, groups)
    dce(g)
    verify(g)
    return g, groups, ifs


def test_guard_and_fallback_around_a_group():
    g, groups, ifs = pipeline(f"""
graph(%x : {F}, %b : {F1}, %s : float):
  %1 : int = prim::Constant[value=1]()
  %a : {F} = aten::add(%x, %b, %1)
  %m : {F} = aten::mul(%a, %s)
  %r : {F} = aten::relu(%m)
  return (%r)
""")
    out = print_graph(g)
    assert "prim::Constant" not in out.split("with ")[0]   # copied into the group; dce dropped it
    assert_in_order(out,
                    f" : bool = prim::CpuFusionGuard[types=[{F}, {F1}]](%x, %b)",
                    " : Tensor = prim::If(",
                    "block0():", "= prim::CpuFusionGroup_0[cache_id=", "](%x, %b, %s)",
                    "block1():", "= prim::FallbackGraph_1(%x, %b, %s)",
                    "return (",
                    "with prim::CpuFusionGroup_0 = graph(", "with prim::FallbackGraph_1 = graph(")
    ifn = ifs[0]
    group, fallback = ifn.blocks[0].nodes[0], ifn.blocks[1].nodes[0]
    assert group is groups[0] and isinstance(group.attrs["cache_id"], int)
    # the guard checks tensor inputs only; the scalar %s is passed through
    guard = g.block.nodes[[n.kind for n in g.block.nodes].index("prim::CpuFusionGuard")]
    assert [v.name for v in guard.inputs] == ["x", "b"]
    assert all(isinstance(t, TensorType) for t in guard.attrs["types"])
    # the fallback is a copy of the group's subgraph
    assert normalize(str(fallback.subgraph)) == normalize(str(group.subgraph))
    assert fallback.subgraph is not group.subgraph
    assert g.outputs == list(ifn.outputs)


def test_cache_ids_are_distinct():
    _, groups, _ = pipeline(f"""
graph(%x : {F}, %w : {F}):
  %a : {F} = aten::sin(%x)
  %b : {F} = aten::cos(%a)
  %m : {F} = aten::mm(%b, %w)
  %c : {F} = aten::sin(%m)
  %d : {F} = aten::cos(%c)
  return (%d)
""")
    ids = [g.attrs["cache_id"] for g in groups]
    assert len(ids) == 2 and len(set(ids)) == 2


def test_group_output_returned_by_a_nested_block():
    g, groups, ifs = pipeline(f"""
graph(%x : {F}, %c : bool):
  %a : {F} = aten::relu(%x)
  %b : {F} = aten::neg(%a)
  %y : {F} = prim::If(%c)
    block0():
      -> (%a)
    block1():
      -> (%b)
  return (%y)
""")
    out = print_graph(g)
    user_if = g.block.nodes[-1]
    assert user_if.kind == "prim::If" and user_if.inputs[0] is g.inputs[1]
    guarded = ifs[0]
    assert user_if.blocks[0].returns[0] is guarded.outputs[0]
    assert user_if.blocks[1].returns[0] is guarded.outputs[1]
    assert_in_order(out, "prim::CpuFusionGuard", "prim::CpuFusionGroup_0", "prim::FallbackGraph_1", "prim::If(%c)")


def test_guards_inside_blocks():
    g, groups, ifs = pipeline(f"""
graph(%x : {F}, %n : int):
  %t : bool = prim::Constant[value=1]()
  %z : {F} = prim::Loop(%n, %t, %x)
    block0(%i : int, %acc : {F}):
      %a : {F} = aten::sin(%acc)
      %b : {F} = aten::cos(%a)
      -> (%t, %b)
  return (%z)
""")
    loop = g.block.nodes[-1]
    body_kinds = [n.kind for n in loop.blocks[0].nodes]
    assert body_kinds == ["prim::CpuFusionGuard", "prim::If"]
    assert loop.blocks[0].returns[1] is ifs[0].outputs[0]
