"""Groups that are not worth making: one op alone, or one op under grad that eager
differentiates as one node (the partition drops them, ``partition._BlockPartition.run``)."""
from __future__ import annotations

from typing import Optional

from ..ir.graph import Node
from ..ir.types import TensorType
from ..ops import lookup


def composite(node: Node) -> bool:
    """Normalizations (softmax, layer_norm ...) are several kernels' worth of work on their own;
    a random row's unfused form draws its Philox numbers with a chain of torch ops (ops/philox.py),
    so a lone dropout (e.g. dropout's backward) is one kernel instead of dozens; a dense copy of a
    broadcast view (passes/broadcast_copy.py) is one vectorized kernel where eager's is scalar."""
    from ..ops.random import RANDOM_ROWS

    row = lookup(node.kind)
    return row is not None and (row.kind == "normalization" or row.name in RANDOM_ROWS or row.name == "dense_copy")


# Normalizations that eager runs as one native op forward and one autograd node backward
# (native_layer_norm / native_layer_norm_backward, _softmax / _softmax_backward_data, ...). Alone
# under grad, their group launches as many kernels as eager does (the CUDA backward of a layer
# norm: one kernel plus the one that adds its column partials, against eager's two), and
# pays what eager does not: the autograd Function, the saved inputs, the backward's host program
# and guards. Measured on the CPU (one thread, [2, 8, 8, 8] fp32): a lone layer_norm forward +
# backward took 43 us of host time fused against 15 us eager. Lone rows that eager computes as
# several ops (rms_norm, instance_norm) or a random row (dropout) still fuse; so does every lone
# normalization without grad, and one with a neighbour (a cast, a residual add) in its group.
_ONE_NODE_UNDER_GRAD = frozenset({"layer_norm", "native_layer_norm", "softmax", "log_softmax", "_softmax",
                                  "_log_softmax", "batch_norm", "group_norm"})


def lone_under_grad(node: Node) -> bool:
    """Whether ``node``, alone in its group, is a normalization that eager differentiates as one
    node and that was profiled with an input requiring grad."""
    row = lookup(node.kind)
    if row is None or row.name not in _ONE_NODE_UNDER_GRAD:
        return False
    return any(isinstance(v.type, TensorType) and v.type.requires_grad for v in node.inputs)


def one_op_under_grad(mem: list[Node]) -> Optional[Node]:
    """The one op of a group under grad whose other members compute nothing (casts to the dtype
    their input has, as autocast inserts around a bf16 GELU or an fp32 layer norm, and list
    constructions), when that op alone would not be worth a group: a pointwise op, or a
    normalization eager differentiates as one node (``lone_under_grad``). Measured on an H100
    (vit_small, bf16 autocast, batch 64): such a GELU's group cost about 25 us of host time in
    the backward, on top of its autograd node's, where eager's GeluBackward is one C++ node."""
    ops = [n for n in mem if not computes_nothing(n)]
    if len(ops) != 1 or not any(isinstance(v.type, TensorType) and v.type.requires_grad
                                for n in mem for v in n.inputs):
        return None
    op = ops[0]
    if len(mem) == 1:
        return op if lone_under_grad(op) else None
    return op if not composite(op) or lone_under_grad(op) else None


def computes_nothing(node: Node) -> bool:
    if node.kind == "prim::ListConstruct":
        return True
    row = lookup(node.kind)
    if row is None or row.kind != "cast" or not node.inputs or not node.outputs:
        return False
    a, b = node.inputs[0].type, node.outputs[0].type
    return isinstance(a, TensorType) and isinstance(b, TensorType) and a.dtype is not None and a.dtype == b.dtype
