"""Dead code elimination: drop side-effect-free nodes whose outputs are never used."""
from __future__ import annotations

from ..ir.graph import Block, Graph
from ..ops import lookup
from .partition import _mutates


def _returned_values(block: Block, out: set) -> set:
    """Every value returned by ``block`` or a block nested in it (block returns are not uses)."""
    out.update(block.returns)
    for node in block.nodes:
        for b in node.blocks:
            _returned_values(b, out)
    return out


def _dce_block(block: Block, returned: set) -> int:
    removed = 0
    for node in reversed(list(block.nodes)):
        for b in node.blocks:
            removed += _dce_block(b, returned)
        if node.kind in ("prim::Loop", "prim::If") and node.outputs:
            # keep control flow unless it is provably pure and unused
            if any(o.uses or o in returned for o in node.outputs) or _mutates(node):
                continue
            if any(n.kind.startswith("prim::") and n.kind not in ("prim::Constant",) for b in node.blocks for n in b.nodes):
                continue
        if _mutates(node) or not node.outputs and node.kind not in ("prim::Constant",):
            continue
        if any(o.uses or o in returned for o in node.outputs):
            continue
        # op-table rows are pure (a random row's draws are a function of its seed and offset
        # inputs; the generator advance is philox_state's, which has no row and stays)
        if node.kind.startswith("aten::") or lookup(node.kind) is not None or node.kind in ("prim::Constant", "prim::GetAttr", "prim::ListConstruct",
                                                            "prim::TupleConstruct", "prim::If", "prim::Loop"):
            block.remove(node)
            removed += 1
    return removed


def dce(graph: Graph) -> Graph:
    # A value returned by a nested block (e.g. a constant an If branch yields) is live even
    # though it has no use in a node's inputs.
    _dce_block(graph.block, _returned_values(graph.block, set()))
    return graph
