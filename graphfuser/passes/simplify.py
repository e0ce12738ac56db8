"""Fold ``prim::If`` nodes whose condition is a constant (the taken block is inlined), the
scalar comparisons of constants that such conditions are made of, and ``prim::unchecked_cast``
of a constant (what is left of an Optional argument once its ``is None`` test folded); turn
number assignments into slices back into ``fill_`` (``fill_numbers``).

``torch.nn.functional`` wrappers script to ``If(inplace) ... else ...`` around the op with a
constant flag; without this pass those Ifs would be barriers that keep each op in its own group.
"""
from __future__ import annotations

import operator

from ..ir.graph import Block, Graph
from ..log import jit_log


_SCALAR_OPS = {
    "aten::eq": operator.eq, "aten::ne": operator.ne, "aten::lt": operator.lt, "aten::le": operator.le,
    "aten::gt": operator.gt, "aten::ge": operator.ge, "aten::__not__": operator.not_,
    "aten::__and__": lambda a, b: a and b, "aten::__or__": lambda a, b: a or b,
    "aten::__is__": operator.is_, "aten::__isnot__": operator.is_not, "aten::neg": operator.neg,
}
_SCALAR_TYPES = ("int", "float", "bool", "NoneType")


def _fold_scalar(block: Block, node) -> bool:
    """Evaluate a comparison / logic op whose inputs are all scalar constants."""
    fn = _SCALAR_OPS.get(node.kind)
    if fn is None or len(node.outputs) != 1 or node.outputs[0].type.name not in ("bool", "int", "float"):
        return False
    if not all(v.is_constant and v.type.name in _SCALAR_TYPES for v in node.inputs):
        return False
    try:
        value = fn(*[v.constant() for v in node.inputs])
    except TypeError:  # e.g. ``None > 0`` in a branch that a folded ``is not None`` makes dead
        return False
    const = block.graph.create("prim::Constant", [], [node.outputs[0].type], {"value": value})
    block.insert_before(node, const)
    for user, i in list(node.outputs[0].uses):
        user.replace_input(i, const.output)
    block.replace_return_everywhere(node.outputs[0], const.output)
    block.remove(node)
    return True


# Prims that are the identity on their (single) input at run time.
_IDENTITY_PRIMS = ("prim::unchecked_cast",)


def _fold_identity_of_constant(block: Block, node) -> bool:
    """``prim::unchecked_cast(%c)`` of a constant (Optional refined after constant-If folding,
    as in ``F.softmax``'s ``dim``): uses read the constant, so op-table rows that need constant
    arguments see one."""
    if node.kind not in _IDENTITY_PRIMS or len(node.inputs) != 1 or len(node.outputs) != 1:
        return False
    src = node.inputs[0]
    if not src.is_constant or src.type.is_tensor:
        return False
    out = node.outputs[0]
    const = block.graph.create("prim::Constant", [], [out.type], {"value": src.constant()})
    block.insert_before(node, const)
    for user, i in list(out.uses):
        user.replace_input(i, const.output)
    block.replace_return_everywhere(out, const.output)
    block.remove(node)
    return True


def _fold_block(block: Block) -> int:
    folded = 0
    for node in list(block.nodes):
        for b in node.blocks:
            folded += _fold_block(b)
        if _fold_scalar(block, node) or _fold_identity_of_constant(block, node):
            folded += 1
            continue
        if node.kind != "prim::If" or not node.inputs[0].is_constant:
            continue
        cond = node.inputs[0].constant()
        if not isinstance(cond, bool):
            continue
        taken = node.blocks[0 if cond else 1]
        for inner in list(taken.nodes):
            taken.nodes.remove(inner)
            block.insert_before(node, inner)
        for out, ret in zip(node.outputs, taken.returns):
            for user, i in list(out.uses):
                user.replace_input(i, ret)
            block.replace_return_everywhere(out, ret)
        for b in node.blocks:
            _drop_all(b)
        block.remove(node)
        folded += 1
        jit_log("partition", 2, f"folded prim::If on constant {cond}")
    return folded


def _drop_all(block: Block) -> None:
    for inner in block.nodes:
        for b in inner.blocks:
            _drop_all(b)
        inner.drop_inputs()


def fold_constant_ifs(graph: Graph) -> Graph:
    """Fold scalar comparisons of constants and Ifs on constant conditions, to a fixed point."""
    while _fold_block(graph.block):
        pass
    return graph


_FILL = "aten::fill_.Scalar(Tensor(a!) self, Scalar value) -> Tensor(a!)"


def _number_copy(node) -> bool:
    """``aten::copy_(%dst, aten::tensor(%number, prim::dtype(%dst), %device, False))``: what
    TorchScript makes of ``t[...] = number``, where eager calls ``fill_``."""
    if node.kind != "aten::copy_" or len(node.inputs) < 2:
        return False
    src = node.inputs[1]
    made = src.node
    if made is None or made.kind != "aten::tensor" or len(made.inputs) != 4 or len(src.uses) != 1:
        return False
    value, dtype, _, grad = made.inputs
    if value.type.name not in ("int", "float", "bool") or not (grad.is_constant and grad.constant() is False):
        return False
    # the number becomes a tensor of the destination's dtype first: with that dtype, fill_ casts
    # (and raises on overflow) exactly as torch.tensor does
    return dtype.node is not None and dtype.node.kind == "prim::dtype" and dtype.node.inputs[0] is node.inputs[0]


def fill_numbers(graph: Graph) -> Graph:
    """Number assignments into slices (``mask[a:b, c:d] = count``) become ``fill_`` of the slice:
    one kernel instead of a scalar tensor and a copy (torchvision's Swin builds its attention
    mask from 9 such writes per shifted block, on every call)."""
    from ..ops.aten import resolve_aten

    for node in list(graph.all_nodes()):
        if not _number_copy(node):
            continue
        made = node.inputs[1].node
        fill = graph.create("aten::fill_", [node.inputs[0], made.inputs[0]], [node.outputs[0].type],
                            source=node.source)
        fill.schema = resolve_aten("aten::fill_", _FILL)
        block = node.owner
        block.insert_before(node, fill)
        out = node.outputs[0]
        for user, i in list(out.uses):
            user.replace_input(i, fill.output)
        block.replace_return_everywhere(out, fill.output)
        block.remove(node)
        made.owner.remove(made)
        jit_log("partition", 2, f"copy_ of a number became fill_ at {fill.source}")
    return graph
