"""Guard insertion: each fusion group becomes guard + If(group | fallback).

::

    %g : bool = prim::CpuFusionGuard[types=[Float(...)]](%x)
    %o : Tensor = prim::If(%g)
      block0():
        %o.1 : Tensor = prim::CpuFusionGroup_0[cache_id=0](%x)
        -> (%o.1)
      block1():
        %o.2 : Tensor = prim::FallbackGraph_1(%x)
        -> (%o.2)

The guard checks the group's tensor inputs; its ``types`` attribute lists what the kernel is
specialized on. The fallback holds a copy of the group's subgraph, run eagerly.

Scalars that feed a row's constant-only arguments (a reduction's dims / keepdim / dtype /
correction / eps, add's alpha, gelu's approximate) and had one value on
every profiling run (``Value.profiled``, ``ops.profiled_args``) become constants of the group's
subgraph and leave its inputs; the guard takes them after the tensors and checks them against
its ``values`` attribute, while the fallback keeps them as inputs and computes with whatever
value arrives::

    %g : bool = prim::CpuFusionGuard[types=[Float(...)], values=[-1, 1]](%x, %dim, %keep)
    %o : Tensor = prim::If(%g)
      block0():
        %o.1 : Tensor = prim::CpuFusionGroup_0[cache_id=0](%x)
        -> (%o.1)
      block1():
        %o.2 : Tensor = prim::FallbackGraph_1(%x, %dim, %keep)
        -> (%o.2)
"""
from __future__ import annotations

import itertools
from typing import Any

from ..ir.clone import clone_graph
from ..ir.graph import Block, Graph, Node, Value
from ..ir.types import BOOL, FLOAT, INT, NONE, STR, TENSOR, Type
from ..ops import as_constant, profiled_args
from .functionalize import mark_clone, restore_in_fallback

_cache_ids = itertools.count()


def guard_kind(group: Node) -> str:
    return group.kind.replace("FusionGroup", "FusionGuard")


def constant_type(value: Any) -> Type:
    """The type TorchScript gives a constant holding ``value``."""
    if value is None:
        return NONE
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, str):
        return STR
    if isinstance(value, float):
        return FLOAT
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(x, bool) for x in value):
            return Type("bool[]")
        return Type("float[]") if any(isinstance(x, float) for x in value) else Type("int[]")
    return INT


def specialize_scalars(group: Node) -> list[tuple[Value, Any]]:
    """Make the group's profiled scalar inputs constants of its subgraph.

    Returns (outer value, profiled value) for every input removed, for the guard to check.
    """
    sub = group.subgraph
    feeding = {v for n in sub.block.nodes for v in profiled_args(n)}
    checks: list[tuple[Value, Any]] = []
    keep: list[tuple[Value, Value]] = []
    first = sub.block.nodes[0] if sub.block.nodes else None
    for outer, p in zip(group.inputs, sub.inputs):
        if p in feeding and p.is_profiled_constant:
            value = as_constant(p.profiled)
            const = sub.constant(value, constant_type(value), before=first)
            for u, i in list(p.uses):
                u.replace_input(i, const)
            checks.append((outer, p.profiled))
        else:
            keep.append((outer, p))
    if checks:
        group.drop_inputs()
        for outer, _ in keep:
            group.add_input(outer)
        sub.block.params = [p for _, p in keep]
    return checks


def wrap_group(graph: Graph, group: Node, block: Block) -> Node:
    """Replace ``group`` (in ``block``) with guard + If(group | fallback); returns the If node."""
    fb_inputs, fb_sub = list(group.inputs), clone_graph(group.subgraph)
    for old, new in zip(group.subgraph.block.nodes, fb_sub.block.nodes):
        mark_clone(old, new)
    restore_in_fallback(fb_sub, group)
    checks = specialize_scalars(group)
    pairs = [(v, p) for v, p in zip(group.inputs, group.subgraph.inputs) if v.type.is_tensor or p.type.is_tensor]
    attrs: dict[str, Any] = {"types": [p.type for _, p in pairs]}
    if checks:
        attrs["values"] = [value for _, value in checks]
    guard = graph.create(guard_kind(group), [v for v, _ in pairs] + [v for v, _ in checks], [BOOL], attrs)
    block.insert_before(group, guard)
    ifn = graph.create("prim::If", [guard.output], [TENSOR] * len(group.outputs),
                       out_names=[o.name for o in group.outputs])
    block.insert_before(group, ifn)
    for old, new in zip(group.outputs, ifn.outputs):
        for u, i in list(old.uses):
            u.replace_input(i, new)
        block.replace_return_everywhere(old, new)
    block.nodes.remove(group)
    b0 = Block(graph, owner=ifn)
    ifn.blocks.append(b0)
    b0.append(group)
    b0.returns = list(group.outputs)
    group.attrs["cache_id"] = next(_cache_ids)
    b1 = Block(graph, owner=ifn)
    ifn.blocks.append(b1)
    fb = graph.create("prim::FallbackGraph", fb_inputs, [o.type for o in group.outputs])
    fb.subgraph = fb_sub
    b1.append(fb)
    b1.returns = list(fb.outputs)
    return ifn


def guarded(group: Node) -> tuple[Node, Node]:
    """(guard, fallback) of a group that ``wrap_group`` wrapped."""
    ifn = group.owner.owner
    outer = ifn.owner
    return outer.nodes[outer.nodes.index(ifn) - 1], ifn.blocks[1].nodes[-1]


def insert_guards(graph: Graph, groups: list[Node]) -> list[Node]:
    return [wrap_group(graph, g, g.owner) for g in groups]
