"""Sink layout views below pointwise ops, so that a view between two fusible ops no longer splits
their group.

A permute / transpose / unsqueeze of a pointwise result is the same pointwise op applied to the
viewed inputs (each input first gets leading size-1 dims up to the output's rank, which is what
broadcasting does anyway)::

    %p = aten::mul(%gamma, %o)                  %g1 = aten::unsqueeze(%gamma, 0)  (x2)
    %v = aten::permute(%p, [0, 3, 1, 2])   ->   %g2 = aten::permute(%g1, [0, 3, 1, 2])
    %y = aten::add(%x, %v)                      %o2 = aten::permute(%o, [0, 3, 1, 2])
                                                %v = aten::mul(%g2, %o2)
                                                %y = aten::add(%x, %v)

The views now read group inputs, where they are free on the host (metadata only), and the mul and
add fuse (ConvNeXt's layer scale before its residual, attention's head permutes). A ``view`` /
``reshape`` of a one-input op or cast whose input no fusible op makes moves above it instead
(``_Sinker.sink_reshape``): ``logits.float().view(-1, vocab)`` feeding a log-softmax, the logits
padded or not (passes/gemm_pad.py). The rewritten op takes the view's profiled type, so its
result has the values and strides the view had; a moved ``view`` keeps eager's error, which
depends on the op's result's strides, not its input's (``graphfuser::view_check``,
ops/views.py). The other way round, a cast of a view of a normalization's or reduction's result
moves above the view (``hoist_cast``), so it joins that op's group: ``layer_norm(...).permute(0,
3, 1, 2)`` cast to bf16 for a convolution (ConvNeXt's downsampling); so does a cast of a
flattened pointwise result (the rotary rewrite's float32 result, cast to bf16 for attention).

Applied only when the pointwise result has no other use (it would otherwise be computed twice)
and every type involved is completely profiled; 0-dim inputs stay as they are (they broadcast,
and type promotion ranks them apart from tensors with dims), so a producer whose tensor inputs are
all 0-dim keeps its view (its result would stay 0-dim). Runs after profiling, before
partition; repeats until nothing moves, so a view sinks through a whole chain.
"""
from __future__ import annotations

from dataclasses import replace

import torch
from typing import Optional

from ..ops.aten import DTYPE_CODES, resolve_aten
from ..ir.graph import Block, Graph, Node, Value
from ..ir.types import TensorType, Type, layout_of
from ..log import jit_log
from ..ops import lookup
from ..ops.views import result_meta
from .aliasing import writes
from .decompose import constant_ints

_PERMUTE = "aten::permute(Tensor(a) self, int[] dims) -> Tensor(a)"
_UNSQUEEZE = "aten::unsqueeze(Tensor(a) self, int dim) -> Tensor(a)"


# -- types of views -------------------------------------------------------------------------
def permute_type(t: TensorType, dims: list[int]) -> TensorType:
    inv = {d: j for j, d in enumerate(dims)}
    return replace(t, sizes=tuple(t.sizes[d] for d in dims),
                   strides=None if t.strides is None else tuple(t.strides[d] for d in dims),
                   stride_order=tuple(inv[d] for d in t.stride_order))


def unsqueeze_type(t: TensorType, dim: int) -> TensorType:
    """``unsqueeze(dim)`` with ``0 <= dim <= rank``: a size-1 dim, strided as torch strides it."""
    sizes, strides = list(t.sizes), None if t.strides is None else list(t.strides)
    if strides is not None:
        inner = strides[dim] * sizes[dim] if dim < len(sizes) and strides[dim] >= 0 and sizes[dim] >= 0 else \
            (1 if dim == len(sizes) else -1)
        strides.insert(dim, inner)
    sizes.insert(dim, 1)
    order = tuple(d + 1 if d >= dim else d for d in t.stride_order)
    return replace(t, sizes=tuple(sizes), strides=None if strides is None else tuple(strides), stride_order=order)


# -- the rewrite ------------------------------------------------------------------------------
def _view_plan(view: Node) -> Optional[list[tuple[str, int | list[int]]]]:
    """The view as steps over the producer's rank-r result: [("permute", dims)] or [("unsqueeze", d)]."""
    out = view.outputs[0].type
    if not isinstance(out, TensorType) or not out.complete:
        return None
    r = out.rank
    if view.kind == "aten::permute":
        dims = constant_ints(view.inputs[1])
        if dims is None or len(dims) != r:
            return None
        return [("permute", [d % r for d in dims])]
    if view.kind == "aten::transpose" and len(view.inputs) == 3:
        d = constant_ints(view.inputs[1]), constant_ints(view.inputs[2])
        if None in d or r == 0:
            return None
        a, b = d[0][0] % r, d[1][0] % r
        dims = list(range(r))
        dims[a], dims[b] = dims[b], dims[a]
        return [("permute", dims)]
    if view.kind == "aten::unsqueeze":
        d = constant_ints(view.inputs[1])
        if d is None:
            return None
        return [("unsqueeze", d[0] % r)]
    return None


class _Sinker:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph

    def const(self, block: Block, before: Node, value, type_name: str) -> Value:
        node = self.graph.create("prim::Constant", [], [Type(type_name)], {"value": value})
        block.insert_before(before, node)
        return node.output

    def view_input(self, block: Block, before: Node, v: Value, rank: int, steps) -> Value:
        """``v`` with leading size-1 dims up to ``rank``, then the view's steps, as host view nodes."""
        t = v.type
        for _ in range(rank - t.rank):
            t = unsqueeze_type(t, 0)
            v = self.view_node(block, before, "aten::unsqueeze", _UNSQUEEZE, v, self.const(block, before, 0, "int"), t)
        for kind, arg in steps:
            if kind == "permute":
                items = [self.const(block, before, d, "int") for d in arg]
                lst = self.graph.create("prim::ListConstruct", items, [Type("int[]")])
                block.insert_before(before, lst)
                t = permute_type(t, arg)
                v = self.view_node(block, before, "aten::permute", _PERMUTE, v, lst.output, t)
            else:
                t = unsqueeze_type(t, arg)
                v = self.view_node(block, before, "aten::unsqueeze", _UNSQUEEZE, v,
                                   self.const(block, before, arg, "int"), t)
        return v

    def view_node(self, block: Block, before: Node, kind: str, schema: str, v: Value, arg: Value,
                  t: TensorType) -> Value:
        node = self.graph.create(kind, [v, arg], [t], source=before.source)
        node.schema = resolve_aten(kind, schema)
        block.insert_before(before, node)
        return node.output

    def try_sink(self, block: Block, view: Node) -> bool:
        src = view.inputs[0]
        prod = src.node
        if prod is None or prod.owner is not block or len(prod.outputs) != 1:
            return False
        row = lookup(prod.kind)
        if row is None or row.kind not in ("pointwise", "cast"):
            return False
        if row.kind == "cast" and _made_by_a_row_op(prod.inputs[0]):
            return False        # the cast stays with what it casts (``hoist_cast`` put it there)
        if len(src.uses) != 1 or src in block.returns or block.returned_within(src):
            return False
        if view.kind in _RESHAPES:
            return self.sink_reshape(block, view, prod, row.kind)
        steps = _view_plan(view)
        if steps is None:
            return False
        ptype = src.type
        if not isinstance(ptype, TensorType) or not ptype.complete:
            return False
        rank = ptype.rank
        data = range(1) if row.kind == "cast" else range(len(prod.inputs))
        tensors = [i for i in data if prod.inputs[i].type.is_tensor]
        for i in tensors:
            t = prod.inputs[i].type
            if not isinstance(t, TensorType) or not t.complete or t.rank > rank:
                return False
        if not any(prod.inputs[i].type.rank > 0 for i in tensors):
            return False        # only 0-dim inputs: nothing would carry the view's dims to the result
        new_inputs = list(prod.inputs)
        for i in tensors:
            if prod.inputs[i].type.rank == 0:
                continue
            new_inputs[i] = self.view_input(block, prod, prod.inputs[i], rank, steps)
        for i, v in enumerate(new_inputs):
            if v is not prod.inputs[i]:
                prod.replace_input(i, v)
        # the producer now computes the viewed result: it takes the view's type and place in the uses
        out = view.outputs[0]
        src.type = out.type
        for user, i in list(out.uses):
            user.replace_input(i, src)
        block.replace_return_everywhere(out, src)
        block.remove(view)
        jit_log("graph_fuser", 1, f"sank {view.kind} below {prod.where()}")
        return True


    def sink_reshape(self, block: Block, view: Node, prod: Node, kind: str) -> bool:
        """``view(f(x), sizes)`` of a one-tensor pointwise op or cast ``f`` (no broadcasting: ``x``
        has the result's shape) becomes ``f(reshape(x, sizes))``, made where the view was (its
        sizes may be computed after ``f``): a language model's loss reads ``logits.float()``
        through ``.view(-1, vocab)``, and the cast now fuses with the log-softmax after it.
        Only where ``x`` comes from no fusible op (else ``f`` fuses with that op already), a user
        of the view is fusible, and ``f``'s result then has the view's strides (``reshape`` of a
        dense ``x`` that the view could view is that same view)."""
        data = range(1) if kind == "cast" else range(len(prod.inputs))
        tensors = [i for i in data if prod.inputs[i].type.is_tensor]
        others = [i for i in range(len(prod.inputs)) if i not in tensors and prod.inputs[i].type.is_tensor]
        if len(tensors) != 1 or others or len(view.inputs) != 2:
            return False
        x, out = prod.inputs[tensors[0]], view.outputs[0]
        if (x.node is not None and lookup(x.node.kind) is not None) or \
                not any(lookup(user.kind) is not None for user, _ in out.uses):
            # ``f`` joins the group of what makes ``x`` already (autocast's cast of a layer norm
            # read through a view, passes/autocast.py), or nothing after the view would take it
            return False
        if _writes_between(block, prod, view):
            # f moves down to the view: an in-place write in between (to x through an alias,
            # ``x.contiguous().mul_(2)``) would change what it reads (lgamma(x) read the doubled
            # x: fuzz graph 1679 of CPU seed 34311)
            return False
        xt, pt, vt = x.type, prod.outputs[0].type, out.type
        if not all(isinstance(t, TensorType) and t.complete and t.strides is not None for t in (xt, pt, vt)):
            return False
        if xt.sizes != pt.sizes:
            return False
        cast_to = pt.dtype if kind == "cast" else None
        if tuple(xt.strides) == tuple(pt.strides):
            try:
                meta = torch.empty_strided(xt.sizes, xt.strides, dtype=xt.dtype, device="meta").reshape(vt.sizes)
            except RuntimeError:
                return False
            if tuple(meta.stride()) != tuple(vt.strides):
                return False
        else:
            # ``f`` gave ``x``'s values new strides (``logits.float()`` of a padded language
            # model head is dense: passes/gemm_pad.py): the view must view ``x`` as it is, and
            # ``f`` of that view must give what the view gave
            if not _plain_cast(prod):
                return False
            try:
                meta = torch.empty_strided(xt.sizes, xt.strides, dtype=xt.dtype, device="meta").view(vt.sizes)
                moved_strides = result_meta(meta, cast_to).stride()
            except RuntimeError:
                return False
            if tuple(moved_strides) != tuple(vt.strides):
                return False
        if view.kind == "aten::view":
            # eager's view raises for some strides of ``f(x)``, whatever ``x``'s: the moved view
            # checks what eager's would have (fuzz graph 820 of CPU seed 34745: ``(x * s).view(-1)``
            # of a transposed ``x`` raises; a reshape of ``x`` copied)
            dtype = self.const(block, view, DTYPE_CODES[cast_to], "int") if cast_to is not None else \
                self.const(block, view, None, "NoneType")
            block.insert_before(view, self.graph.create("graphfuser::view_check", [x, view.inputs[1], dtype], [],
                                                        source=view.source))
        order, contiguity = layout_of(vt.sizes, meta.stride())
        rt = replace(xt, sizes=tuple(vt.sizes), strides=tuple(meta.stride()), stride_order=order, contiguity=contiguity)
        reshaped = self.graph.create("aten::reshape", [x, view.inputs[1]], [rt], source=view.source)
        reshaped.schema = resolve_aten("aten::reshape", _RESHAPE)
        block.insert_before(view, reshaped)
        inputs = list(prod.inputs)
        inputs[tensors[0]] = reshaped.output
        moved = self.graph.create(prod.kind, inputs, [vt.with_dtype(pt.dtype)], dict(prod.attrs), source=prod.source)
        moved.schema = prod.schema
        block.insert_before(view, moved)
        for user, i in list(out.uses):
            user.replace_input(i, moved.output)
        block.replace_return_everywhere(out, moved.output)
        block.remove(view)
        block.remove(prod)
        jit_log("graph_fuser", 1, f"sank {view.kind} below {moved.where()}")
        return True


    def hoist_cast(self, block: Block, view: Node) -> bool:
        """``cast(view(y))`` where only the cast reads the view and a fusible op that is not
        pointwise (a normalization, a reduction) makes ``y``: ``view(cast(y))``, made where the
        cast was, so the cast joins ``y``'s group and the view reads its output (free on the
        host). ConvNeXt's downsampling layer norms (``permute``, layer norm, ``permute`` back)
        feed a convolution under autocast: the cast to bf16 after the permute back ran as a
        copy kernel of its own. Only a cast that changes the dtype (a new tensor either way),
        of a dense ``y``, whose result had the view's strides (so the moved cast, preserving
        ``y``'s, gives the same tensor)."""
        out = view.outputs[0]
        if len(out.uses) != 1 or out in block.returns or block.returned_within(out):
            return False
        cast, i = out.uses[0]
        row = lookup(cast.kind)
        if i != 0 or row is None or row.kind != "cast" or cast.owner is not block or len(cast.outputs) != 1:
            return False
        y = view.inputs[0]
        if not _made_by_a_row_op(y) and not (view.kind == "aten::flatten" and _made_by_a_fusible_op(y)
                                             and len(y.uses) == 1):
            # a pointwise producer takes the view below it instead (try_sink), but for a flatten,
            # which it does not sink: the rotary rewrite's ``flatten`` of its group's float32
            # result, cast to bf16 for attention under autocast (passes/rotary.py)
            return False
        yt, vt, ct = y.type, out.type, cast.outputs[0].type
        if not all(isinstance(t, TensorType) and t.complete and t.strides is not None for t in (yt, vt, ct)):
            return False
        if ct.dtype == yt.dtype or tuple(ct.strides) != tuple(vt.strides) or tuple(ct.sizes) != tuple(vt.sizes):
            return False
        if not _dense(yt.sizes, yt.strides):
            return False
        moved = self.graph.create(cast.kind, [y] + list(cast.inputs[1:]), [yt.with_dtype(ct.dtype)],
                                  dict(cast.attrs), source=cast.source)
        moved.schema = cast.schema
        block.insert_before(cast, moved)
        viewed = self.graph.create(view.kind, [moved.output] + list(view.inputs[1:]), [ct], dict(view.attrs),
                                   source=view.source)
        viewed.schema = view.schema
        block.insert_before(cast, viewed)
        for user, j in list(cast.outputs[0].uses):
            user.replace_input(j, viewed.output)
        block.replace_return_everywhere(cast.outputs[0], viewed.output)
        block.remove(cast)
        block.remove(view)
        jit_log("graph_fuser", 1, f"moved {moved.where()} above {viewed.kind}")
        return True


def _plain_cast(node: Node) -> bool:
    """Whether ``node`` is a cast or a one-input pointwise op whose result takes its input's
    layout (no ``memory_format`` or ``copy`` argument set to something else)."""
    schema = getattr(node.schema, "schema", None)
    if not schema:
        return False
    for arg, v in zip(torch._C.parse_schema(schema).arguments, node.inputs):
        if arg.name in ("memory_format", "copy") and not (v.is_constant and v.constant() in (None, False)):
            return False
    return True


def _made_by_a_fusible_op(v: Value) -> bool:
    return v.node is not None and lookup(v.node.kind) is not None


def _made_by_a_row_op(v: Value) -> bool:
    """Whether a fusible op that is neither pointwise nor a cast (a normalization, a reduction)
    makes ``v``."""
    row = lookup(v.node.kind) if v.node is not None else None
    return row is not None and row.kind not in ("pointwise", "cast")


def _dense(sizes, strides) -> bool:
    """Whether a tensor of ``sizes`` and ``strides`` covers its memory without gaps or overlaps
    in some order of its dims (a permutation of a contiguous tensor's)."""
    expected = 1
    for size, stride in sorted(((z, t) for z, t in zip(sizes, strides) if z != 1), key=lambda d: d[1]):
        if stride != expected:
            return False
        expected *= size
    return True


def _writes_between(block: Block, first: Node, last: Node) -> bool:
    """Whether a node strictly between ``first`` and ``last`` of ``block`` (nested blocks
    included) writes in place."""
    nodes = block.nodes
    i, j = nodes.index(first), nodes.index(last)

    def scan(ns) -> bool:
        return any(writes(n) or any(scan(b.nodes) for b in n.blocks) for n in ns)
    return scan(nodes[i + 1:j])


_RESHAPES = ("aten::view", "aten::reshape")
_RESHAPE = "aten::reshape(Tensor(a) self, SymInt[] shape) -> Tensor(a)"


def _sink_block(sinker: _Sinker, block: Block) -> int:
    moved = 0
    for node in list(block.nodes):
        for b in node.blocks:
            moved += _sink_block(sinker, b)
    changed = True
    while changed:
        changed = False
        for node in list(block.nodes):
            if node.owner is block and node.kind in ("aten::permute", "aten::transpose", "aten::unsqueeze", "aten::flatten") + _RESHAPES \
                    and (sinker.try_sink(block, node) or node.kind in _HOISTED and sinker.hoist_cast(block, node)):
                moved += 1
                changed = True
    return moved


_HOISTED = ("aten::permute", "aten::transpose", "aten::unsqueeze", "aten::flatten")    # views a cast moves above


def sink_views(graph: Graph) -> int:
    """Sink views below pointwise ops in ``graph``, and casts above views of other fusible ops'
    results (in place); returns how many moved."""
    return _sink_block(_Sinker(graph), graph.block)
