"""Attention written by hand becomes ``scaled_dot_product_attention``.

Models that attend without calling SDPA (timm's ``Attention`` under scripting, older code) spell it

    %s = aten::matmul(%q, %kt)                    # %kt: k transposed, [N, H, E, S]
    %s = aten::mul(%s, c) | aten::div(%s, c)      # optional: a scale
    %s = aten::add(%s, %mask, 1)                  # optional: a float mask of the scores' dtype
    %p = aten::softmax(%s, -1, None)              # (autocast casts around it are allowed)
    %o = aten::matmul(%p, %v)                     # (an identity dropout between is gone already)
  ->
    %k = aten::transpose(%kt, -2, -1)
    %o = aten::scaled_dot_product_attention(%q, %k, %v, %mask, 0.0, False, scale=c | 1/c | 1.0)

which materializes the [N, H, L, S] scores twice in memory and runs three kernels where SDPA runs
one (flash / memory-efficient attention on CUDA, a blocked kernel on the CPU) and never writes
the scores. The scale is SDPA's (``q @ kᵀ · scale``, scaled after the product, as written); a
scale folded into ``q`` before the product stays there (scale 1.0).

When. Every intermediate has one use (attention weights that are returned or read elsewhere
keep the graph as written); ``q``, ``kᵀ``, ``v`` and the scores are 4-d, of one floating dtype
(or the specialization runs under autocast, which casts SDPA's arguments as it cast the
matmuls'), with equal batch and head dims; the softmax is over the last dim in the scores' dtype
or float32; the mask is a tensor of the scores' dtype (a bool one would be added as 0 / 1, not
masked) that broadcasts into the scores without widening them. A dropout with p > 0 in training
is not rewritten: SDPA's would draw other numbers. Numerics: SDPA's softmax runs in float32
for fp16 / bf16 as eager's autocast softmax does; results differ from the three-kernel form by
rounding only.

How. The rewrite changes the layout of its result (flash attention returns a transposed
buffer), so it is planned on the first round's profiled types (``plan_attention``: which
matmuls end an attention pattern) and applied to the unprofiled graph before profiling starts
again (``apply_attention``), as the channels-last plan is: what follows is profiled with the
SDPA result it reads. ``PYTORCH_NVFUSER_DISABLE=attention_rewrite`` keeps attention as written.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from ..config import config
from ..ir.graph import Graph, Node, Value
from ..ir.types import TENSOR, TensorType, Type
from ..log import jit_log
from ..ops.aten import resolve_aten
from .autocast import CAST_KINDS

SDPA = ("aten::scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, "
        "float dropout_p=0., bool is_causal=False, *, float? scale=None, bool enable_gqa=False) -> Tensor")
_DIV_FLOAT = "aten::div.float(float a, float b) -> float"
_TRANSPOSE = "aten::transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)"
_CASTS = CAST_KINDS + ("aten::to", "aten::type_as", "aten::float")
_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@dataclass
class Attention:
    """One matched pattern: its nodes, in order, and SDPA's arguments."""

    first: Node                     # aten::matmul(q, kt)
    last: Node                      # aten::matmul(p, v)
    softmax: Node
    nodes: list[Node]               # every node the rewrite removes
    mask: Optional[Value]
    scale: object                   # a float, a float-typed Value, or ("reciprocal", that Value)


def _returned(g: Graph) -> set[int]:
    """Ids of the values some block returns (block returns are not uses)."""
    blocks = [g.block] + [b for n in g.all_nodes() for b in n.blocks]
    return {id(r) for b in blocks for r in b.returns}


def _single(v: Value, returned: set[int]) -> bool:
    return len(v.uses) == 1 and id(v) not in returned


def _number(v: Value) -> Optional[float]:
    if v.is_constant and isinstance(v.constant(), (int, float)) and not isinstance(v.constant(), bool):
        return float(v.constant())
    return None


def _match(last: Node, returned: set[int]) -> Optional[Attention]:
    """The attention pattern ending at ``last`` (an ``aten::matmul``), structurally."""
    if last.kind != "aten::matmul" or len(last.inputs) != 2:
        return None
    nodes = [last]
    p = last.inputs[0]
    while p.node is not None and p.node.kind in _CASTS and _single(p, returned):
        nodes.append(p.node)
        p = p.node.inputs[0]
    sm = p.node
    if sm is None or sm.kind != "aten::softmax" or len(sm.inputs) != 3 or not _single(p, returned):
        return None
    dim = sm.inputs[1]
    if not (dim.is_constant and dim.constant() in (-1, 3)):
        return None
    nodes.append(sm)
    s = sm.inputs[0]
    while s.node is not None and s.node.kind in _CASTS and _single(s, returned):
        nodes.append(s.node)
        s = s.node.inputs[0]
    mask = None
    if s.node is not None and s.node.kind == "aten::add" and len(s.node.inputs) == 3 and _single(s, returned):
        alpha = _number(s.node.inputs[2])
        if alpha != 1.0 or not s.node.inputs[1].type.is_tensor:
            return None
        nodes.append(s.node)
        mask = s.node.inputs[1]
        s = s.node.inputs[0]
    scale: object = 1.0
    if s.node is not None and s.node.kind in ("aten::mul", "aten::div") and _single(s, returned):
        c = s.node.inputs[1]
        number = _number(c)
        if number is not None:
            if s.node.kind == "aten::div" and number == 0.0:
                return None
            scale = number if s.node.kind == "aten::mul" else 1.0 / number
        elif str(c.type) == "float":
            scale = c if s.node.kind == "aten::mul" else ("reciprocal", c)
        else:
            return None
        nodes.append(s.node)
        s = s.node.inputs[0]
    first = s.node
    if first is None or first.kind != "aten::matmul" or len(first.inputs) != 2 or not _single(s, returned):
        return None
    nodes.append(first)
    return Attention(first, last, sm, nodes, mask, scale)


def _matmuls(g: Graph) -> list[Node]:
    return [n for n in g.all_nodes() if n.kind == "aten::matmul"]


def _types_allow(a: Attention, autocast: bool) -> Optional[str]:
    """Why the profiled types rule the rewrite out (None: they allow it)."""
    q, kt = a.first.inputs
    v = a.last.inputs[1]
    scores, out = a.first.output.type, a.last.output.type
    ts = [q.type, kt.type, v.type, scores, out]
    if not all(isinstance(t, TensorType) and t.sizes is not None and t.dtype in _FLOATS for t in ts):
        return "untyped or not floating"
    if any(len(t.sizes) != 4 for t in ts):
        return "not 4-d"
    if len({t.device for t in ts}) != 1:
        return "on several devices"
    if not autocast and len({t.dtype for t in ts}) != 1:
        return "mixed dtypes"
    if out.dtype != scores.dtype:
        return "the output's dtype is not the scores'"
    if not (q.type.sizes[:2] == kt.type.sizes[:2] == v.type.sizes[:2]) or kt.type.sizes[3] != v.type.sizes[2]:
        return "batch or head dims differ (broadcast matmul)"
    sm_dtype = a.softmax.inputs[2]
    if not (sm_dtype.is_constant and sm_dtype.constant() in (None, 6)):     # 6: float32's code
        return "softmax to another dtype"
    if a.mask is not None:
        m = a.mask.type
        if not isinstance(m, TensorType) or m.sizes is None or m.dtype not in _FLOATS or len(m.sizes) > 4:
            return "the mask is not a floating tensor of rank <= 4"
        if not autocast and m.dtype != scores.dtype:
            return "the mask's dtype is not the scores'"
        dims = (1,) * (4 - len(m.sizes)) + tuple(m.sizes)
        if any(d != 1 and d != s for d, s in zip(dims, scores.sizes)):
            return "the mask widens the scores"
    return None


def plan_attention(g: Graph, autocast: bool = False) -> Optional[list[int]]:
    """The positions (among the graph's matmuls) of the profiled ``g``'s attention patterns that
    can become SDPA, or None."""
    if config.is_disabled("attention_rewrite"):
        return None
    chosen = []
    returned = _returned(g)
    for k, n in enumerate(_matmuls(g)):
        a = _match(n, returned)
        if a is None:
            continue
        why = _types_allow(a, autocast)
        if why is not None:
            jit_log("graph_fuser", 2, f"attention at {n.where()} stays as written: {why}")
            continue
        chosen.append(k)
    return chosen or None


def _const(g: Graph, before: Node, value: object, type_name: str) -> Value:
    node = g.create("prim::Constant", [], [Type(type_name)], {} if value is None else {"value": value})
    before.owner.insert_before(before, node)
    return node.output


def apply_attention(g: Graph, plan: list[int]) -> int:
    """Rewrite the unprofiled graph ``g`` (the one ``plan`` was made from, freshly cloned)."""
    matmuls = _matmuls(g)
    returned = _returned(g)
    done = 0
    for k in plan:
        a = _match(matmuls[k], returned) if k < len(matmuls) else None
        if a is None:
            continue
        last, block = a.last, a.last.owner
        q, kt = a.first.inputs
        dims = [_const(g, last, -2, "int"), _const(g, last, -1, "int")]
        tr = g.create("aten::transpose", [kt] + dims, [TENSOR], source=last.source)
        tr.schema = resolve_aten("aten::transpose", _TRANSPOSE)
        block.insert_before(last, tr)
        mask = a.mask if a.mask is not None else _const(g, last, None, "NoneType")
        if isinstance(a.scale, tuple):      # divided by a run-time float: 1 / it
            inv = g.create("aten::div", [_const(g, last, 1.0, "float"), a.scale[1]], [Type("float")],
                           source=last.source)
            inv.schema = resolve_aten("aten::div", _DIV_FLOAT)
            block.insert_before(last, inv)
            scale = inv.output
        else:
            scale = a.scale if isinstance(a.scale, Value) else _const(g, last, float(a.scale), "float")
        args = [q, tr.output, a.last.inputs[1], mask, _const(g, last, 0.0, "float"),
                _const(g, last, False, "bool"), scale, _const(g, last, False, "bool")]
        sdpa = g.create("aten::scaled_dot_product_attention", args, [TENSOR], source=last.source)
        sdpa.schema = resolve_aten("aten::scaled_dot_product_attention", SDPA)
        block.insert_before(last, sdpa)
        out = last.output
        for user, i in list(out.uses):
            user.replace_input(i, sdpa.output)
        block.replace_return_everywhere(out, sdpa.output)
        for n in a.nodes:               # from the end of the pattern back: each is unused now
            n.owner.remove(n)
        done += 1
        jit_log("graph_fuser", 1, f"attention at {last.where()} runs as scaled_dot_product_attention")
    return done
