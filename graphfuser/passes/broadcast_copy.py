"""Copies of broadcast views as fused kernels (after profiling, before the partition)::

    %e = aten::expand(%x, [B, Hkv, n, S, D])                %e = aten::expand(%x, ...)
    %r = aten::reshape(%e, [B, Hkv * n, S, D])     ->       %c = graphfuser::dense_copy(%x, %e)
                                                            %r = aten::reshape(%c, [...])

Why. Grouped-query attention repeats each key / value head for the query heads that share it
(Hugging Face's ``repeat_kv``: ``x[:, :, None].expand(B, Hkv, n, S, D).reshape(B, Hkv * n, S,
D)``). The reshape cannot view a stride-0 dim merged with a strided one, so it copies, and
eager's copy of a stride-0 view takes TensorIterator's scalar path: a Llama (16 query heads, 4
key / value heads, 8 x 512 tokens, bf16) ran 16 of them a call at 13.8 us each, 0.22 ms of its
2.9 ms of kernels, on an H200 (``logs/prof-race-row-cuda-H200-llama-gpt2-infer.txt``), where
Inductor writes the repeated heads from its rotary kernel. ``dense_copy(x, e)`` is the copy as
a row of the op table: one generated kernel that reads ``x`` with its size-1 dims broadcast to
the view's sizes (16-byte vectors along a contiguous head dim; the view itself is read for its
sizes only) and writes the dense result, which the reshape then views.

When. A reshape or flatten whose input is an ``expand`` result with a stride-0 dim of more than
one element and whose profiled result is dense and contiguous, where no view of the profiled
expanded layout has the result's sizes (the reshape copied). The group's guard then holds only
for layouts whose reshape copies (a view needs a size-1 dim beside the stride-0 one, which the
guard's broadcast dims tell apart); where it misses, ``dense_copy`` unfused is the view itself
and the reshape views or copies as eager's does. Whatever the size: the fused copy takes the
place of eager's, one kernel for one.
``PYTORCH_NVFUSER_DISABLE=broadcast_copies`` leaves the reshape to eager.
"""
from __future__ import annotations

import dataclasses

import torch

from ..config import config
from ..ir.graph import Graph, Node
from ..ir.types import TensorType
from ..log import jit_log
from ..ops import dense_contiguous

_RESHAPES = ("aten::reshape", "aten::flatten")


def _copies(t, out) -> bool:
    """Whether reshaping a tensor of profiled type ``t`` to the profiled ``out`` copied a stride-0
    view: ``t`` has a stride-0 dim of more than one element, ``out`` is dense and contiguous, and
    no view of ``t``'s layout has ``out``'s sizes (an empty tensor, or a size-1 dim merged with
    the stride-0 one, views: the reshape then stays eager's)."""
    if not isinstance(t, TensorType) or not isinstance(out, TensorType):
        return False
    if not t.complete or t.sizes is None or t.strides is None or any(s < 0 for s in t.sizes):
        return False
    if not any(st == 0 and s > 1 for s, st in zip(t.sizes, t.strides)) or not dense_contiguous(out):
        return False
    try:
        torch.empty_strided(t.sizes, t.strides, device="meta").view(out.sizes)
    except RuntimeError:
        return True
    return False


def _dense_type(t: TensorType) -> TensorType:
    """``t``'s sizes, dtype and device, contiguous."""
    meta = torch.empty(t.sizes, dtype=t.dtype, device="meta")
    return dataclasses.replace(TensorType.of(meta), device=t.device, requires_grad=t.requires_grad)


def materialize_broadcasts(graph: Graph) -> int:
    """Copy the expanded inputs of copying reshapes with ``graphfuser::dense_copy`` (in place);
    returns how many."""
    # copies a previous round made: profiled again, their type is the view's (unfused, a copy
    # is the view itself); kept where every reshape of it still copied, else the reshapes read
    # the view again
    for node in list(graph.all_nodes()):
        if node.kind != "graphfuser::dense_copy":
            continue
        like = node.inputs[1]
        if not config.is_disabled("broadcast_copies") and node.output.uses and all(
                u.kind in _RESHAPES and i == 0 and _copies(like.type, u.output.type) for u, i in node.output.uses):
            node.output.type = _dense_type(like.type)
            continue
        for u, i in list(node.output.uses):
            u.replace_input(i, like)
        node.owner.replace_return_everywhere(node.output, like)
        node.owner.remove(node)
    if config.is_disabled("broadcast_copies"):
        return 0
    done = 0
    for node in list(graph.all_nodes()):
        if node.kind not in _RESHAPES or not node.inputs or node.inputs[0].node is None:
            continue
        src = node.inputs[0]
        if src.node.kind != "aten::expand" or not _copies(src.type, node.output.type):
            continue
        # the expand's input (size-1 dims where the view broadcasts) is what the kernel reads;
        # the view only sizes it
        copy = graph.create("graphfuser::dense_copy", [src.node.inputs[0], src], [_dense_type(src.type)],
                            source=node.source)
        node.owner.insert_before(node, copy)
        node.replace_input(0, copy.output)
        done += 1
        jit_log("graph_fuser", 2, f"dense copy of the broadcast view read by {node.where()}")
    return done
