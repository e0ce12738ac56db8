"""Unbind under grad with its gradient in its input's layout (after profiling)::

    %qkv = aten::permute(%r, [2, 0, 3, 1, 4])            %qkv = aten::permute(%r, [2, 0, 3, 1, 4])
    %l   = aten::unbind(%qkv, 0)                  ->     %l   = graphfuser::dense_unbind(%qkv, 0)

Why. A fused qkv projection's heads (timm's ``Attention``: ``qkv(x).reshape(B, N, 3, H,
D).permute(2, 0, 3, 1, 4).unbind(0)``) come apart with ``unbind``. Its backward in eager stacks
the three gradients into a contiguous ``[3, B, H, N, D]`` tensor; the permute's backward views
that as ``[B, N, 3, H, D]`` strided, and the reshape back to the projection's ``[B, N, 3C]``
copies it. vit_small's training step (bf16 autocast, batch 32, an H200) spent 0.36 ms a step in
the stacks and 0.29 ms in the copies after them, where Inductor writes the projection's gradient
in one kernel (0.08 ms; ``logs/prof-race-row-cuda-H200-vit-train-s58.txt``). ``dense_unbind``
allocates the gradient of its input with the input's own strides (a permuted view of a dense
tensor) and copies each piece's gradient into its place: the permute's backward then views a
dense ``[B, N, 3, H, D]`` and the reshape's backward views it too. Three copies of a third each
instead of two copies of the whole. The values are the same copies of the same numbers.

When. ``aten::unbind`` whose input requires grad in the profiled call, whose pieces leave only
through list indexing or unpacking, and which no in-place op writes (a custom autograd function's
view outputs cannot be written in place). ``PYTORCH_NVFUSER_DISABLE=dense_unbind`` turns it off.
"""
from __future__ import annotations

import operator
from typing import Optional

from ..config import config
from ..ir.graph import Graph, Node
from ..ir.types import TensorType
from ..log import jit_log
from ..ops.aten import resolve_aten
from .aliasing import AliasSets

DENSE_UNBIND = "graphfuser::dense_unbind(Tensor(a -> *) self, int dim=0) -> Tensor(a)[]"
_READERS = ("prim::ListUnpack", "aten::__getitem__", "prim::PythonOp")


def _takes(node: Node) -> bool:
    """Whether ``node``'s result list is only indexed or unpacked (an FX graph's
    ``operator.getitem``, TorchScript's ``ListUnpack`` / ``__getitem__``), never returned or kept."""
    out = node.output
    if out.returned() or not out.uses:
        return False
    for user, i in out.uses:
        if user.kind not in _READERS or i != 0:
            return False
        if user.kind == "prim::PythonOp" and getattr(user.attrs.get("call"), "fn", None) is not operator.getitem:
            return False
    return True


def dense_unbinds(graph: Graph) -> int:
    """Rewrite the ``unbind`` nodes whose input requires grad (in place); returns how many."""
    if config.is_disabled("dense_unbind"):
        return 0
    sets: Optional[AliasSets] = None
    done = 0
    for node in list(graph.all_nodes()):
        if node.kind != "aten::unbind" or len(node.inputs) != 2 or len(node.outputs) != 1:
            continue
        x = node.inputs[0]
        if not isinstance(x.type, TensorType) or not x.type.requires_grad or not _takes(node):
            continue
        sets = sets or AliasSets(graph)
        if sets.is_written(x):
            jit_log("graph_fuser", 2, f"unbind at {node.where()} stays: its input or a piece is written in place")
            continue
        node.kind = "graphfuser::dense_unbind"
        node.schema = resolve_aten("graphfuser::dense_unbind", DENSE_UNBIND)
        done += 1
    if done:
        jit_log("graph_fuser", 1, f"{done} unbind(s) under grad take their gradient in their input's layout "
                                  f"(passes/unbind_grad.py)")
    return done
