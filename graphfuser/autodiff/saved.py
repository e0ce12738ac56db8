"""Forward values a differentiable group saves for its backward: the exceptions to the rule of
``backward.py`` (save the inputs, recompute every intermediate), training batch norm's and layer
norm's statistics and reductions over long rows (``_long_reduction``: saved as they are, and
the backward takes them in place of recomputing their nodes).

Recomputing a value costs arithmetic when it is a pointwise function of what the backward
reads anyway. A training batch norm's statistics are not: rebuilding a few numbers per channel
reads the whole input once more (a pass over N * H * W elements per channel, past any cache),
while saving them costs the forward one store of C numbers each. Its backward then reads the
input twice (the gradient sums, then dx) where it read it three times (the statistics first),
as eager's ``native_batch_norm_backward`` does from its saved mean and invstd.

``save_statistics`` rewrites such a node of a group that will run as an autograd node into
``graphfuser::batch_norm_train``, whose outputs are the normalized tensor and its statistics
(shift, offset, rstd: ``y = ((x - shift) - offset) * rstd * w + b``, see ``ops/norms.py``),
in a copy of the group's subgraph that appends the statistics to its outputs. The autograd node returns the group's own
outputs, saves the appended ones, and hands them to the backward graph (``plan_backward``'s
``saved``), which rebuilds ``y`` pointwise from them instead of reducing again. The offset is
saved with the shift rather than folded into a mean: ``(x - shift) - offset`` is the deviation
without the rounding of a mean near 1e4 with a 1e-2 spread (``shifted_moments``), and the
backward's deviations are then those of the forward, bit for bit.

A layer norm's are saved the same way (``graphfuser::layer_norm_train``, 3 numbers a row). Its
backward reduces each row anyway (the gradient's two means), so rebuilding the statistics cost no
pass over memory, but it cost three more reductions a row before the gradient's (a variance, a
mean, a re-centring), each a combine across the block: the backward of a bf16 layer norm over 384
columns (one chunk of 8 a thread) combined 4 times a row in 89 registers, and with the forward's
statistics once in 58 (ptxas for sm_90). vit_small's training step ran the rebuilding kernel at
25.3 us a call on an H200, where Inductor's dx kernel, which reads eager's saved mean and rstd,
took 9.7. The gradient then uses the forward's own deviations, shifted by the row's first
element: a float32 row of mean 1e4 and spread 1e-2 got dx within 1e-7 of float64's, where eager's
and the rebuilt statistics' were 30% off (``tests/autodiff/test_layer_norm_statistics.py``).
``PYTORCH_NVFUSER_DISABLE=layer_norm_statistics`` rebuilds them in the backward.
"""
from __future__ import annotations

import math

import torch

from ..config import config
from ..ir.clone import clone_graph
from ..ir.graph import Node
from ..ir.types import TensorType, layout_of
from ..ops import lookup
from ..ops.norms import norm_len
from ..ops.reduction import ReductionRow

_HALF = (torch.float16, torch.bfloat16)


def save_statistics(group: Node) -> tuple[Node, int]:
    """``(forward, saved)``: ``group`` itself and 0, or (when an input requires grad and the group
    has training batch norms or long-row reductions) a detached copy of ``group`` whose subgraph
    computes the same outputs and appends ``saved`` statistics after them. The graph keeps
    ``group`` as it is; the copy is what compiles and what the autograd node's forward runs."""
    sub = group.subgraph
    if not any(v.type.is_tensor and getattr(v.type, "requires_grad", None) for v in sub.inputs) or \
            not any(_statistics_node(n) or _long_reduction(n) or _layer_norm_node(n) for n in sub.block.nodes):
        return group, 0
    copy = clone_graph(sub)
    if hasattr(sub, "writes_into"):             # (passes/in_place.py: the statistics are appended after)
        copy.writes_into = sub.writes_into
    # what profiling saw of non-tensor values (reductions' dims, eps) is not part of a clone
    for a, b in zip(sub.inputs, copy.inputs):
        b.profiled = a.profiled
    for na, nb in zip(sub.block.nodes, copy.block.nodes):
        for a, b in zip(na.outputs, nb.outputs):
            b.profiled = a.profiled
    added = sum(_rewrite(copy, n) for n in list(copy.block.nodes) if _statistics_node(n))
    added += sum(_rewrite_layer_norm(copy, n) for n in list(copy.block.nodes) if _layer_norm_node(n))
    kept = [n.output for n in copy.block.nodes if _long_reduction(n) and n.output not in copy.block.returns]
    copy.block.returns = list(copy.block.returns) + kept
    added += len(kept)
    shadow = Node(group.kind, dict(group.attrs), group.source)
    shadow.subgraph = copy
    return shadow, added


def _const(v, default=None):
    return v.constant() if v.is_constant else default


def _statistics_node(n: Node) -> bool:
    """A training batch norm without running stats (the update is split off before fusion,
    ``passes/batch_norm.py``) over an input of known rank."""
    if n.kind != "aten::batch_norm" or len(n.inputs) != 9:
        return False
    x, rm, rv, training, eps = n.inputs[0], n.inputs[3], n.inputs[4], n.inputs[5], n.inputs[7]
    t = x.type
    return (_const(training) is True and rm.is_constant and _const(rm) is None and rv.is_constant
            and _const(rv) is None and eps.is_constant and isinstance(t, TensorType) and t.sizes is not None
            and len(t.sizes) >= 2 and t.dtype is not None)


# Reductions whose rows are longer than this (elements per result) are saved, not recomputed:
# past what a persistent kernel holds in registers (``codegen/reduction/schedule.py``: 4 chunks of
# 8 bf16 lanes for 512 threads), each recomputation is another pass over the row in memory.
LONG_ROW = 16384


def _long_reduction(n: Node) -> bool:
    """A row's max or sum of exponentials (``amax`` / ``max`` / ``logsumexp``, or ``sum`` of an
    ``exp``) over a tensor of known sizes whose rows are longer than ``LONG_ROW``, with a small
    result: a cross entropy's over a vocabulary (``frontend/fx_losses.py``), whose backward is
    pointwise once they are known, so that recomputing them is a pass over the row of its own
    (GPT-2's logits: 412 MB). Other reductions are recomputed: a backward that reduces the row
    anyway (RMSNorm's) rebuilds them in the same pass, and a saved ``mean`` left
    its divisor to a count of the row's elements in a group of its own (a 300 x 20000 RMSNorm's
    backward went from one kernel to four)."""
    row = lookup(n.kind)
    if not isinstance(row, ReductionRow) or row.kind != "reduction" or len(n.outputs) != 1 or not n.inputs:
        return False
    src = n.inputs[0].node
    if n.kind not in ("aten::amax", "aten::max", "aten::logsumexp") and not (
            n.kind == "aten::sum" and src is not None and src.kind == "aten::exp"):
        return False
    x, y = n.inputs[0].type, n.output.type
    if not (isinstance(x, TensorType) and isinstance(y, TensorType) and x.sizes is not None and y.sizes is not None
            and y.dtype is not None and y.dtype.is_floating_point):
        return False
    out = math.prod(y.sizes)
    return out > 0 and math.prod(x.sizes) // out > LONG_ROW


def _rewrite(sub, n: Node) -> int:
    x = n.inputs[0].type
    sizes = tuple(s if d == 1 else 1 for d, s in enumerate(x.sizes))
    strides = tuple(1 if d >= 1 else sizes[1] for d in range(len(sizes)))
    order, contig = layout_of(sizes, strides)
    # float64 for float32 on the CPU: the dtype the statistics accumulate in there (ops/norms.py's
    # _batch_stats_acc), so that the backward rebuilds the forward's deviations exactly
    cpu32 = x.dtype == torch.float32 and x.device is not None and x.device.type == "cpu"
    stat = TensorType(dtype=torch.float32 if x.dtype in _HALF else torch.float64 if cpu32 else x.dtype,
                      sizes=sizes, strides=strides,
                      stride_order=order, contiguity=contig, device=x.device, requires_grad=False)
    return _with_statistics(sub, n, "graphfuser::batch_norm_train", [n.inputs[i] for i in (0, 1, 2, 7)], stat)


def _with_statistics(sub, n: Node, kind: str, inputs: list, stat: TensorType) -> int:
    """Replace ``n`` by ``kind`` (its output, then shift, offset and rstd of type ``stat``),
    the statistics appended to the subgraph's outputs; returns how many (3)."""
    new = sub.create(kind, inputs, [n.output.type, stat, stat, stat], source=n.source)
    sub.block.insert_before(n, new)
    y = new.outputs[0]
    for user, i in list(n.output.uses):
        user.replace_input(i, y)
    sub.block.replace_return_everywhere(n.output, y)
    sub.block.remove(n)
    sub.block.returns = list(sub.block.returns) + new.outputs[1:]
    return 3


def _layer_norm_node(n: Node) -> bool:
    """A layer norm over an input of known sizes and dtype whose normalized dims and eps are
    constants (``PYTORCH_NVFUSER_DISABLE=layer_norm_statistics``: none)."""
    if n.kind != "aten::layer_norm" or len(n.inputs) != 6 or config.is_disabled("layer_norm_statistics"):
        return False
    x, ns, eps = n.inputs[0].type, n.inputs[1], n.inputs[4]
    k = norm_len(ns)
    return (k is not None and eps.is_constant and isinstance(x, TensorType) and x.sizes is not None
            and 0 < k <= len(x.sizes) and x.dtype is not None and x.dtype.is_floating_point)


def _rewrite_layer_norm(sub, n: Node) -> int:
    """``aten::layer_norm`` -> ``graphfuser::layer_norm_train`` (the same output, and the row
    statistics appended to the group's outputs): 3 saved values."""
    x = n.inputs[0].type
    k = norm_len(n.inputs[1])
    sizes = tuple(s if d < len(x.sizes) - k else 1 for d, s in enumerate(x.sizes))
    # contiguous; a symbolic size (-1: it changed between profiling runs) leaves the strides of
    # the dims before it symbolic too
    stand = tuple(2 if s < 0 else s for s in sizes)
    order, contig = layout_of(stand, tuple(torch.empty(stand, device="meta").stride()))
    strides = tuple(-1 if any(e < 0 for e in sizes[d + 1:]) else math.prod(sizes[d + 1:]) for d in range(len(sizes)))
    # the statistics' dtype: the layer norm's compute dtype (ops/norms.py _layer_norm_train)
    stat = TensorType(dtype=torch.float32 if x.dtype in _HALF else x.dtype, sizes=sizes, strides=strides,
                      stride_order=order, contiguity=contig, device=x.device, requires_grad=False)
    return _with_statistics(sub, n, "graphfuser::layer_norm_train", [n.inputs[i] for i in (0, 1, 2, 3, 4)], stat)
