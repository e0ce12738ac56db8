"""Make in-place ops on intermediates functional, so they can fuse.

``%b = aten::add_(%a, %x, %1)`` where ``%a`` is a fresh intermediate (produced by an op-table op
in the same block, not a view, not a graph input, with no use in a nested block) becomes
``%b = aten::add(%a, %x, %1)`` and every later use of ``%a`` reads ``%b``. In-place writes to
graph inputs, block parameters, views or values used in nested blocks are left alone and never
fused.
"""
from __future__ import annotations

from ..ir.graph import Block, Graph, Node
from ..log import jit_log
from ..executor.builtins import resolve_aten
from ..ops import lookup


def _fresh(node: Node) -> bool:
    """Does ``node`` produce a new tensor (not a view or alias of its inputs)?"""
    row = lookup(node.kind)
    return row is not None and row.kind in ("pointwise", "cast", "reduction", "normalization") \
        and node.kind not in ("aten::to", "aten::type_as", "aten::dropout")


def _functionalize_block(block: Block) -> int:
    changed = 0
    for node in list(block.nodes):
        for b in node.blocks:
            changed += _functionalize_block(b)
        if not node.kind.endswith("_") or lookup(node.kind[:-1]) is None or not node.inputs:
            continue
        target = node.inputs[0]
        producer = target.node
        if producer is None or producer.owner is not block or not _fresh(producer):
            jit_log("partition", 1, f"kept in-place {node.where()}: %{target.name} is not a fresh intermediate")
            continue
        pos = block.nodes.index(node)
        users = [u for u, _ in target.uses if u is not node]
        if any(u.owner is not block for u in users) or any(target in n.nested_returns() for n in block.nodes):
            jit_log("partition", 1, f"kept in-place {node.where()}: %{target.name} is used in a nested block")
            continue
        if any(u.owner is block and block.nodes.index(u) < pos and lookup(u.kind) is None for u in users):
            jit_log("partition", 1, f"kept in-place {node.where()}: %{target.name} may be aliased by an earlier use")
            continue
        old_kind, node.kind = node.kind, node.kind[:-1]
        schema = getattr(node.schema, "schema", "") or None
        if schema:
            schema = schema.replace(old_kind + ".", node.kind + ".", 1).replace(old_kind + "(", node.kind + "(", 1)
        node.schema = resolve_aten(node.kind, schema) if schema else None  # None: resolved by the host program
        new = node.outputs[0]
        for u, i in list(target.uses):
            if u is not node and block.nodes.index(u) > pos:
                u.replace_input(i, new)
        block.returns = [new if r is target else r for r in block.returns]
        changed += 1
        jit_log("partition", 1, f"made {node.kind}_ functional on intermediate %{target.name}")
    return changed


def functionalize(graph: Graph) -> Graph:
    _functionalize_block(graph.block)
    return graph
