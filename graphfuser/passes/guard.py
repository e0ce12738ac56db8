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

The guard checks only the group's tensor inputs; its ``types`` attribute lists what the kernel
is specialized on. The fallback holds a copy of the group's subgraph, run eagerly.
"""
from __future__ import annotations

import itertools

from ..ir.clone import clone_graph
from ..ir.graph import Block, Graph, Node
from ..ir.types import BOOL, TENSOR

_cache_ids = itertools.count()


def guard_kind(group: Node) -> str:
    return group.kind.replace("FusionGroup", "FusionGuard")


def wrap_group(graph: Graph, group: Node, block: Block) -> Node:
    """Replace ``group`` (in ``block``) with guard + If(group | fallback); returns the If node."""
    pairs = [(v, p) for v, p in zip(group.inputs, group.subgraph.inputs) if v.type.is_tensor or p.type.is_tensor]
    guard = graph.create(guard_kind(group), [v for v, _ in pairs], [BOOL], {"types": [p.type for _, p in pairs]})
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
    fb = graph.create("prim::FallbackGraph", list(group.inputs), [o.type for o in group.outputs])
    fb.subgraph = clone_graph(group.subgraph)
    b1.append(fb)
    b1.returns = list(fb.outputs)
    return ifn


def insert_guards(graph: Graph, groups: list[Node]) -> list[Node]:
    return [wrap_group(graph, g, g.owner) for g in groups]
