"""Attention that SDPA would run on its math backend runs as two GEMMs and one fused softmax.

``scaled_dot_product_attention`` with an additive float mask that its fused kernels do not take
(T5's relative position bias, a float32 mask beside bf16 queries) dispatches to the math backend,
a composite of eager kernels: on CUDA it casts ``q``, ``k``, ``v`` to float32, scales them,
multiplies, adds the mask, runs ``_safe_softmax`` (an ``isneginf``, an ``all`` over the row, the
softmax and a ``where``), multiplies again and casts back. Measured on an H200 (T5-small, bf16
autocast, 8 x 512 tokens), 12 of its 18 attentions took that path: 1.6 ms of the call's 5.1 ms
of kernels went to the mask add and the four softmax kernels. Inductor decomposes the same
backend into its own fused kernels. This pass writes the math backend out in the graph:

    %o = aten::scaled_dot_product_attention(%q, %k, %v, %mask, 0., False, scale)
  ->
    %sf = sqrt(scale)        (scale None: sqrt(1 / sqrt(q.size(-1))), a host float)
    %qs = aten::mul(aten::to(%q, float32), %sf)          (float32: fp16 / bf16 q on CUDA)
    %ks = aten::mul(aten::to(%k, float32), %sf)
    %s = graphfuser::exact_matmul(%qs, aten::transpose(%ks, -2, -1))
    %p = aten::_safe_softmax(aten::add(%s, graphfuser::sdpa_mask_check(%s, %mask), 1), -1)
    %o = aten::to(graphfuser::exact_matmul(%p, aten::to(%v, float32)), q's dtype)

the same operations in the same order as ``_scaled_dot_product_attention_math`` (the mask added
once, the scale split between ``q`` and ``k``), so the cast and scale of each operand fuse into
one kernel and the mask add into the softmax's. ``graphfuser::exact_matmul`` is ``matmul`` with
autocast off: eager's math backend multiplies in float32 below autocast, where a host-program
``matmul`` under ``torch.autocast`` would be cast to bf16. ``graphfuser::sdpa_mask_check`` raises
the error of eager's in-place mask add where a later call's mask would widen the scores.

When. Planned on the first round's profiled types (``plan_sdpa_math``) and applied to the
unprofiled graph before profiling again, as the attention rewrite is: on CUDA (``DEVICES``); no
dropout, not causal, no grouped-query expansion, a constant scale (or none); 4-d floating ``q``,
``k``, ``v`` of one dtype and a floating mask that the scores' dtype absorbs; and
``torch._fused_sdp_choice`` on tensors of the profiled sizes, strides and dtypes picks the math
backend. Later calls of other sizes keep the decomposition: it is the math backend's own
arithmetic, right wherever the choice would have gone. ``PYTORCH_NVFUSER_DISABLE=sdpa_math``
keeps the SDPA call.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch

from ..config import config
from ..ir.graph import Graph, Node, Value
from ..ir.types import TensorType, Type
from ..log import jit_log
from ..ops.aten import DTYPE_CODES, resolve_aten
from .decompose import _Emitter, reroute

DEVICES = ("cuda",)     # (the tests add "cpu", under sdpa_kernel(MATH))
SDPA = "aten::scaled_dot_product_attention"
_MATH = int(torch.nn.attention.SDPBackend.MATH)
_HALF = (torch.float16, torch.bfloat16)
_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

_TO = ("aten::to.dtype(Tensor(a) self, ScalarType dtype, bool non_blocking=False, bool copy=False, "
       "MemoryFormat? memory_format=None) -> Tensor(a)")
_MUL = "aten::mul.Scalar(Tensor self, Scalar other) -> Tensor"
_ADD = "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"
_TRANSPOSE = "aten::transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)"
_SAFE_SOFTMAX = "aten::_safe_softmax(Tensor self, int dim, ScalarType? dtype=None) -> Tensor"
_EXACT_MATMUL = "graphfuser::exact_matmul(Tensor self, Tensor other) -> Tensor"
_MASK_CHECK = "graphfuser::sdpa_mask_check(Tensor scores, Tensor(a) mask) -> Tensor(a)"
_SIZE = "aten::size.int(Tensor self, int dim) -> int"
_SQRT_INT = "aten::sqrt.int(int a) -> float"
_SQRT = "aten::sqrt.float(float a) -> float"
_DIV = "aten::div.float(float a, float b) -> float"


@dataclass(frozen=True)
class MathPlan:
    # (position among the graph's SDPA nodes in all_nodes order, q's profiled dtype, in float32?)
    entries: tuple[tuple[int, torch.dtype, bool], ...]


def _sdpas(g: Graph) -> list[Node]:
    return [n for n in g.all_nodes() if n.kind == SDPA]


def _const(v: Value) -> tuple[bool, object]:
    """(known, value): a constant, or None for any value of type NoneType (a module's ``None``
    attribute read through ``prim::GetAttr``)."""
    if v.is_constant:
        return True, v.constant()
    return (True, None) if str(v.type) == "NoneType" else (False, None)


def _empty(t: TensorType) -> torch.Tensor:
    return torch.empty_strided(t.sizes, t.strides, dtype=t.dtype, device=t.device,
                               requires_grad=bool(t.requires_grad))


def _why_not(n: Node) -> Optional[str]:
    """Why ``n`` keeps its SDPA call (None: it would run the math backend, as written here)."""
    if len(n.inputs) < 7:
        return "an SDPA call without its full arguments"
    q, k, v, mask = (i.type for i in n.inputs[:4])
    known = [_const(i) for i in n.inputs[4:8]]
    if not all(c for c, _ in known[:3]) or (len(known) > 3 and not known[3][0]):
        return "run-time dropout, causality, scale or grouped-query flag"
    dropout, causal, scale = (x for _, x in known[:3])
    gqa = known[3][1] if len(known) > 3 else False
    if dropout not in (0, 0.0) or causal or gqa:
        return "dropout, a causal mask or grouped-query attention"
    if scale is not None and not isinstance(scale, (int, float)):
        return "a scale that is not a number"
    ts = [q, k, v]
    if not all(isinstance(t, TensorType) and t.sizes is not None and t.strides is not None and None not in t.sizes
               and t.dtype in _FLOATS and len(t.sizes) == 4 for t in ts):
        return "q, k, v not 4-d floating tensors of known sizes"
    if len({t.dtype for t in ts}) != 1 or len({t.device for t in ts}) != 1:
        return "q, k, v of several dtypes or devices"
    if q.device is None or q.device.type not in DEVICES:
        return f"on {q.device}"
    if not isinstance(mask, TensorType) or mask.sizes is None or mask.strides is None or mask.dtype not in _FLOATS:
        return "no floating mask"
    shape = list(q.sizes[:3]) + [k.sizes[2]]
    dims = [1] * (4 - len(mask.sizes)) + list(mask.sizes)
    if len(mask.sizes) > 4 or any(d != 1 and d != s for d, s in zip(dims, shape)):
        return "the mask widens the scores"
    scores = torch.float32 if _upcast(q.dtype, q.device) else q.dtype
    if torch.promote_types(scores, mask.dtype) != scores:
        return f"a {mask.dtype} mask would widen {scores} scores"
    try:
        choice = torch._fused_sdp_choice(_empty(q), _empty(k), _empty(v), _empty(mask), float(dropout), bool(causal),
                                         scale=scale, enable_gqa=bool(gqa))
    except (RuntimeError, ValueError) as e:
        return f"SDPA's backend choice raised ({str(e).splitlines()[0] if str(e) else type(e).__name__})"
    if choice != _MATH:
        return f"SDPA runs backend {choice}, not the math backend"
    return None


def _upcast(dtype: torch.dtype, device: torch.device) -> bool:
    """Whether the math backend computes in float32: fp16 / bf16 on CUDA, unless
    ``torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)`` (on the CPU it keeps the
    inputs' dtype: its products, the in-place mask add and the softmax run in bf16)."""
    return dtype in _HALF and device.type == "cuda" and not torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()


def plan_sdpa_math(g: Graph) -> Optional[MathPlan]:
    """The SDPA calls of the profiled ``g`` that run the math backend (see the module docstring)."""
    if config.is_disabled("sdpa_math"):
        return None
    chosen = []
    for k, n in enumerate(_sdpas(g)):
        why = _why_not(n)
        if why is not None:
            jit_log("graph_fuser", 2, f"attention at {n.where()} keeps its SDPA call: {why}")
            continue
        q = n.inputs[0].type
        chosen.append((k, q.dtype, _upcast(q.dtype, q.device)))
    return MathPlan(tuple(chosen)) if chosen else None


def _scalar(e: _Emitter, kind: str, schema: str, inputs: list[Value], type_name: str, source) -> Value:
    node = e.block.graph.create(kind, inputs, [Type(type_name)], source=source)
    node.schema = resolve_aten(kind, schema)
    return e.add(node).output


def _rewrite(n: Node, dtype: torch.dtype, upcast: bool) -> None:
    e = _Emitter(n.owner, n)
    q, k, v, mask = n.inputs[:4]
    scale = _const(n.inputs[6])[1]
    src = n.source
    if scale is None:
        # calculate_scale: 1 / sqrt(E) from q's last size, on the host (a run-time size)
        size = _scalar(e, "aten::size", _SIZE, [q, e.const(-1, "int")], "int", src)
        root = _scalar(e, "aten::sqrt", _SQRT_INT, [size], "float", src)
        inv = _scalar(e, "aten::div", _DIV, [e.const(1.0, "float"), root], "float", src)
        qf = kf = _scalar(e, "aten::sqrt", _SQRT, [inv], "float", src)
    else:
        root = math.sqrt(abs(float(scale)))
        kf = e.const(root, "float")
        qf = e.const(-root if scale < 0 else root, "float")
    f32 = DTYPE_CODES[torch.float32]

    def acc(x: Value) -> Value:
        if not upcast:
            return x
        return e.aten("aten::to", _TO, [x, e.const(f32, "int"), e.const(False, "bool"), e.const(False, "bool"),
                                         e.const(None, "NoneType")], src)

    qs = e.aten("aten::mul", _MUL, [acc(q), qf], src)
    ks = e.aten("aten::mul", _MUL, [acc(k), kf], src)
    kt = e.aten("aten::transpose", _TRANSPOSE, [ks, e.const(-2, "int"), e.const(-1, "int")], src)
    s = e.aten("graphfuser::exact_matmul", _EXACT_MATMUL, [qs, kt], src)
    mask = e.aten("graphfuser::sdpa_mask_check", _MASK_CHECK, [s, mask], src)     # eager's in-place add's error
    s = e.aten("aten::add", _ADD, [s, mask, e.const(1, "int")], src)
    p = e.aten("aten::_safe_softmax", _SAFE_SOFTMAX, [s, e.const(-1, "int"), e.const(None, "NoneType")], src)
    o = e.aten("graphfuser::exact_matmul", _EXACT_MATMUL, [p, acc(v)], src)
    if upcast:      # back to q's dtype
        o = e.aten("aten::to", _TO, [o, e.const(DTYPE_CODES[dtype], "int"), e.const(False, "bool"),
                                     e.const(False, "bool"), e.const(None, "NoneType")], src)
    reroute(n.owner, n.output, o)
    n.owner.remove(n)


def apply_sdpa_math(g: Graph, plan: MathPlan) -> int:
    """Rewrite the unprofiled graph ``g`` (the one ``plan`` was made from, freshly cloned)."""
    sdpas = _sdpas(g)
    done = 0
    for k, dtype, upcast in plan.entries:
        if k < len(sdpas):
            _rewrite(sdpas[k], dtype, upcast)
            done += 1
    jit_log("graph_fuser", 1, f"{done} attention call(s) on SDPA's math backend written out (passes/sdpa_math.py)")
    return done
