"""Printer <-> parser round trips: text -> Graph -> text is the identity."""
import math
import re

import pytest
import torch

import graphfuser
from graphfuser.ir import ParseError, parse_graph, parse_type, print_graph, verify
from helpers import FT, roundtrip

F48 = FT(4, 8)

CONTROL_FLOW = f"""
graph(%x : {F48},
      %n : int,
      %c : bool):
  %1 : int = prim::Constant[value=1]()
  %t : bool = prim::Constant[value=1]()
  %two : float = prim::Constant[value=2.]()
  %y : {F48} = prim::If(%c) # f.py:3:4
    block0():
      %a : {F48} = aten::relu(%x) # f.py:4:8
      -> (%a)
    block1():
      %b : {F48} = aten::neg(%x)
      -> (%b)
  %z : {F48} = prim::Loop(%n, %t, %y) # f.py:6:4
    block0(%i : int, %acc : {F48}):
      %m : {F48} = aten::mul(%acc, %two)
      %s : {F48} = aten::add(%m, %x, %1)
      -> (%t, %s)
  return (%z)
"""

FUSED = f"""
graph(%x.1 : {F48},
      %y.1 : {F48}):
  %4 : bool = prim::CpuFusionGuard[types=[{F48}, {F48}]](%x.1, %y.1)
  %5 : Tensor = prim::If(%4)
    block0():
      %1 : {F48} = prim::CpuFusionGroup_0[cache_id=0](%x.1, %y.1)
      -> (%1)
    block1():
      %7 : {F48} = prim::FallbackGraph_1(%x.1, %y.1)
      -> (%7)
  return (%5)
with prim::CpuFusionGroup_0 = graph(%x.1 : {F48},
                                    %y.1 : {F48}):
  %2 : int = prim::Constant[value=1]()
  %o.1 : {F48} = aten::add(%x.1, %y.1, %2) # f.py:3:8
  %6 : {F48} = aten::relu(%o.1) # f.py:5:11
  return (%6)
with prim::FallbackGraph_1 = graph(%x.1 : {F48},
                                   %y.1 : {F48}):
  %2 : int = prim::Constant[value=1]()
  %o.1 : {F48} = aten::add(%x.1, %y.1, %2) # f.py:3:8
  %6 : {F48} = aten::relu(%o.1) # f.py:5:11
  return (%6)
"""

SYMBOLIC = """
graph(%x : Float(*, 8, strides=[*, 1], stride_order=[0, 1], contiguity=[0, 1], requires_grad=0, device=cpu),
      %y : Half(*, 1, *, strides=[*, *, 1], requires_grad=0, device=cuda:0),
      %z : Long(2, 3, strides=[1, 2], requires_grad=0, device=cpu),
      %s : Double(strides=[], requires_grad=1, device=cpu),
      %u : Tensor,
      %o : Tensor?,
      %l : int[]):
  %a : Float(*, 8, strides=[*, 1], stride_order=[0, 1], contiguity=[0, 1], requires_grad=0, device=cpu) = aten::relu(%x)
  %b : Float(*, 8, requires_grad=0, device=cpu) = aten::sigmoid(%a)
  %c : Tensor = aten::exp(%u)
  return (%b, %y, %z, %s, %c, %o, %l)
"""

CONSTANTS = r"""
graph(%x : Tensor):
  %i : int = prim::Constant[value=-3]()
  %f : float = prim::Constant[value=2.5]()
  %f2 : float = prim::Constant[value=1e-05]()
  %f3 : float = prim::Constant[value=-inf]()
  %f4 : float = prim::Constant[value=nan]()
  %f5 : float = prim::Constant[value=3.]()
  %b : bool = prim::Constant[value=0]()
  %b2 : bool = prim::Constant[value=1]()
  %s : str = prim::Constant[value="a, \"quoted\" (paren"]()
  %s2 : str = prim::Constant[value="back\\slash\\"]()
  %s3 : str = prim::Constant[value="two\nlines\ttab"]()
  %n : NoneType = prim::Constant()
  %l : int[] = prim::Constant[value=[1, 2, 3]]()
  %e : int[] = prim::Constant[value=[]]()
  %fl : float[] = prim::Constant[value=[0.5, 1.]]()
  %d : Device = prim::Constant[value="cpu"]()
  %t : (int, float) = prim::TupleConstruct(%i, %f)
   = prim::Print(%s, %s2, %s3)
   = prim::RaiseException(%s, %n) # f.py:9:8
  return (%x)
"""

ZERO_OUTPUTS = f"""
graph(%self : __torch__.M,
      %x : {F48}):
  %w : {F48} = prim::GetAttr[name="w"](%self)
  %y : {F48} = aten::mul(%x, %w)
   = prim::SetAttr[name="w"](%self, %y)
   = prim::Print(%y)
  return (%y)
"""


@pytest.mark.parametrize("text", [CONTROL_FLOW, FUSED, SYMBOLIC, CONSTANTS, ZERO_OUTPUTS],
                         ids=["control_flow", "fusion_group", "symbolic", "constants", "zero_outputs"])
def test_text_roundtrip_is_exact(text):
    g = verify(parse_graph(text))
    printed = print_graph(g)
    assert printed.strip() == text.strip()
    assert roundtrip(g) == printed


def test_constant_values_are_typed():
    g = parse_graph(CONSTANTS)
    values = {n.outputs[0].name: n.attrs.get("value") for n in g.nodes() if n.kind == "prim::Constant"}
    assert values["i"] == -3 and type(values["i"]) is int
    assert values["f"] == 2.5 and values["f2"] == 1e-05 and values["f3"] == -math.inf
    assert math.isnan(values["f4"])
    assert values["f5"] == 3.0 and type(values["f5"]) is float
    assert values["b"] is False and values["b2"] is True
    assert values["s"] == 'a, "quoted" (paren'
    assert values["s2"] == "back\\slash\\"
    assert values["s3"] == "two\nlines\ttab"
    assert values["n"] is None
    assert values["l"] == [1, 2, 3] and values["e"] == [] and values["fl"] == [0.5, 1.0]
    assert values["d"] == torch.device("cpu")


def test_zero_output_nodes_and_sources():
    g = parse_graph(CONSTANTS)
    raise_node = [n for n in g.nodes() if n.kind == "prim::RaiseException"][0]
    assert raise_node.outputs == [] and raise_node.source == "f.py:9:8"
    assert "   = prim::Print(%s, %s2, %s3)\n" in print_graph(g)


def test_subgraphs_are_attached_and_numbered():
    g = parse_graph(FUSED)
    ifn = [n for n in g.nodes() if n.kind == "prim::If"][0]
    group, fallback = ifn.blocks[0].nodes[0], ifn.blocks[1].nodes[0]
    assert group.kind == "prim::CpuFusionGroup" and group.attrs == {"cache_id": 0}
    assert fallback.kind == "prim::FallbackGraph"
    assert [n.kind for n in group.subgraph.nodes()] == ["prim::Constant", "aten::add", "aten::relu"]
    assert group.subgraph is not fallback.subgraph
    guard = g.block.nodes[0]
    assert [str(t) for t in guard.attrs["types"]] == [F48, F48]


def test_block_structure_of_control_flow():
    g = parse_graph(CONTROL_FLOW)
    loop = [n for n in g.nodes() if n.kind == "prim::Loop"][0]
    body = loop.blocks[0]
    assert [p.name for p in body.params] == ["i", "acc"]
    assert str(body.params[1].type) == F48
    assert [r.name for r in body.returns] == ["t", "s"]
    # the body reads %x from the enclosing scope
    add = body.nodes[1]
    assert add.inputs[1] is g.inputs[0]
    assert (add, 1) in g.inputs[0].uses


def test_symbolic_types_parse():
    g = parse_graph(SYMBOLIC)
    x, y, z, s = (v.type for v in g.inputs[:4])
    assert x.sizes == (-1, 8) and x.strides == (-1, 1) and x.stride_order == (0, 1) and x.contiguity == (False, True)
    assert y.dtype == torch.float16 and y.sizes == (-1, 1, -1) and y.device == torch.device("cuda:0")
    assert y.stride_order is None and not y.complete
    assert z.stride_order == (1, 0) and z.contiguity == (True, True)      # derived from the strides
    assert s.sizes == () and s.requires_grad is True
    assert str(g.inputs[5].type) == "Tensor?" and str(g.inputs[6].type) == "int[]"


def test_captured_and_optimized_graphs_roundtrip():
    def f(x, n: int):
        for _ in range(n):
            x = x * 1.5 + 1.0
        if bool(x.sum() > 0):
            x = x.relu() * 2.0
        else:
            x = x.sigmoid() - 1.0
        return x

    sf = graphfuser.script(f)
    roundtrip(sf.graph)
    x = torch.randn(4, 8)
    for _ in range(3):
        sf(x, 2)
    text = roundtrip(sf.graph_for(x, 2))
    assert "with prim::CpuFusionGroup_0 = graph(" in text


def test_tensor_type_text_roundtrip():
    for t in [torch.rand(2, 3), torch.rand(3, 2).t(), torch.rand(4, 1, 8), torch.rand(2, 3, 4, 5).to(
            memory_format=torch.channels_last), torch.rand(4, 1).expand(4, 8), torch.tensor(1.0),
            torch.rand(4, 16)[:, ::2], torch.ones(3, dtype=torch.bool)]:
        ty = graphfuser.ir.TensorType.of(t)
        assert parse_type(str(ty)) == ty, str(ty)
    merged = graphfuser.ir.TensorType.of(torch.rand(4, 16)[:, :8]).merge(graphfuser.ir.TensorType.of(torch.rand(5, 8)))
    assert str(merged) == "Float(*, 8, strides=[*, 1], stride_order=[0, 1], contiguity=[0, 1], requires_grad=0, device=cpu)"
    assert parse_type(str(merged)) == merged


@pytest.mark.parametrize("text, message", [
    ("graph(%x : Tensor):\n  %y : Tensor = aten::relu(%z)\n  return (%y)", "undefined value %z"),
    ("graph(%x : Tensor):\n  %y : Tensor = aten::relu(%x)\n  return (%w)", "undefined value %w"),
    ("graph(%x : Tensor):\n  %y : Tensor = prim::CpuFusionGroup_0(%x)\n  return (%y)", "no 'with prim::CpuFusionGroup_0"),
    ("graph(%x : Tensor):\n  %y : Tensor = aten::relu(%x\n  return (%y)", "unbalanced brackets"),
    ("graf(%x : Tensor):\n  return (%x)", "expected 'graph(...):'"),
    ("", "unexpected end of text"),
    ("graph(%x : Tensor):\n  %y : Tensor = aten::relu(%x)\n", "expected 'return (...)'"),
    ("graph(%x : Tensor, %c : bool):\n  %y : Tensor = prim::If(%c)\n    block0():\n"
     "      %z : Tensor = aten::relu(%x)\n", "expected '-> (...)'"),
    ("graph(%x : Tensor):\n  %y : Tensor = aten::relu(%x)\n  return (%y)\nbogus", "expected 'with NAME"),
])
def test_parse_errors(text, message):
    with pytest.raises(ParseError, match=re.escape(message)):
        parse_graph(text)
