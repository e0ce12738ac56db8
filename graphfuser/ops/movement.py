"""Movement rows: ops that compute nothing but read their input at other indices.

``flip(x, dims)`` is the one row: element ``i`` of the result is ``x`` at ``size - 1 - i`` along
each flipped dim. In a pointwise kernel that is an index remap, not a computation: the lowering
(``codegen/lower.py``) reads a flipped group input through a pointer to its last element along
those dims and negated strides, and a flipped intermediate by evaluating its producers again
with their own inputs read flipped (pointwise ops commute with any remap of their indices). So
a flip costs no kernel and no memory traffic of its own; eager's ``flip`` is a copy.

The rotary rewrite writes the rotated half of a rotary embedding as a flip of the size-2 dim of
``x.unflatten(-1, [2, h])`` (``passes/rotary.py``), whose gradient is a flip of the gradient:
forward and backward each one kernel, where a ``roll`` was a kernel of its own each way.

A flip joins pointwise groups only (``movement_misfit``): a reduction kernel's loads address the
reduced axes through their own index plan, and a random row keys its numbers on its output's
linear index, which a re-evaluation at a flipped index would not move.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch

from ..ir.graph import Node
from .table import OpCall, OpRow, register

MOVEMENT = "movement"


def _not_per_element(call: OpCall):
    """(never called: ``codegen/lower.py`` lowers movement rows as index remaps and refuses them
    as per-element expressions)"""
    raise NotImplementedError("flip re-indexes its input: it has no per-element expression")


def _enabled(consts, parts) -> Optional[str]:
    from ..config import config

    return "flip fusion is disabled (PYTORCH_NVFUSER_DISABLE=flip_fusion)" \
        if config.is_disabled("flip_fusion") else None


register(OpRow("flip", ("aten::flip",), MOVEMENT, ("self", "dims"), "none", ("self",), consts=("dims",),
               decomp=_not_per_element, eager=torch.flip, check=_enabled,
               doc="self read at size - 1 - i along each of dims (an index remap in the kernel)"))


def flip_dims(node: Node) -> list[int]:
    """The flipped dims of a ``flip`` node, non-negative, in its input's numbering (size-1 dims
    included: flipping them is the identity)."""
    rank = node.inputs[0].type.rank
    dims = node.inputs[1].constant() if node.inputs[1].is_constant else \
        [v.constant() for v in node.inputs[1].node.inputs]
    return sorted({d % rank for d in dims}) if rank else []


def movement_misfit(nodes: Sequence[Node]) -> Optional[str]:
    """Why ``nodes`` cannot share one kernel because of a flip among them, or None."""
    from . import lookup
    from .axes import needs_axes
    from .random import RANDOM_ROWS

    if not any(getattr(lookup(n.kind), "kind", None) == MOVEMENT for n in nodes):
        return None
    if needs_axes(list(nodes)):
        return "a flip re-indexes its loads, which only a pointwise kernel does"
    if any(getattr(lookup(n.kind), "name", None) in RANDOM_ROWS for n in nodes):
        return "a flip beside a random row: the numbers are keyed on the unflipped linear index"
    return None
