"""Partition: graph text in -> partition -> graph text out, for every knob."""
import logging

import pytest

import graphfuser
from graphfuser.config import config
from graphfuser.ir import parse_graph, print_graph, verify
from graphfuser.passes import partition
from helpers import FT, assert_in_order, assert_not_in, fusion_groups, normalize

F = FT(4, 8)
FCUDA = FT(4, 8, device="cuda:0")
FMETA = FT(4, 8, device="meta")


def run(text: str) -> tuple[str, list]:
    g = verify(parse_graph(text))
    groups = partition(g)
    verify(g)
    return print_graph(g), groups


CHAIN = f"""
graph(%x : {F}, %y : {F}):
  %1 : int = prim::Constant[value=1]()
  %two : float = prim::Constant[value=2.]()
  %a : {F} = aten::add(%x, %y, %1)
  %b : {F} = aten::mul(%a, %two)
  %c : {F} = aten::relu(%b)
  return (%c)
"""


def test_default_chain_becomes_one_group():
    out, groups = run(CHAIN)
    expected = f"""graph(%x : {F},
      %y : {F}):
  %1 : int = prim::Constant[value=1]()
  %two : float = prim::Constant[value=2.]()
  %c.1 : {F} = prim::CpuFusionGroup_0(%x, %y)
  return (%c.1)
with prim::CpuFusionGroup_0 = graph(%x : {F},
                                    %y : {F}):
  %1 : int = prim::Constant[value=1]()
  %a : {F} = aten::add(%x, %y, %1)
  %two : float = prim::Constant[value=2.]()
  %b : {F} = aten::mul(%a, %two)
  %c : {F} = aten::relu(%b)
  return (%c)
"""
    assert out == expected
    assert len(groups) == 1 and groups[0].kind == "prim::CpuFusionGroup"


def test_group_exports_only_values_used_outside():
    text = f"""
graph(%x : {F}):
  %a : {F} = aten::sin(%x)
  %b : {F} = aten::cos(%a)
  %c : {F} = aten::exp(%b)
  %m : {F} = aten::mm(%a, %x)
  return (%c, %m)
"""
    out, groups = run(text)
    sub = groups[0].subgraph
    assert [v.name for v in sub.outputs] == ["a", "c"]
    assert_in_order(out, "prim::CpuFusionGroup_0(%x)", "aten::mm(%a.1, %x)", "return (%c.1, %m)")


SINGLE = f"""
graph(%x : {F}):
  %y : {F} = aten::relu(%x)
  %m : {F} = aten::mm(%y, %x)
  %z : {F} = aten::sigmoid(%m)
  return (%z)
"""


def test_single_nodes_are_not_fused_by_default():
    out, groups = run(SINGLE)
    assert groups == []
    assert_not_in(out, "FusionGroup")


def test_single_node_mode():
    graphfuser.set_single_node_mode(True)
    out, groups = run(SINGLE)
    assert len(groups) == 2
    assert_in_order(out, "%y.1 : ", "prim::CpuFusionGroup_0(%x)", "aten::mm(%y.1, %x)",
                    "prim::CpuFusionGroup_1(%m)", "with prim::CpuFusionGroup_0", "aten::relu",
                    "with prim::CpuFusionGroup_1", "aten::sigmoid")


SIBLINGS = f"""
graph(%x : {F}, %w : {F}):
  %a : {F} = aten::sin(%x)
  %b : {F} = aten::cos(%x)
  %m : {F} = aten::mm(%w, %w)
  %c : {F} = aten::tanh(%m)
  %d : {F} = aten::exp(%m)
  return (%a, %b, %c, %d)
"""


def test_horizontal_mode_on_merges_siblings():
    graphfuser.set_horizontal_mode(True)
    out, groups = run(SIBLINGS)
    assert len(groups) == 2
    assert [[n.kind for n in g.subgraph.nodes()] for g in groups] == [["aten::sin", "aten::cos"],
                                                                       ["aten::tanh", "aten::exp"]]
    assert_in_order(out, "%a.1 : ", "%b.1 : ", "prim::CpuFusionGroup_0(%x)",
                    "aten::mm(%w, %w)", "%c.1 : ", "%d.1 : ", "prim::CpuFusionGroup_1(%m)")


def test_horizontal_mode_off_keeps_siblings_apart():
    graphfuser.set_horizontal_mode(False)
    out, groups = run(SIBLINGS)
    assert groups == []
    graphfuser.set_single_node_mode(True)
    out, groups = run(SIBLINGS)
    assert len(groups) == 4
    assert all(len([n for n in g.subgraph.nodes()]) == 1 for g in groups)


def test_horizontal_mode_respects_cycles():
    # %a and %c share %x, but %c reads mm(%a): merging them would create a cycle
    text = f"""
graph(%x : {F}):
  %a : {F} = aten::sin(%x)
  %m : {F} = aten::mm(%a, %x)
  %c : {F} = aten::mul(%x, %m)
  return (%c)
"""
    graphfuser.set_single_node_mode(True)
    out, groups = run(text)
    assert len(groups) == 2
    assert_in_order(out, "prim::CpuFusionGroup_0(%x)", "aten::mm", "prim::CpuFusionGroup_1(%x, %m)")


def test_skip_node_kind():
    assert graphfuser.set_skip_node_kind("aten::add", True) is False
    out, groups = run(CHAIN)
    assert len(groups) == 1
    assert [n.kind for n in groups[0].subgraph.nodes() if n.kind != "prim::Constant"] == ["aten::mul", "aten::relu"]
    assert_in_order(out, "%a : ", "= aten::add(%x, %y, %1)", "prim::CpuFusionGroup_0(%a)")
    assert graphfuser.set_skip_node_kind("aten::add", False) is True
    _, groups = run(CHAIN)
    assert [n.kind for n in groups[0].subgraph.nodes() if n.kind != "prim::Constant"] == [
        "aten::add", "aten::mul", "aten::relu"]


def test_skip_node_kind_through_fuser_context():
    with graphfuser.fuser(skip_node_kinds=["aten::mul"]):
        _, groups = run(CHAIN)
        assert groups == []          # add and relu are no longer connected by a fusible node
    _, groups = run(CHAIN)
    assert len(groups) == 1


CYCLE = f"""
graph(%x : {F}, %w : {F}):
  %1 : int = prim::Constant[value=1]()
  %a : {F} = aten::add(%x, %x, %1)
  %b : {F} = aten::relu(%a)
  %m : {F} = aten::mm(%b, %w)
  %c : {F} = aten::mul(%b, %m)
  %d : {F} = aten::sigmoid(%c)
  return (%d)
"""


def test_no_cycles_through_an_unfusible_node():
    out, groups = run(CYCLE)
    assert len(groups) == 2
    first = [n.kind for n in groups[0].subgraph.nodes() if n.kind != "prim::Constant"]
    second = [n.kind for n in groups[1].subgraph.nodes() if n.kind != "prim::Constant"]
    assert first == ["aten::add", "aten::relu"] and second == ["aten::mul", "aten::sigmoid"]
    assert_in_order(out, "prim::CpuFusionGroup_0(%x)", "aten::mm(%b.1, %w)", "prim::CpuFusionGroup_1(%b.1, %m)")


def test_rejection_reasons_are_logged(caplog):
    caplog.set_level(logging.INFO, logger="graphfuser")
    graphfuser.set_skip_node_kind("aten::sigmoid", True)
    text = f"""
graph(%x : {F}, %w : {F}, %u : Tensor):
  %1 : int = prim::Constant[value=1]()
  %a : {F} = aten::add(%x, %x, %1)
  %b : {F} = aten::relu(%a)
  %m : {F} = aten::mm(%b, %w)
  %c : {F} = aten::mul(%b, %m)
  %d : {F} = aten::sigmoid(%c)
  %e : Tensor = aten::exp(%u)
  %f : {F} = aten::tanh(%d)
  return (%d, %e, %f)
"""
    with config.override(log_level=">partition"):
        run(text)
    log = "\n".join(r.getMessage() for r in caplog.records)
    assert_in_order(log, "rejected aten::mm: aten::mm is not in the op table")
    assert "aten::mul not merged with group 0: the merge would create a cycle" in log
    assert "rejected aten::sigmoid: aten::sigmoid is a skipped node kind" in log
    assert "rejected aten::exp: output type was not profiled" in log
    assert "dropped single-node group aten::mul (single-node mode is off)" in log
    assert all(r.getMessage().startswith("[partition] ") for r in caplog.records)


def test_nothing_is_logged_when_the_level_is_off(caplog):
    caplog.set_level(logging.DEBUG, logger="graphfuser")
    run(CYCLE)
    assert not [r for r in caplog.records if "[partition]" in r.getMessage()]


def test_debug_level_logs_group_assignment(caplog):
    caplog.set_level(logging.INFO, logger="graphfuser")
    with config.override(log_level=">>partition"):
        run(CHAIN)
    log = "\n".join(r.getMessage() for r in caplog.records)
    assert_in_order(log, "aten::add -> group 0", "aten::mul -> group 0", "aten::relu -> group 0")


def test_groups_inside_if_and_loop_blocks():
    text = f"""
graph(%x : {F}, %c : bool, %n : int):
  %1 : int = prim::Constant[value=1]()
  %t : bool = prim::Constant[value=1]()
  %two : float = prim::Constant[value=2.]()
  %y : {F} = prim::If(%c)
    block0():
      %a : {F} = aten::mul(%x, %two)
      %b : {F} = aten::relu(%a)
      -> (%b)
    block1():
      %d : {F} = aten::neg(%x)
      -> (%d)
  %z : {F} = prim::Loop(%n, %t, %y)
    block0(%i : int, %acc : {F}):
      %m : {F} = aten::mul(%acc, %two)
      %s : {F} = aten::add(%m, %x, %1)
      -> (%t, %s)
  %e : {F} = aten::exp(%z)
  %f : {F} = aten::log(%e)
  return (%f)
"""
    out, groups = run(text)
    assert len(groups) == 3
    assert_in_order(out, "prim::If(%c)", "block0():", "%b.1 : ", "prim::CpuFusionGroup_0(%x)", "-> (%b.1)",
                    "block1():", "aten::neg(%x)", "prim::Loop(%n, %t, %y)", "block0(%i : int, %acc",
                    "prim::CpuFusionGroup_1(%acc, %x)", "-> (%t, %s.1)", "prim::CpuFusionGroup_2(%z)",
                    "return (%f.1)")
    # groups never span block boundaries
    for g in groups:
        assert g.owner is not None and all(n.kind != "prim::If" for n in g.subgraph.nodes())


def test_value_returned_by_a_nested_block_stays_visible():
    # %a is read only by the If's block0 return: it must be a group output, defined before the If
    text = f"""
graph(%x : {F}, %c : bool):
  %a : {F} = aten::relu(%x)
  %b : {F} = aten::neg(%a)
  %y : {F} = prim::If(%c)
    block0():
      -> (%a)
    block1():
      -> (%b)
  return (%y)
"""
    out, groups = run(text)
    assert [v.name for v in groups[0].subgraph.outputs] == ["a", "b"]
    assert_in_order(out, "%a.1 : ", "%b.1 : ", "prim::CpuFusionGroup_0(%x)", "prim::If(%c)",
                    "-> (%a.1)", "-> (%b.1)")


def test_group_is_placed_before_a_nested_block_that_returns_its_value():
    text = f"""
graph(%x : {F}, %c : bool):
  %a : {F} = aten::relu(%x)
  %y : {F} = prim::If(%c)
    block0():
      -> (%a)
    block1():
      -> (%x)
  %b : {F} = aten::neg(%a)
  return (%y, %b)
"""
    out, groups = run(text)
    assert len(groups) == 1
    assert_in_order(out, "prim::CpuFusionGroup_0(%x)", "prim::If(%c)", "-> (%a.1)", "return (%y, %b.1)")


def test_side_effects_are_barriers():
    text = f"""
graph(%x : {F}, %y : {F}):
  %1 : int = prim::Constant[value=1]()
  %two : float = prim::Constant[value=2.]()
  %a : {F} = aten::add(%x, %y, %1)
  %s : {F} = aten::mul_(%y, %two)
  %b : {F} = aten::mul(%a, %y)
  return (%b)
"""
    graphfuser.set_single_node_mode(True)
    out, groups = run(text)
    assert len(groups) == 2            # never one group across the in-place write
    assert_in_order(out, "prim::CpuFusionGroup_0(%x, %y)", "aten::mul_(%y, %two)", "prim::CpuFusionGroup_1(%a.1, %y)")


def test_cuda_typed_graph_gives_cuda_groups_without_a_gpu():
    text = f"""
graph(%x : {FCUDA}):
  %a : {FCUDA} = aten::sin(%x)
  %b : {FCUDA} = aten::cos(%a)
  return (%b)
"""
    out, groups = run(text)
    assert [g.kind for g in groups] == ["prim::CudaFusionGroup"]
    assert "prim::CudaFusionGroup_0(%x)" in out


def test_devices_are_never_mixed_in_a_group(caplog):
    caplog.set_level(logging.INFO, logger="graphfuser")
    text = f"""
graph(%x : {F}, %g : {FCUDA}, %m : {FMETA}):
  %a : {F} = aten::sin(%x)
  %b : {F} = aten::cos(%a)
  %c : {FCUDA} = aten::sin(%g)
  %d : {FCUDA} = aten::cos(%c)
  %e : {FMETA} = aten::sin(%m)
  %f : {FMETA} = aten::cos(%e)
  return (%b, %d, %f)
"""
    with config.override(log_level=">partition"):
        out, groups = run(text)
    assert sorted(g.kind for g in groups) == ["prim::CpuFusionGroup", "prim::CudaFusionGroup"]
    assert "no fusion backend for device meta" in caplog.text


def test_fuse_cpu_off():
    with config.override(fuse_cpu=False):
        _, groups = run(CHAIN)
    assert groups == []


def test_untyped_graph_is_left_alone():
    text = """
graph(%x : Tensor):
  %a : Tensor = aten::sin(%x)
  %b : Tensor = aten::cos(%a)
  return (%b)
"""
    out, groups = run(text)
    assert groups == [] and normalize(out) == normalize(text.strip() + "\n")


def _random_graph(rng, n_nodes: int) -> str:
    """A random DAG of fusible and unfusible ops on [4, 8] floats (diamonds, residuals, long
    skips, mm barriers), as graph text."""
    lines = [f"graph(%x0 : {F}, %x1 : {F}):", "  %one : int = prim::Constant[value=1]()"]
    values = ["x0", "x1"]
    for i in range(n_nodes):
        a, b = rng.choice(values), rng.choice(values[-4:])
        kind = rng.choice(["add", "mul", "relu", "sigmoid", "mm", "add", "mul"])
        if kind in ("relu", "sigmoid"):
            lines.append(f"  %v{i} : {F} = aten::{kind}(%{a})")
        elif kind == "mm":    # not fusible: a unit between groups
            lines.append(f"  %t{i} : {FT(8, 4)} = aten::t(%{b})")
            lines.append(f"  %m{i} : {FT(4, 4)} = aten::mm(%{a}, %t{i})")
            lines.append(f"  %v{i} : {F} = aten::mm(%m{i}, %{b})")
        elif kind == "add":
            lines.append(f"  %v{i} : {F} = aten::add(%{a}, %{b}, %one)")
        else:
            lines.append(f"  %v{i} : {F} = aten::mul(%{a}, %{b})")
        values.append(f"v{i}")
    outs = ", ".join(f"%{v}" for v in rng.sample(values[2:], 3))
    lines.append(f"  return ({outs})")
    return "\n".join(lines)


def test_bounded_cycle_checks_agree_with_full_reachability(monkeypatch):
    """The partition's bounded cycle checks (can_absorb / can_join) decide as the full
    reachability check (can_merge) on random DAGs."""
    import importlib
    import random

    part = importlib.import_module("graphfuser.passes.partition")
    cls = part._BlockPartition
    join = cls.can_join
    seen = []

    def checked(self, a, b, limit):
        got = join(self, a, b, limit)
        assert got == self.can_merge(set(a), set(b)), (a, b)
        seen.append(got)
        return got

    monkeypatch.setattr(cls, "can_join", checked)
    rng = random.Random(0)
    for _ in range(60):
        g = verify(parse_graph(_random_graph(rng, rng.randrange(4, 24))))
        partition(g)
        verify(g)
    assert True in seen and False in seen      # both outcomes were exercised
