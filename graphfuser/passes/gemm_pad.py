"""Aligned GEMM outputs: a CUDA ``linear`` whose output width breaks cuBLAS's 16-byte alignment
computes into a padded width and reads back the columns it owes (after profiling):

    %y = aten::linear(%x, %w, %b)          %wp = graphfuser::pad_rows(%w, dtype, pad)
                                   ->      %bp = graphfuser::pad_rows(%b, None, pad)
                                           %yp = aten::linear(%x, %wp, %bp)
                                           %n  = aten::size(%w, 0)
                                           %ys = aten::slice(%yp, -1, 0, %n, 1)
                                           %y  = aten::contiguous(%ys)

Why. The leading dimension of a row-major ``[M, N]`` result is N. Where N * itemsize is not a
multiple of 16 bytes cuBLAS cannot use its vectorized (TMA / 128-bit) kernels and falls back to
an ``align1`` kernel: GPT-2's language-model head (N = 50257, vocabulary) ran 3.3 ms in bf16 at
8 x 512 tokens on an H100, eager's time too, against 0.45 ms for the same product with N padded
to 50264. Padding costs a copy of the weight (77 MB there, with autocast's cast already a copy
per call) and, for a result that leaves through anything but a fused group, one copy back into
eager's contiguous layout (0.8 GB of traffic there): a tenth of what it saves. Inductor pads
GEMMs for the same reason.

When. ``linear`` on CUDA with a 2-D weight whose rows (N, the output width) are not a multiple
of 16 bytes of the result's dtype while its columns (K) are (under autocast the weight is cast to
the result's dtype first, once: ``graphfuser::pad_rows`` writes the cast into the padded
buffer, one kernel, where ``constant_pad_nd`` of the cast took the cast's kernel and two copies
of the cast weight, 66 us of GPT-2's bf16 inference call on an H200); a product large enough that the kernel choice matters
(N * K at least ``MIN_ELEMENTS``); the linear's bias not split off by ``split_biases``. The
slice's end is the weight's size at run time, so a weight of another width later is still
exact. The result stays a strided view of the padded output only where every consumer is a row
of the op table (a fusion group reads strided inputs); otherwise ``contiguous`` gives eager's
layout. A result the graph returns is copied so only for ``graphfuser.script``: through
``torch.compile`` it leaves as the strided view, as Inductor returns GPT-2's logits (strides
``(25735168, 50264, 1)`` where eager's are ``(25731584, 50257, 1)``, measured); the copy was 0.51
ms of GPT-2's 3.6 ms of kernels per call (bf16, 8 x 512 tokens, H100). Under grad too: the view's
gradient goes back through the slice's autograd node, and a replayed training step hands out
a copy of it with its strides, made as one flat copy of the padded run (executor/lent.py
``_copy_out``: a copy between two padded layouts took 0.47 ms of GPT-2's bf16 training step at
8 x 512 tokens on an H200, logs/prof-race-row-cuda-H200-gpt2-train-e.txt, beside the slice's
backward, a strided copy as long).
``PYTORCH_NVFUSER_DISABLE=padded_outputs`` gives eager's layout there too. The backward of the
padded product (through autograd, unfused) has aligned leading dimensions too.
``PYTORCH_NVFUSER_DISABLE=gemm_padding`` turns it off.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

import torch

from ..config import config
from ..ir.graph import Graph, Node, Value
from ..ir.types import Type, TensorType
from ..log import jit_log
from ..ops import lookup
from ..ops.aten import DTYPE_CODES, resolve_aten
from .bias import SPLIT_BIAS

ALIGN_BYTES = 16
DEVICES = ("cuda",)         # where cuBLAS is the GEMM (tests add "cpu" to run the rewrite here)
MIN_ELEMENTS = 1 << 20
_PAD_ROWS = "graphfuser::pad_rows(Tensor self, int? dtype, int pad) -> Tensor"
_SIZE = "aten::size.int(Tensor self, int dim) -> int"
_SLICE = "aten::slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1) -> Tensor(a)"
_CONTIGUOUS = "aten::contiguous(Tensor(a) self, *, MemoryFormat memory_format=contiguous_format) -> Tensor(a)"


def _typed(meta: torch.Tensor, like: TensorType) -> TensorType:
    return dataclasses.replace(TensorType.of(meta), device=like.device, requires_grad=like.requires_grad)


def _pad_of(node: Node) -> Optional[int]:
    """Columns to add to ``node``'s (a linear's) output, or None where it is not padded."""
    if node.kind != "aten::linear" or len(node.inputs) != 3:
        return None
    w_t, out_t = node.inputs[1].type, node.output.type
    if not (isinstance(w_t, TensorType) and isinstance(out_t, TensorType)) or None in (
            w_t.sizes, w_t.dtype, w_t.device, out_t.sizes, out_t.strides, out_t.dtype):
        return None
    if w_t.device.type not in DEVICES or len(w_t.sizes) != 2 or not w_t.dtype.is_floating_point \
            or not out_t.dtype.is_floating_point or w_t.dtype.itemsize < out_t.dtype.itemsize:
        return None
    n, k = w_t.sizes
    per = ALIGN_BYTES // out_t.dtype.itemsize
    if n % per == 0 or k % per or n * k < MIN_ELEMENTS or out_t.sizes[-1] != n:
        return None
    if any(user in SPLIT_BIAS for user, _ in node.output.uses):
        return None
    b = node.inputs[2]
    if not (b.is_constant and b.constant() is None) and not (
            isinstance(b.type, TensorType) and b.type.sizes is not None and len(b.type.sizes) == 1):
        return None     # a bias of unknown shape: left alone
    return per - n % per


def _stays_view(node: Node, padded_returns: bool) -> bool:
    """Whether a padded linear's result stays a strided view of its padded output (every reader
    a row of the op table; returned only with ``padded_returns``) rather than a contiguous copy."""
    users = [u for u, _ in node.output.uses]
    # the graph's own return, or the tuple it returns (a Dynamo graph's outputs)
    packed = [u for u in users if u.kind == "prim::TupleConstruct" and u.output.returned()]
    returned = node.output.returned() or bool(packed)
    readers = [u for u in users if u not in packed]
    return all(lookup(u.kind) is not None for u in readers) and (padded_returns or bool(readers) and not returned)


def returned_pads(graph: Graph) -> dict[int, int]:
    """Where ``pad_gemms(graph, padded_returns=True)`` will return a padded linear's result as a
    view: position among the returned values (a returned tuple's items) -> columns added; read
    off a profiled graph. The profiling calls before it return eager's layout, and a caller that
    compiled code for the strides it saw would see others from then on: Dynamo guards every
    tensor's strides, and GPT-2's loss function (its own graph, after a graph break) was compiled
    again for the padded logits. ``executor/profile.py`` ``pad_returns`` gives the profiling
    calls' results these layouts."""
    if config.is_disabled("gemm_padding") or config.is_disabled("padded_outputs"):
        return {}
    items = graph.outputs
    if len(items) == 1 and items[0].node is not None and items[0].node.kind == "prim::TupleConstruct":
        items = items[0].node.inputs
    pads = {}
    for i, v in enumerate(items):
        if v.node is not None and v.node.kind == "aten::linear":
            pad = _pad_of(v.node)
            if pad is not None and _stays_view(v.node, True):
                pads[i] = pad
    return pads


def _pad_linear(graph: Graph, node: Node, pad: int, padded_returns: bool) -> None:
    block, src = node.owner, node.source
    x, w, b = node.inputs
    keep_view = _stays_view(node, padded_returns)   # (of the readers before the rewrite)
    out, out_t, w_t = node.output, node.output.type, w.type

    def const(value, type_name: str) -> Value:
        return graph.constant(value, Type(type_name), block=block, before=node)

    def aten(kind: str, schema: str, inputs: list[Value], t: Type) -> Value:
        n = graph.create(kind, inputs, [t], source=src)
        n.schema = resolve_aten(kind, schema)
        block.insert_before(node, n)
        return n.output

    def padded(v: Value, dtype: Optional[torch.dtype] = None) -> Value:
        t = v.type
        dt = dtype or t.dtype
        meta = torch.empty((t.sizes[0] + pad,) + tuple(t.sizes[1:]), dtype=dt, device="meta")
        code = const(DTYPE_CODES[dtype], "int") if dtype is not None else const(None, "NoneType")
        return aten("graphfuser::pad_rows", _PAD_ROWS, [v, code, const(pad, "int")],
                    dataclasses.replace(_typed(meta, t), requires_grad=t.requires_grad))

    w0 = w          # its rows are the width the slice keeps (read off the parameter, not its cast)
    # under autocast (this specialization's state) the product runs in the result's dtype: the
    # padded copy is the cast too (autocast would cast a padded fp32 copy again)
    node.replace_input(1, padded(w, out_t.dtype if w_t.dtype != out_t.dtype else None))
    if not (b.is_constant and b.constant() is None):
        node.replace_input(2, padded(b))
    wide = torch.empty(out_t.sizes[:-1] + (out_t.sizes[-1] + pad,), dtype=out_t.dtype, device="meta")
    narrow = wide[..., :out_t.sizes[-1]]
    users = list(out.uses)
    out.type = _typed(wide, out_t)
    after = node
    n_val = graph.create("aten::size", [w0, graph.constant(0, Type("int"), block=block, before=node)],
                         [Type("int")], source=src)
    n_val.schema = resolve_aten("aten::size", _SIZE)
    block.insert_after(after, n_val)
    after = n_val
    sl = graph.create("aten::slice", [out, const(-1, "int"), const(0, "int"), n_val.output, const(1, "int")],
                      [_typed(narrow, out_t)], source=src)
    sl.schema = resolve_aten("aten::slice", _SLICE)
    block.insert_after(after, sl)
    result = sl.output
    if not keep_view:
        fmt = graph.create("prim::Constant", [], [Type("int")], {"value": 0})     # contiguous_format
        block.insert_after(sl, fmt)
        c = graph.create("aten::contiguous", [result, fmt.output], [out_t], source=src)
        c.schema = resolve_aten("aten::contiguous", _CONTIGUOUS)
        block.insert_after(fmt, c)
        result = c.output
    for user, i in users:
        user.replace_input(i, result)
    block.replace_return_everywhere(out, result)


def pad_gemms(graph: Graph, padded_returns: bool = False) -> int:
    """Pad the output width of the misaligned CUDA linears of a profiled ``graph`` (in place);
    returns how many were padded. ``padded_returns``: the entry point leaves output strides free
    (``Captured.loose_output_strides``); a result the graph returns stays a view of the padded
    output unless ``PYTORCH_NVFUSER_DISABLE=padded_outputs``."""
    padded_returns = padded_returns and not config.is_disabled("padded_outputs")
    if config.is_disabled("gemm_padding"):
        return 0
    done = 0
    for node in list(graph.all_nodes()):
        pad = _pad_of(node)
        if pad is None:
            continue
        _pad_linear(graph, node, pad, padded_returns)
        done += 1
        jit_log("graph_fuser", 2, f"padded the output of {node.where()} by {pad} columns (aligned GEMM)")
    return done
