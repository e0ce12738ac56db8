"""Rows made dense before they are normalized: a layout plan for permuted activations.

Audio and sequence models turn a convolution's ``[N, C, T]`` output into ``[N, T, C]`` with a
``permute`` and then normalize over ``C`` (Whisper's encoder, wav2vec2's feature projection).
In eager every pointwise op after the permute keeps its input's layout, so the residual stream of
the whole encoder has strides ``(T*C, 1, T)``: each row a layer norm reduces is strided by ``T``,
and each ``linear`` that reads the stream copies it to a dense buffer first. Measured on an H200
(Whisper with 4 encoder layers, bf16 autocast, batch 8): the fused add + layer norm kernels over
the strided rows took 93-113 us each; over dense rows, 9 us. The call's kernels went from 3.22
to 2.37 ms (``logs/prof-race-row-cuda-H200-*whisper*``). Inductor picks the layout of every
intermediate it computes and writes them dense.

The plan makes the permuted value dense where it is made:

    %p = aten::permute(%conv, [0, 2, 1])   ->   %p0 = aten::permute(%conv, [0, 2, 1])
                                                 %p = aten::contiguous(%p0, 0)

one copy of the permuted tensor (9 MB for Whisper-tiny's batch of 8, bf16), after which every op
that follows its layout works on dense rows. Values are the same; only strides change.

When. After the first round of profiling (``plan_row_layouts``), on CUDA (``DEVICES``), in a
graph without a channels-last plan for its convolutions (``conv_layout``: the plan makes a
convolution's permuted result dense itself), where:

- a ``permute`` / ``transpose`` result of rank >= 2 is profiled non-contiguous with a last-dim
  stride other than 1, and a normalization over the last dim (``layer_norm``, ``softmax``,
  ``log_softmax``, ``rms_norm``) is profiled with an input of that kind that is computed from
  it; the permute's input is not a convolution's result itself (a bias split past the permute
  fuses the bias add into the normalization's group, ConvNeXt's blocks: ``passes/bias.py``);
- no in-place op writes a value computed from it (a ``contiguous`` of a dense value is the
  value itself, where eager's was a copy);
- nothing can see the change (``conv_layout._tainted``): no value computed from the permuted
  one reaches an op that reads strides, a call or a loop, except through ops whose result is a
  fresh dense tensor whatever their input's layout (``RESETS``: a GEMM, a layer norm);
- every tensor the graph returns that is computed from it had a contiguous or channels-last
  layout in that round: the plan ends with ``contiguous`` in that format before the return, so
  outputs keep eager's strides.

The plan is applied to a fresh copy of the graph and the next call profiles it again, so the
groups specialize on dense inputs (one more profiling call, as after the attention rewrite: no
input or parameter changes layout). ``PYTORCH_NVFUSER_DISABLE=row_layout`` turns it off.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..config import config
from ..ir.graph import Graph, Node, Value
from ..ir.types import TensorType
from ..log import jit_log
from .partition import in_place_kind
from .conv_layout import CONTIGUOUS_FORMAT, _contiguous, _returned_formats, _tainted, restore_outputs

DEVICES = ("cuda",)     # (the tests add "cpu")
_VIEWS = ("aten::permute", "aten::transpose")
# normalizations over the last dim whose rows a strided layout hurts
_ROW_NORMS = ("aten::layer_norm", "aten::native_layer_norm", "aten::softmax", "aten::log_softmax",
              "aten::_softmax", "aten::_log_softmax", "aten::rms_norm")
# ops whose first result is a fresh dense tensor whatever their inputs' layouts (eager's GEMMs
# copy a strided 3-d input before the product; a layer norm normalizes a contiguous copy)
_CONVS = ("aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::_convolution", "aten::convolution")
RESETS = frozenset({"aten::linear", "aten::matmul", "aten::mm", "aten::bmm", "aten::addmm", "aten::layer_norm"})


@dataclass(frozen=True)
class RowPlan:
    views: tuple[int, ...]      # positions among the graph's permute / transpose nodes (all_nodes order)
    outputs: tuple[tuple[int, Optional[int], int], ...]   # as conv_layout.LayoutPlan.outputs


def _views(g: Graph) -> list[Node]:
    return [n for n in g.all_nodes() if n.kind in _VIEWS]


def _strided_rows(t: object) -> bool:
    """A profiled tensor whose last dim is not its densest: rows of it are strided."""
    if not isinstance(t, TensorType) or t.sizes is None or t.strides is None or None in t.sizes \
            or None in t.strides or len(t.sizes) < 2 or t.device is None or t.device.type not in DEVICES:
        return False
    if t.dtype is None or not t.dtype.is_floating_point or t.sizes[-1] <= 1:
        return False
    return t.strides[-1] != 1


def _readers(g: Graph) -> list[Value]:
    """Strided rows read row by row: a normalization's input."""
    out = []
    for n in g.all_nodes():
        if n.kind in _ROW_NORMS and n.inputs and _strided_rows(n.inputs[0].type):
            out.append(n.inputs[0])
    return out


def _written(g: Graph, taint: set[Value]) -> Optional[Node]:
    """An in-place op writing a value computed from the permuted one: ``contiguous`` of a dense
    value returns the value itself where eager's made a copy, so a write through it could reach
    other readers."""
    return next((n for n in g.all_nodes() if n.inputs and n.inputs[0] in taint
                 and (in_place_kind(n.kind) or n.kind == "aten::copy_")), None)


def plan_row_layouts(g: Graph) -> Optional[RowPlan]:
    """The row-layout plan of the profiled graph ``g`` (see the module docstring), or None."""
    if config.is_disabled("row_layout"):
        return None
    views = _views(g)
    readers = _readers(g)
    if not readers:
        return None
    chosen = []
    for k, n in enumerate(views):
        src = n.inputs[0].node
        if not _strided_rows(n.output.type) or (src is not None and src.kind in _CONVS):
            continue
        taint, seer = _tainted(g, [n.output], RESETS)
        if taint is not None and seer is None:
            seer = _written(g, taint)
            taint = taint if seer is None else None
        if taint is None:
            where = f" ({seer.kind} at {seer.where()})" if seer is not None else ""
            jit_log("graph_fuser", 2, f"rows of {n.where()} keep their layout: it reaches an op that reads it{where}")
            continue
        if any(r in taint for r in readers):
            chosen.append((k, taint))
    if not chosen:
        return None
    taint = set().union(*(t for _, t in chosen))
    outputs = _returned_formats(g, taint)
    if outputs is None:
        jit_log("graph_fuser", 2, "no row-layout plan: the graph returns a tensor of a layout contiguous cannot restore")
        return None
    return RowPlan(tuple(k for k, _ in chosen), tuple(outputs))


def apply_row_layouts(g: Graph, plan: RowPlan) -> None:
    """Rewrite the unprofiled graph ``g`` (the one ``plan`` was made from, freshly cloned)."""
    views = _views(g)
    for k in plan.views:
        n = views[k]
        out = n.output
        dense = _contiguous(g, out, CONTIGUOUS_FORMAT, after=n)
        for user, i in list(out.uses):
            if user is not dense.node:
                user.replace_input(i, dense)
        g.block.replace_return_everywhere(out, dense)
    restore_outputs(g, plan.outputs)
    jit_log("graph_fuser", 1, f"row-layout plan: {len(plan.views)} permuted value(s) made dense, "
                              f"{len(plan.outputs)} output(s) given back their profiled layout")
