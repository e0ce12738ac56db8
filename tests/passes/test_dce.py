"""dce: unused pure nodes go; side effects and values read by nested blocks stay."""
import torch

import graphfuser
from graphfuser.ir import parse_graph, print_graph, verify
from graphfuser.passes import PIPELINE, dce
from helpers import FT, assert_in_order, assert_not_in

F = FT(4, 8)


def run(text: str) -> str:
    g = verify(parse_graph(text))
    dce(g)
    return print_graph(verify(g))


def test_unused_pure_nodes_are_removed():
    out = run(f"""
graph(%x : {F}):
  %k : int = prim::Constant[value=3]()
  %a : {F} = aten::sin(%x)
  %b : {F} = aten::cos(%a)
  %c : {F} = aten::exp(%x)
  return (%c)
""")
    assert_not_in(out, "aten::sin", "aten::cos", "prim::Constant[value=3]")
    assert "aten::exp(%x)" in out


def test_side_effects_are_kept():
    out = run(f"""
graph(%x : {F}):
  %two : float = prim::Constant[value=2.]()
  %a : {F} = aten::mul_(%x, %two)
  %s : str = prim::Constant[value="hi"]()
   = prim::Print(%s)
  return (%x)
""")
    assert_in_order(out, "aten::mul_(%x, %two)", "prim::Print(%s)")


def test_constant_returned_by_a_nested_block_is_kept():
    # block returns are not uses; dce must still see them (interpolate's captured graph does this)
    out = run(f"""
graph(%x : {F}, %c : bool):
  %k : int = prim::Constant[value=3]()
  %r : int = prim::If(%c)
    block0():
      -> (%k)
    block1():
      %z : int = prim::Constant[value=4]()
      -> (%z)
  return (%r)
""")
    assert "%k : int = prim::Constant[value=3]()" in out


def test_unused_pure_if_is_removed():
    out = run(f"""
graph(%x : {F}, %c : bool):
  %r : {F} = prim::If(%c)
    block0():
      %a : {F} = aten::sin(%x)
      -> (%a)
    block1():
      -> (%x)
  return (%x)
""")
    assert_not_in(out, "prim::If")


def test_if_with_side_effects_is_kept():
    out = run(f"""
graph(%x : {F}, %c : bool):
  %two : float = prim::Constant[value=2.]()
  %r : {F} = prim::If(%c)
    block0():
      %a : {F} = aten::mul_(%x, %two)
      -> (%a)
    block1():
      -> (%x)
  return (%x)
""")
    assert "aten::mul_(%x, %two)" in out


def test_pipeline_order():
    assert PIPELINE == ("plan_conv_layouts", "fold_constant_ifs", "fill_numbers", "batch_norm_training",
                        "split_biases", "route_bias_gradients", "pad_gemms", "functionalize", "sink_views", "partition",
                        "insert_guards",
                        "dce")


def test_constant_ifs_fold_so_functional_wrappers_fuse():
    import torch.nn.functional as F

    def f(x):
        return F.silu(F.leaky_relu(x, 0.1) * 2.0) + F.hardtanh(x)

    sf = graphfuser.script(f)
    x = torch.randn(100, 10)
    for _ in range(3):
        out = sf(x)
    torch.testing.assert_close(out, f(x))
    text = str(graphfuser.last_executed_optimized_graph())
    assert text.count("with prim::CpuFusionGroup") == 1, text
    assert "RaiseException" not in text.split("with")[0]
