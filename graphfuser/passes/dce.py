"""Dead code elimination: drop side-effect-free nodes whose outputs are never used."""
from __future__ import annotations

import torch

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


_INT_DIVISIONS = ("aten::floor_divide", "aten::remainder", "aten::fmod", "aten::div")


def _may_raise(node) -> bool:
    """An integer division: eager raises ZeroDivisionError for a zero divisor even where the
    result is never read (``x.floor_divide(s).size(-1)``: fuzz graph 3572 of seed 10909)."""
    if node.kind not in _INT_DIVISIONS or len(node.outputs) != 1:
        return False
    dt = getattr(node.outputs[0].type, "dtype", None)
    return dt is not None and not dt.is_floating_point and not dt.is_complex and dt != torch.bool


# pure nodes of no op-table row: prim nodes, and host ops that passes write (a padded GEMM's
# weight, passes/gemm_pad.py: left behind when a weight cache takes its chain)
_PURE = ("prim::Constant", "prim::GetAttr", "prim::ListConstruct", "prim::TupleConstruct", "prim::If", "prim::Loop",
         "graphfuser::pad_rows", "graphfuser::dense_unbind")


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
        if _mutates(node) or not node.outputs and node.kind not in ("prim::Constant",) or _may_raise(node):
            continue
        if any(o.uses or o in returned for o in node.outputs):
            continue
        # op-table rows are pure (a random row's draws are a function of its seed and offset
        # inputs; the generator advance is philox_state's, which has no row and stays)
        if node.kind.startswith("aten::") or lookup(node.kind) is not None or node.kind in _PURE:
            block.remove(node)
            removed += 1
    return removed


def dce(graph: Graph) -> Graph:
    # A value returned by a nested block (e.g. a constant an If branch yields) is live even
    # though it has no use in a node's inputs.
    _dce_block(graph.block, _returned_values(graph.block, set()))
    return graph
