"""Reads that need only a value's shape or element count, pointed at the earliest value that has
it, before partition: a fused value read only for its shape (``size()`` / ``dim()`` /
``numel()``, the seeds' rule) or for its element count (``graphfuser::philox_state``) then need
not be a group output, and the random op and its input's producer can share a group."""
from __future__ import annotations

from ..ir.graph import Graph, Value
from ..ir.types import TensorType
from ..log import jit_log
from ..ops import lookup
from ..ops.axes import dtype_only


_SHAPE_USES = ("aten::size", "aten::dim", "aten::numel")


def _shape_source(v: Value) -> Value:
    """The earliest value known to have ``v``'s shape on every input: walk back through
    elementwise ops with a single tensor data argument (unary pointwise ops, casts), whose output
    shape is their input's shape whatever the sizes, and through single-output normalizations
    (batch / layer / group norm, softmax), whose output has their first input's shape. Stopping
    at a normalization would leave the shape read on a value in the middle of a group
    (``bn -> hardswish_ -> x.shape``: the batch norm's output), written out as an extra group
    output for nothing but its sizes."""
    path: set = set()     # the nodes walked through
    live = False          # is ``v`` computed anyway (read by more than shape reads and the path)?
    while v.node is not None:
        row = lookup(v.node.kind)
        if row is None or row.kind not in ("pointwise", "cast", "normalization") or len(v.node.outputs) != 1:
            break
        live = live or any(u.kind not in _SHAPE_USES and u not in path for u, _ in v.uses)
        if row.kind == "normalization":
            if not live:
                # read only for its shape, the normalization would be dropped, and with it the
                # shape checks eager makes (normalized_shape against the input's trailing dims)
                break
            tensors = v.node.inputs[:1]
        else:
            skip = dtype_only([v.node])
            tensors = [i for i in v.node.inputs if i.type.is_tensor and i not in skip]
        if len(tensors) != 1 or not isinstance(tensors[0].type, TensorType) or tensors[0].type.rank != v.type.rank:
            break
        path.add(v.node)
        v = tensors[0]
    return v


def read_shapes_from_sources(graph: Graph) -> int:
    """Point ``size()`` / ``dim()`` / ``numel()`` of a value at the value its shape comes from, so
    a fused value read only for its shape need not be a group output (the seeds' rule)."""
    moved = 0
    for node in list(graph.all_nodes()):
        if node.kind not in _SHAPE_USES or not node.inputs:
            continue
        src = _shape_source(node.inputs[0])
        if src is not node.inputs[0]:
            jit_log("partition", 2, f"{node.where()} reads the shape of %{src.name} instead of %{node.inputs[0].name}")
            node.replace_input(0, src)
            moved += 1
    return moved


def _count_source(v: Value) -> Value:
    """For ``graphfuser::philox_state``, which reads only a tensor's device and element count: the
    earliest value of ``v``'s profiled sizes reached back through op-table rows (pointwise ops,
    casts, and normalizations such as softmax, whose output has its input's sizes), so the random
    op and what produces its input can share a group. The count sizes the generator's advance
    only (streams of different calls are disjoint by offset whatever the count)."""
    while v.node is not None and isinstance(v.type, TensorType) and v.type.complete:
        row = lookup(v.node.kind)
        if row is None:
            break
        same = [i for i in v.node.inputs if isinstance(i.type, TensorType) and i.type.complete
                and i.type.sizes == v.type.sizes and i.type.device == v.type.device]
        if not same:
            break
        v = same[0]
    return v


def read_counts_from_sources(graph: Graph) -> None:
    """Point each ``philox_state`` at its count source and move it right after that value's
    definition, so that its (seed, offset) exist before the ops it reads from are grouped."""
    for node in list(graph.all_nodes()):
        if node.kind != "graphfuser::philox_state":
            continue
        src = _count_source(node.inputs[0])
        if src is node.inputs[0]:
            continue
        node.replace_input(0, src)
        block = node.owner
        block.nodes.remove(node)
        if src.node is not None and src.node.owner is block:
            block.nodes.insert(block.nodes.index(src.node) + 1, node)
        else:
            block.nodes.insert(0, node)
