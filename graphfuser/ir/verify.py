"""``verify(graph)``: structural checks run after every pass in tests (like ``torch.fx``'s lint)."""
from __future__ import annotations

from .graph import SUBGRAPH_KINDS, Block, Graph, Node


class VerifyError(AssertionError):
    pass


def _fail(node: Node | None, msg: str) -> None:
    where = f" (at {node.where()})" if node is not None else ""
    raise VerifyError(msg + where)


def _check_block(block: Block, visible: set, names: set) -> None:
    scope = set(visible)
    for p in block.params:
        if p.name in names:
            _fail(block.owner, f"value name %{p.name} defined twice")
        names.add(p.name)
        scope.add(p)
    for node in block.nodes:
        if node.owner is not block:
            _fail(node, "node's owner is not the block that lists it")
        for i, v in enumerate(node.inputs):
            if v not in scope:
                _fail(node, f"input %{v.name} is used before it is defined or outside its scope")
            if (node, i) not in v.uses:
                _fail(node, f"use list of %{v.name} misses this node")
        for b in node.blocks:
            _check_block(b, scope, names)
        if node.kind == "prim::If":
            if len(node.blocks) != 2:
                _fail(node, "prim::If needs exactly two blocks")
            for b in node.blocks:
                if len(b.returns) != len(node.outputs):
                    _fail(node, "prim::If block returns do not match its outputs")
        if node.kind == "prim::Loop":
            if len(node.blocks) != 1 or len(node.inputs) < 2:
                _fail(node, "prim::Loop needs (max_trip_count, cond, *carried) and one block")
            b = node.blocks[0]
            if len(b.params) != len(node.inputs) - 1 or len(b.returns) != len(node.inputs) - 1:
                _fail(node, "prim::Loop block signature does not match its carried values")
            if len(node.outputs) != len(node.inputs) - 2:
                _fail(node, "prim::Loop outputs do not match its carried values")
        if node.kind in SUBGRAPH_KINDS:
            if node.subgraph is None:
                _fail(node, "fusion/fallback node without a subgraph")
            if len(node.subgraph.inputs) != len(node.inputs) or len(node.subgraph.outputs) != len(node.outputs):
                _fail(node, "subgraph signature does not match the node")
            verify(node.subgraph)
        for o in node.outputs:
            if o.name in names:
                _fail(node, f"value name %{o.name} defined twice")
            names.add(o.name)
            if o.node is not node:
                _fail(node, f"output %{o.name} does not point back at its node")
            scope.add(o)
    for r in block.returns:
        if r not in scope:
            _fail(block.owner, f"returned value %{r.name} is not defined in scope")


def verify(graph: Graph) -> Graph:
    """Raise ``VerifyError`` naming the first broken invariant; returns the graph for chaining."""
    _check_block(graph.block, set(), set())
    return graph
