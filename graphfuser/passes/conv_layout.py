"""Channels-last convolutions on CUDA: a layout plan, as torch.compile's layout optimization has.

cuDNN's fast convolutions are NHWC. Given NCHW activations and weights, torch runs them by
converting the input to NHWC and the output back, two extra passes per convolution (resnet50, fp32,
batch 64 on an H100: 39 nchwToNhwc and 24 nhwcToNchw kernels per call, 1.40 ms of 7.53 ms of
kernels; with the model and input in channels-last the call took 6.22 ms against 7.84). A
convolution whose weight is channels-last gives a channels-last output, and every fused group
after it follows its inputs' layout, so converting the weights is enough:

    %y = aten::conv2d(%x, %w, ...)    ->    %w2 = aten::contiguous(%w, 2)   (channels_last)
                                            %y = aten::conv2d(%x, %w2, ...)

``contiguous`` returns a weight already in channels-last as it is, and copies the others once per
call (25 M parameters for resnet50: about 0.07 ms of an H100's bandwidth); under grad it is
differentiable, and autograd gives each weight's ``.grad`` the weight's own layout.

When. After the first round of profiling (``plan_conv_layouts`` on the profiled graph), where:

- under grad too (training steps; ``PYTORCH_NVFUSER_DISABLE=conv_layout_training`` plans only
  without grad). Batch norm's statistics over N, H, W of a channels-last tensor are outer
  reductions (``codegen/reduction/schedule.py``), which combine every accumulator across the
  block's rows at once (``gf_block_reduce_y_k``). Measured on an H200, resnet50's training step
  (bf16 autocast, batch 32, SGD), kernels per step: 10.64 ms NCHW (1.31 ms of it cuDNN's
  ``nchwToNhwc`` and 0.51 ms ``nhwcToNchw`` conversions), 10.70 ms planned with a tree of
  barriers per accumulator, 9.05 ms planned with the batched combine;

- some ``conv2d`` runs on CUDA on a 4-D floating input with a weight not yet channels-last, and
  no convolution is grouped with more than one input channel per group (cuDNN's NHWC grouped
  kernels are slower: torch.compile skips its layout optimization there too);
- nothing can see the layout: no value computed from a convolution's output reaches an op that
  reads strides (``view``, ``stride``, ``is_contiguous``, ``as_strided``, ``data_ptr`` ...), an
  op outside ``aten`` / ``prim``, a call, a loop or a module attribute;
- every tensor the graph returns that was computed from a convolution's output had, in that
  round, a contiguous or channels-last layout: the plan ends with ``contiguous`` in that format
  before the return, so outputs keep eager's strides (a no-op for a classifier's logits).

The plan is then applied to a fresh copy of the graph and profiling starts again, so the groups
specialize on the layouts they will see. ``PYTORCH_NVFUSER_DISABLE=conv_layout`` turns it off.
Values only differ by the convolution algorithms' rounding.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from ..config import config
from ..ops.aten import resolve_aten
from ..ir.graph import Graph, Node, Value
from ..ir.types import TENSOR, TensorType, Type
from ..log import jit_log

DEVICES = ("cuda",)     # where convolutions get a plan (the tests add "cpu", where oneDNN has NHWC kernels too)
CONTIGUOUS_FORMAT, CHANNELS_LAST = 0, 2         # TorchScript's MemoryFormat enum values
_CONTIGUOUS = "aten::contiguous(Tensor(a) self, *, MemoryFormat memory_format=contiguous_format) -> Tensor(a)"
_LAYOUT_SENSITIVE = frozenset({
    "aten::view", "aten::view_as", "aten::_unsafe_view", "aten::stride", "aten::is_contiguous",
    "aten::as_strided", "aten::as_strided_", "aten::data_ptr", "aten::is_non_overlapping_and_dense",
    "aten::_reshape_alias", "aten::set_", "aten::storage_offset", "aten::unsafe_split",
    "prim::CallMethod", "prim::CallFunction", "prim::PythonOp", "prim::SetAttr", "prim::Loop",
    "prim::data", "prim::layout",
})


@dataclass(frozen=True)
class LayoutPlan:
    convs: tuple[int, ...]      # positions among the graph's conv2d nodes (all_nodes order)
    outputs: tuple[tuple[int, Optional[int], int], ...]   # (return, tuple element or None, memory format)


def _convs(g: Graph) -> list[Node]:
    return [n for n in g.all_nodes() if n.kind == "aten::conv2d"]


def _candidate(n: Node) -> Optional[bool]:
    """True: convert this conv's weight; False: leave it; None: no plan for the graph."""
    x, w = n.inputs[0].type, n.inputs[1].type
    if not isinstance(x, TensorType) or not isinstance(w, TensorType) or x.device is None \
            or x.device.type not in DEVICES or x.dtype is None or not x.dtype.is_floating_point:
        return False
    if w.sizes is None or len(w.sizes) != 4 or w.strides is None or x.rank != 4:
        return False
    groups = n.inputs[6].constant() if len(n.inputs) > 6 and n.inputs[6].is_constant else None
    if groups is None or (groups > 1 and w.sizes[1] > 1):
        return None
    meta = torch.empty_strided(w.sizes, w.strides, device="meta")
    return not meta.is_contiguous(memory_format=torch.channels_last)


def _carries_tensors(v: Value) -> bool:
    """Whether ``v`` may hold a tensor (sizes, numbers, strings and bools read off a tensor are the
    same in any layout; strides never get here: reading them is layout-sensitive)."""
    # (a container typed ``Any`` may hold them too: the torch.compile frontend's returned tuple)
    return v.type.is_tensor or "Tensor" in str(v.type) or str(v.type) == "Any"


def _tainted(g: Graph, starts: list[Value], resets: frozenset = frozenset()) -> \
        tuple[Optional[set[Value]], Optional[Node]]:
    """Every value that may hold a tensor computed from ``starts`` (through any node, into and out
    of ``If`` blocks), or (None, the node) where one reaches an op that can see its layout.
    ``resets``: ops whose first result is dense whatever their inputs' layouts (it stays clean)."""
    taint = set(starts)
    for _ in range(8):
        before = len(taint)
        for n in g.all_nodes():
            if any(i in taint for i in n.inputs):
                if n.kind in _LAYOUT_SENSITIVE or n.kind.split("::")[0] not in ("aten", "prim"):
                    return None, n
                outs = n.outputs[1:] if n.kind in resets else n.outputs
                taint.update(o for o in outs if _carries_tensors(o))
            for b in n.blocks:
                for k, r in enumerate(b.returns):
                    if r in taint and k < len(n.outputs):
                        taint.add(n.outputs[k])
        if len(taint) == before:
            return taint, None
    return None, None


def _format(t: Type) -> Optional[int]:
    """The memory format ``contiguous`` restores a profiled output's strides with, or None."""
    if not isinstance(t, TensorType) or t.sizes is None or t.strides is None or None in t.sizes:
        return None
    meta = torch.empty_strided(t.sizes, t.strides, device="meta")
    if meta.is_contiguous():
        return CONTIGUOUS_FORMAT
    if len(t.sizes) == 4 and meta.is_contiguous(memory_format=torch.channels_last):
        return CHANNELS_LAST
    return None


def plan_conv_layouts(g: Graph) -> Optional[LayoutPlan]:
    """The layout plan of the profiled graph ``g`` (see the module docstring), or None."""
    if config.is_disabled("conv_layout"):
        return None
    convs = _convs(g)
    if torch.is_grad_enabled() and config.is_disabled("conv_layout_training") and \
            any(isinstance(v.type, TensorType) and v.type.requires_grad for n in convs for v in n.inputs[:2]):
        jit_log("graph_fuser", 2, "no channels-last plan: the convolutions run under grad")
        return None
    chosen = []
    for k, n in enumerate(convs):
        c = _candidate(n)
        if c is None:
            jit_log("graph_fuser", 2, f"no channels-last plan: {n.where()} is a grouped convolution")
            return None
        if c:
            chosen.append(k)
    if not chosen:
        return None
    taint, seer = _tainted(g, [o for n in convs for o in n.outputs])
    if taint is None:
        where = f" ({seer.kind} at {seer.where()})" if seer is not None else ""
        jit_log("graph_fuser", 2, f"no channels-last plan: a convolution's result reaches an op that reads its layout{where}")
        return None
    outputs = _returned_formats(g, taint)
    return LayoutPlan(tuple(chosen), tuple(outputs)) if outputs is not None else None


def _returned_formats(g: Graph, taint: set[Value]) -> Optional[list[tuple[int, Optional[int], int]]]:
    """(return, tuple element or None, memory format) of every tensor ``g`` returns among
    ``taint``, with the format ``contiguous`` gives it its profiled layout back; None where one
    has a layout it cannot restore (or is in a container the plan cannot reach)."""
    outputs = []
    for i, r in enumerate(g.block.returns):
        if r not in taint:
            continue
        if isinstance(r.type, TensorType):
            items = [(None, r)]
        elif r.node is not None and r.node.kind == "prim::TupleConstruct":
            items = [(j, v) for j, v in enumerate(r.node.inputs) if v in taint]
        elif r.type.is_tensor:
            return None
        else:
            items = []      # (a number or a size list: the same in any layout)
            if r.node is not None and r.node.kind in ("prim::ListConstruct", "prim::DictConstruct"):
                return None
        for j, v in items:
            if not isinstance(v.type, TensorType):
                if v.type.is_tensor:
                    return None
                continue
            fmt = _format(v.type)
            if fmt is None:
                return None
            outputs.append((i, j, fmt))
    return outputs


def _contiguous(g: Graph, v: Value, fmt: int, before: Optional[Node] = None, after: Optional[Node] = None) -> Value:
    """``aten::contiguous(v, fmt)`` inserted before ``before`` or after ``after`` (appended to the
    graph without either)."""
    anchor = before or after
    block = anchor.owner if anchor is not None else g.block
    c = g.create("prim::Constant", [], [Type("int")], {"value": fmt})
    node = g.create("aten::contiguous", [v, c.output], [TENSOR], source=anchor.source if anchor else None)
    node.schema = resolve_aten("aten::contiguous", _CONTIGUOUS)
    if after is not None:
        block.insert_after(after, node)
        block.insert_after(after, c)
    else:
        for x in (c, node):
            block.insert_before(before, x) if before is not None else block.append(x)
    return node.output


def restore_outputs(g: Graph, outputs: tuple[tuple[int, Optional[int], int], ...]) -> None:
    """``contiguous`` in each planned format before the graph returns (``_returned_formats``)."""
    for i, j, fmt in outputs:
        r = g.block.returns[i]
        if j is None:
            new = _contiguous(g, r, fmt)
            g.block.returns = [new if k == i else x for k, x in enumerate(g.block.returns)]
        else:
            tup = r.node
            tup.replace_input(j, _contiguous(g, tup.inputs[j], fmt, tup))


def apply_conv_layouts(g: Graph, plan: LayoutPlan) -> None:
    """Rewrite the unprofiled graph ``g`` (the one ``plan`` was made from, freshly cloned)."""
    convs = _convs(g)
    for k in plan.convs:
        n = convs[k]
        n.replace_input(1, _contiguous(g, n.inputs[1], CHANNELS_LAST, n))
    restore_outputs(g, plan.outputs)
    jit_log("graph_fuser", 1, f"channels-last plan: {len(plan.convs)} convolution weight(s) converted, "
                              f"{len(plan.outputs)} output(s) given back their profiled layout")
