"""Rotary position embeddings without their ``cat``: one fused group instead of five kernels.

Llama, Mistral, Qwen2 and most decoders since write RoPE as (Hugging Face's
``apply_rotary_pos_emb``)::

    x1 = x[..., :h]; x2 = x[..., h:]                # h = x.shape[-1] // 2
    out = x * cos + torch.cat((-x2, x1), -1) * sin

``cat`` is no pointwise op, so eager's kernels run: the negation, the cat (after a copy of the
strided slice it reads), then the fused multiply-add over the cat's result. Seen with the last
dim as ``[2, h]`` (a view: splitting a dim always is one), the rotated half is a selection
between the two halves, broadcast over the size-2 dim::

    xv = x.unflatten(-1, [2, h])                   cv, sv: cos, sin the same way
    a = xv[..., 0:1, :]; b = xv[..., 1:2, :]       (size 1 on the new dim: they broadcast)
    k = arange(2, device=x.device).unsqueeze(-1)   [[0], [1]]
    out = (xv * cv + where(k == 0, -b, a) * sv).flatten(-2, -1)

and every op left is pointwise: one group reads ``x`` (strided as it is), ``cos`` and ``sin``
and writes the result, whose strides are those eager's ``x * cos + ...`` has (it follows ``x``
in both forms). Values are the same ops on the same operands (``where`` selects, where a
multiplication by a 0 / 1 mask would turn an inf into a NaN).

When. In a program whose argument sizes are fixed (a Dynamo graph without symbolic sizes:
Dynamo guards every size, so the profiled last dim is the one every call has; elsewhere a call
with another width would find the split impossible where eager's cat is not), on the first
round's profiled types (``plan_rotary``), as the attention rewrite is planned, and applied to the
unprofiled graph before profiling again (``apply_rotary``): the pattern structurally (the slices at a constant ``h`` of the last dim, the negation and the cat
used once, the products and the sum used once, ``add``'s alpha 1); ``x``, ``cos`` and ``sin``
floating tensors whose last dim is ``2 * h`` (not broadcast there: splitting needs the full
width).

Under grad the split's two slices of ``x`` would each send their gradient back through a zero-
filled copy of ``x``'s size, as the cat's halves do. There the rotated half is a flip of the
size-2 dim instead::

    rv = flip(xv, [-2])                            [x2, x1]: read in the group's kernel
    out = (xv * cv + where(k == 0, -rv, rv) * sv).flatten(-2, -1)

which the group's kernel reads as an index remap (``ops/movement.py``), and whose gradient is a
flip again, inside the backward's kernel: no kernel of its own either way (Llama's bf16 training
step on an H200: its 32 roll kernels, 0.39 ms, gone; 12.02 ms of GPU time per step against
12.44). Where a flip does not fuse (``PYTORCH_NVFUSER_DISABLE=flip_fusion``) it is a roll::

    rv = roll(x, h, -1).unflatten(-1, [2, h])      [x2, x1]: one copy, as the cat's

whose gradient is one roll back, added to ``x``'s (a Llama's bf16 training step had run, per
rotary embedding, eager's negation and cat forward and a negation, two fills, two slice copies
and two adds backward). CUDA's ``roll`` copies a strided input contiguous first; ``x`` is most
often a transposed view of a projection's output (``q.view(B, T, H, D).transpose(1, 2)``), so
where ``x`` is a permutation of a dense tensor with its last dim innermost, the roll reads it
through that permutation (``permute``, roll the last dim, ``permute`` back: ``_dense_order``).
(Two views of ``x``'s halves in place of the roll, their gradients back through one ``cat``,
measured slower: each half broadcasts over the size-2 dim, and its gradient's sum over that dim
ran as an outer reduction of 2 rows, 1.6 ms a kernel in Llama's bf16 training step on an H200.) The rolled form also serves without grad where the split form's result
would not have eager's strides (``sin * rotate_half(q) + cos * q``: eager's follows the cat's
contiguous layout, as the roll's does). ``PYTORCH_NVFUSER_DISABLE=rotary_rewrite`` keeps the cat.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..config import config
from ..ir.graph import Graph, Node, Value
from ..ir.types import TENSOR, TensorType, Type
from ..log import jit_log
from ..ops.aten import resolve_aten

_UNFLATTEN = "aten::unflatten.int(Tensor(a) self, int dim, SymInt[] sizes) -> Tensor(a)"
_FLATTEN = "aten::flatten.using_ints(Tensor(a) self, int start_dim=0, int end_dim=-1) -> Tensor(a)"
_SLICE = ("aten::slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, "
          "SymInt step=1) -> Tensor(a)")
_ARANGE = ("aten::arange(Scalar end, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, "
           "bool? pin_memory=None) -> Tensor")
_UNSQUEEZE = "aten::unsqueeze(Tensor(a) self, int dim) -> Tensor(a)"
_EQ = "aten::eq.Scalar(Tensor self, Scalar other) -> Tensor"
_NEG = "aten::neg(Tensor self) -> Tensor"
_PERMUTE = "aten::permute(Tensor(a) self, int[] dims) -> Tensor(a)"
_ROLL = "aten::roll(Tensor self, SymInt[1] shifts, int[1] dims=[]) -> Tensor"
_FLIP = "aten::flip(Tensor self, int[] dims) -> Tensor"
_WHERE = "aten::where.self(Tensor condition, Tensor self, Tensor other) -> Tensor"
_MUL = "aten::mul.Tensor(Tensor self, Tensor other) -> Tensor"
_ADD = "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"
_BIG = 1 << 62          # a slice's end past any size: Python's x[h:]


@dataclass
class Rotary:
    """One matched ``x * cos + cat((-x[..., h:], x[..., :h]), -1) * sin``."""

    add: Node
    x: Value
    cos: Value
    sin: Value
    h: int
    nodes: list[Node]       # what the rewrite removes, users first
    orders: tuple[bool, bool, bool] = (True, True, True)
    # operand orders as written (x before cos, the rotated half before sin, x * cos first in
    # the sum): kept, so the result's strides follow the operands as eager's do


def _const_int(v: Value) -> Optional[int]:
    c = v.constant() if v.is_constant else None
    return c if isinstance(c, int) and not isinstance(c, bool) else None


def _single(v: Value) -> bool:
    return len(v.uses) == 1


def _last_dim(v: Value, dim: Value) -> bool:
    """``dim`` is -1, or the last dim of ``v``'s profiled rank (unprofiled: any constant dim,
    as ``apply_rotary`` rewrites only what ``plan_rotary`` checked on the profiled graph)."""
    d = _const_int(dim)
    rank = v.type.rank if isinstance(v.type, TensorType) else None
    return d == -1 or (d is not None and (rank is None or d == rank - 1))


def _half(s: Value, x: Value, first: bool, h: Optional[int]) -> Optional[int]:
    """h where ``s`` is ``x[..., :h]`` (``first``) or ``x[..., h:]``, used once; else None."""
    n = s.node
    if n is None or n.kind != "aten::slice" or len(n.inputs) != 5 or n.inputs[0] is not x or not _single(s):
        return None
    if not _last_dim(x, n.inputs[1]) or _const_int(n.inputs[4]) != 1:
        return None
    start, end = n.inputs[2], n.inputs[3]
    if first:
        ok = start.is_constant and start.constant() in (None, 0)
        cut = _const_int(end)
    else:
        ok = end.is_constant and (end.constant() is None or (_const_int(end) or 0) >= _BIG // 2)
        cut = _const_int(start)
    if not ok or cut is None or cut <= 0 or (h is not None and cut != h):
        return None
    return cut


def _rotated(r: Value, x: Optional[Value] = None) -> Optional[tuple[Value, int]]:
    """(x, h) where ``r`` is ``cat((-x[..., h:], x[..., :h]), -1)`` used once."""
    n = r.node
    if n is None or n.kind != "aten::cat" or len(n.inputs) != 2 or not _single(r):
        return None
    lst = n.inputs[0]
    if lst.node is None or lst.node.kind != "prim::ListConstruct" or len(lst.node.inputs) != 2 or not _single(lst):
        return None
    neg, x1 = lst.node.inputs
    if neg.node is None or neg.node.kind != "aten::neg" or not _single(neg):
        return None
    x2 = neg.node.inputs[0]
    src = x2.node.inputs[0] if x2.node is not None and x2.node.inputs else None
    if src is None or (x is not None and src is not x) or not _last_dim(src, n.inputs[1]):
        return None
    h = _half(x2, src, False, None)
    if h is None or _half(x1, src, True, h) is None:
        return None
    return src, h


def _product(v: Value) -> Optional[tuple[Value, Value]]:
    n = v.node
    if n is None or n.kind != "aten::mul" or len(n.inputs) != 2 or not _single(v):
        return None
    return n.inputs[0], n.inputs[1]


def _match(add: Node) -> Optional[Rotary]:
    if add.kind != "aten::add" or len(add.inputs) != 3 or _const_int(add.inputs[2]) != 1:
        return None
    p, q = (_product(v) for v in add.inputs[:2])
    if p is None or q is None:
        return None
    for first, second in ((p, q), (q, p)):
        for r, sin in (second, second[::-1]):
            found = _rotated(r)
            if found is None:
                continue
            x, h = found
            if x not in first:
                continue
            cos = first[1] if first[0] is x else first[0]
            cat = r.node
            lst = cat.inputs[0].node
            neg, x1 = lst.inputs
            nodes = [add, add.inputs[0].node, add.inputs[1].node, cat, lst, neg.node,
                     neg.node.inputs[0].node, x1.node]
            orders = (first[0] is x, second[0] is r, first is p)
            return Rotary(add, x, cos, sin, h, nodes, orders)
    return None


def _types_allow(m: Rotary) -> tuple[Optional[str], str, Optional[list[int]]]:
    """(why the pattern keeps its cat or None, the form it takes: ``split`` or ``roll``, the dims
    of ``x`` outer to inner where its roll reads it permuted: ``_dense_order``)."""
    ts = [m.x.type, m.cos.type, m.sin.type, m.add.outputs[0].type]
    if not all(isinstance(t, TensorType) and t.sizes and t.dtype is not None for t in ts):
        return "untyped operands", "", None
    if not all(t.dtype.is_floating_point for t in ts):
        return "not floating", "", None
    if len({t.device for t in ts}) != 1:
        return "on several devices", "", None
    if any(t.sizes[-1] != 2 * m.h for t in ts):
        return "a last dim that is not 2 * h (broadcast or another split)", "", None
    if any(t.strides is None for t in ts):
        return "unknown strides", "", None
    # under grad the split's slices would take their gradients back through two zero-filled
    # copies of x: the flipped form's through the flip, which the backward kernel reads as an
    # index remap (a roll where a flip does not fuse)
    fused = not config.is_disabled("flip_fusion")
    forms = (("flip",) if fused else ()) + ("roll",)
    if not any(t.requires_grad for t in ts):
        forms = ("split",) + forms
    why = ""
    order = _dense_order(ts[0])
    candidates = []         # (form, the permutation a roll reads x through): the permuted roll first
    for form in forms:
        if form == "roll" and order:
            candidates.append((form, order))
        candidates.append((form, None))
    for form, perm in candidates:
        try:
            strides = _rewritten_strides(m, form, *(_meta(t) for t in ts[:3]), order=perm)
        except RuntimeError as e:
            why = f"the {form} form does not run on these types ({e})"
            continue
        if strides == tuple(ts[3].strides):
            return None, form, perm
        why = f"the {form} form's result would have strides {strides}, eager's {ts[3].strides}"
    return why, "", None


def _dense_order(t: TensorType) -> Optional[list[int]]:
    """``x``'s dims outer to inner where ``x`` is a permutation of a dense tensor other than its
    contiguous one, with the last dim innermost: a transposed view of a projection's output
    (``q.view(B, T, H, D).transpose(1, 2)``). ``roll`` of such an ``x`` first copies it contiguous;
    rolled through its dense permutation (the same roll, of the last dim) it does not. None
    otherwise."""
    sizes, strides = t.sizes, t.strides
    order = sorted(range(len(sizes)), key=lambda d: (-strides[d], d))
    expected = 1
    for d in reversed(order):
        if sizes[d] != 1 and strides[d] != expected:
            return None
        expected *= sizes[d]
    if order[-1] != len(sizes) - 1 or order == sorted(order):
        return None
    return order


def _meta(t: TensorType):
    import torch

    return torch.empty_strided(t.sizes, t.strides, dtype=t.dtype, device="meta")


def _ordered(op, first: bool, u, v):
    return op(u, v) if first else op(v, u)


def _rewritten_strides(m: Rotary, form: str, x, cos, sin, order: Optional[list[int]] = None) -> tuple:
    """The strides of the rewritten ``form``'s result on meta tensors of the profiled types (the
    same ops, in the same operand orders, as ``apply_rotary`` writes)."""
    import torch

    x_first, rot_first, xcos_first = m.orders
    xv, cv, sv = (t.unflatten(-1, (2, m.h)) for t in (x, cos, sin))
    first = torch.arange(2, device="meta").unsqueeze(-1) == 0
    if form == "split":
        a, b = xv[..., 0:1, :], xv[..., 1:2, :]
        rot = torch.where(first, -b, a)
    elif form == "flip":
        rv = torch.flip(xv, [-2])
        rot = torch.where(first, -rv, rv)
    else:
        r = torch.roll(x, [m.h], [-1]) if order is None else \
            torch.roll(x.permute(order), [m.h], [-1]).permute(_inverse(order))
        rv = r.unflatten(-1, (2, m.h))
        rot = torch.where(first, -rv, rv)
    p = _ordered(torch.mul, x_first, xv, cv)
    q = _ordered(torch.mul, rot_first, rot, sv)
    return tuple(_ordered(torch.add, xcos_first, p, q).flatten(-2, -1).stride())


def _inverse(order: list[int]) -> list[int]:
    inv = [0] * len(order)
    for i, d in enumerate(order):
        inv[d] = i
    return inv


def _adds(g: Graph) -> list[Node]:
    return [n for n in g.all_nodes() if n.kind == "aten::add"]


def plan_rotary(g: Graph, fixed_sizes: bool) -> Optional[list[tuple[int, str, Optional[list[int]]]]]:
    """The positions (among the graph's adds) of the profiled ``g``'s rotary embeddings, the
    form each takes (``split`` / ``roll``) and the permutation its roll reads ``x`` through, or None.
    ``fixed_sizes``: the graph's inputs keep their profiled sizes (``Captured.fixed_sizes``);
    else nothing is rewritten, as the split relies on the last dim staying ``2 * h``."""
    if config.is_disabled("rotary_rewrite") or not fixed_sizes:
        return None
    chosen = []
    for k, n in enumerate(_adds(g)):
        m = _match(n)
        if m is None:
            continue
        why, form, order = _types_allow(m)
        if why is not None:
            jit_log("graph_fuser", 2, f"rotary embedding at {n.where()} keeps its cat: {why}")
            continue
        chosen.append((k, form, order))
    return chosen or None


def apply_rotary(g: Graph, plan: list[tuple[int, str, Optional[list[int]]]]) -> int:
    """Rewrite the unprofiled graph ``g`` (the one ``plan`` was made from, freshly cloned)."""
    adds = _adds(g)
    done = 0
    for k, form, order in plan:
        m = _match(adds[k]) if k < len(adds) else None
        if m is None:
            continue
        add, block = m.add, m.add.owner

        def node(kind: str, schema: str, inputs: list, out: Type = TENSOR) -> Value:
            n = g.create(kind, inputs, [out], source=add.source)
            n.schema = resolve_aten(kind, schema) if kind.startswith("aten::") else None
            block.insert_before(add, n)
            return n.output

        def const(value: object, type_name: str) -> Value:
            n = g.create("prim::Constant", [], [Type(type_name)], {} if value is None else {"value": value})
            block.insert_before(add, n)
            return n.output

        split = const([2, m.h], "int[]")
        last = const(-1, "int")
        xv, cv, sv = (node("aten::unflatten", _UNFLATTEN, [v, last, split]) for v in (m.x, m.cos, m.sin))
        two, one = const(-2, "int"), const(1, "int")
        device = node("prim::device", "", [m.x], Type("Device"))
        none = const(None, "NoneType")
        k2 = node("aten::unsqueeze", _UNSQUEEZE,
                  [node("aten::arange", _ARANGE, [const(2, "int"), none, none, device, none]), last])
        first = node("aten::eq", _EQ, [k2, const(0, "int")])
        if form == "split":
            a = node("aten::slice", _SLICE, [xv, two, const(0, "int"), one, one])
            b = node("aten::slice", _SLICE, [xv, two, one, const(2, "int"), one])
            rot = node("aten::where", _WHERE, [first, node("aten::neg", _NEG, [b]), a])
        elif form == "flip":
            rv = node("aten::flip", _FLIP, [xv, const([-2], "int[]")])
            rot = node("aten::where", _WHERE, [first, node("aten::neg", _NEG, [rv]), rv])
        else:
            if order is None:
                r = node("aten::roll", _ROLL, [m.x, const([m.h], "int[]"), const([-1], "int[]")])
            else:       # through x's dense permutation: no contiguous copy before the roll
                xp = node("aten::permute", _PERMUTE, [m.x, const(order, "int[]")])
                rp = node("aten::roll", _ROLL, [xp, const([m.h], "int[]"), const([-1], "int[]")])
                r = node("aten::permute", _PERMUTE, [rp, const(_inverse(order), "int[]")])
            rv = node("aten::unflatten", _UNFLATTEN, [r, last, split])
            rot = node("aten::where", _WHERE, [first, node("aten::neg", _NEG, [rv]), rv])
        alpha = const(1, "int")
        x_first, rot_first, xcos_first = m.orders
        p = node("aten::mul", _MUL, [xv, cv] if x_first else [cv, xv])
        q = node("aten::mul", _MUL, [rot, sv] if rot_first else [sv, rot])
        out = node("aten::add", _ADD, [p, q, alpha] if xcos_first else [q, p, alpha])
        flat = node("aten::flatten", _FLATTEN, [out, two, last])
        old = add.outputs[0]
        for user, i in list(old.uses):
            user.replace_input(i, flat)
        block.replace_return_everywhere(old, flat)
        for n in m.nodes:               # each is unused once the ones before it are gone
            n.owner.remove(n)
        done += 1
    jit_log("graph_fuser", 1, f"{done} rotary embedding(s) without their cat")
    return done
