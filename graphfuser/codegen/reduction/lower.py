"""Lowering of a fusion group that holds reductions or normalizations to kernel IR.

Pointwise groups broadcast right-aligned and go through ``lower.py``; a group with a reduction
(or a normalization whose parameters line up with a middle dim, like batch norm's channel) has
loop axes given by ``ops.axes.analyze``. Steps:

1. Axes: every tensor dim of the group walks one axis (or is a broadcast). The domain is all
   axes; the reduced ones are those the group's reductions combine.
2. Roots: kept axes first, then reduced axes, each in the stride order of the reference tensor
   (the widest value, preferring a reduction's input), so a row-wise reduction ends with the
   contiguous dim. Adjacent roots of one class coalesce when every tensor is dense across them.
3. Tensor params as in pointwise lowering (``bcast`` / ``unit`` / ``strided`` per root).
4. Nodes lower through their rows; reduction rows build ``Reduce`` expressions (the four
   primitives) and ``ReductionSize``. A reduction over size-1 dims only is the identity (a sum's
   plus +0, as eager's accumulator starts there: -0 sums to +0).

The kernel is size-free: root extents and strides are run-time arguments, like pointwise ones.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Optional

import torch

from ...ir.graph import Graph, Node, Value
from ...ir.types import TensorType
from ...ops import bind, lookup
from ...ops.axes import Axes, analyze, column_output_misfit, is_reduction_node
from ...ir.kir import (Call, Cast, ColumnSum, Expr, ExprBuilder, FirstLoad, Kernel, LinearIndex, Load, Reduce,
                  ScalarParam, TensorParam, compute_dtype, topo_exprs)
from ..lower import LoweringError, TensorPlan, lower_node, returned_inputs, through_detach


@dataclass
class ReductionKernel(Kernel):
    """A kernel whose roots end with ``red_roots`` (reduced); ``kind`` is ``inner`` (the reduced
    roots are contiguous in the reference tensor), ``outer`` or ``none`` (no reduction)."""

    red_roots: tuple[int, ...] = ()
    kind: str = "none"

    def reductions(self) -> list[Reduce]:
        return [e for e in self.exprs() if isinstance(e, Reduce)]

    def reduction_phases(self) -> int:
        """Longest chain of reductions feeding one another (softmax's max then sum: 2)."""
        depth: dict[int, int] = {}
        for e in topo_exprs([e for _, e in self.stores]):
            args = getattr(e, "args", None) or ((e.arg,) if isinstance(e, Cast) else ())
            d = max((depth[id(a)] for a in args), default=0)
            depth[id(e)] = d + 1 if isinstance(e, Reduce) else d
        return max(depth.values(), default=0)

    def is_row(self, p: int) -> bool:
        """True when tensor param ``p`` does not vary along the reduced roots."""
        kinds = self.tensors[p].dim_kinds
        return all(kinds[r] == "bcast" for r in self.red_roots)

    def has_columns(self) -> bool:
        """Whether the kernel also sums values over its kept roots (column-sum partials)."""
        return any(t.partials for t in self.tensors)


@dataclass
class OutputPlan:
    dtype: torch.dtype
    axes: tuple[Optional[int], ...]    # per dim: the axis it walks, None for size 1
    order: tuple[int, ...]             # profiled stride order (non-broadcast dims, outer -> inner)
    device: torch.device


@dataclass
class ReductionPlan:
    root_axes: list[list[int]]                     # per root: the axes it covers, outer -> inner
    axis_source: dict[int, tuple[int, int]]        # axis -> (group input index, tensor dim)
    tensors: list[TensorPlan]
    outputs: list[OutputPlan]
    scalar_inputs: list[int]
    red_roots: tuple[int, ...]
    aliases: dict[int, int] = field(default_factory=dict)
    detached: set[int] = field(default_factory=set)
    reduce_ops: tuple[str, ...] = ()
    # Size relations the kernel relies on, compared by the launcher before a launch (a mismatch
    # runs the eager fallback, which computes eager's result or raises eager's error):
    # every (group input, dim) that walks an axis has that axis' size ...
    axis_uses: list[tuple[int, int, int]] = field(default_factory=list)
    # ... and (axis or None for a size-1 dim, expected) pairs from the rows' ``size_checks``;
    # expected is an int or ("input", i), a group input holding an int.
    size_checks: list[tuple[Optional[int], Any]] = field(default_factory=list)


class _Builder(ExprBuilder):
    """An ExprBuilder whose reductions become identities while lowering a trivial reduction node,
    and column sums while lowering a column-sum node (``column``)."""

    trivial = False
    column = False

    def reduce(self, op: str, e: Expr, dtype: Optional[torch.dtype] = None) -> Expr:
        if self.trivial:
            out = self.cast(e, dtype or e.dtype)
            if op == "sum" and out.dtype.is_floating_point:
                # eager's sum starts from +0: a sum over size-1 dims of -0 is +0 (rsqrt, a
                # division or log after it tells the signs apart; fuzz graph 1435 of CPU seed 34722)
                out = self.call("add", out, self.const(0.0, out.dtype))
            return out
        if self.column:
            if op != "sum":
                raise LoweringError(f"a column reduction must be a sum, not {op}")
            dtype = compute_dtype(dtype or e.dtype)
            return self._intern(ColumnSum(op, (self.cast(e, dtype),), dtype))
        return super().reduce(op, e, dtype)

    def reduction_size(self, dtype: torch.dtype) -> Expr:
        if self.trivial:
            return self.const(1, dtype)
        return super().reduction_size(dtype)

    def at_first(self, e: Expr, load: type = FirstLoad) -> Expr:
        if self.trivial:
            return e
        return super().at_first(e, load)


def _dense(t: TensorType) -> TensorType:
    return replace(t, contiguity=tuple(True for _ in t.stride_order))


def _reference(nodes: list[Node], axes: Axes, sub: Graph) -> Value:
    """The value whose layout orders the loops: a (row) reduction's input, else the widest output."""
    for n in nodes:
        if axes.node_reduced.get(n) and axes.node_reduced[n] != axes.columns:
            row = lookup(n.kind)
            v = bind(row, n)[0][row.promote[0]]
            if isinstance(v, Value):
                return v
    values = [o for o in sub.outputs] + [v for v in sub.inputs if isinstance(v.type, TensorType)]
    return max(values, key=lambda v: len([a for a in axes.of.get(v, ()) if a is not None]))


def lower_reduction_group(sub: Graph, name: str = "kernel") -> tuple[ReductionKernel, ReductionPlan]:
    """Lower a fusion subgraph holding reductions / normalizations to a kernel and launch plan."""
    nodes = list(sub.block.nodes)
    axes = analyze(nodes, columns=True)
    if isinstance(axes, str):
        raise LoweringError(axes)
    outs = sub.outputs
    for o in outs:
        if not isinstance(o.type, TensorType) or not o.type.complete:
            raise LoweringError(f"output %{o.name} has no complete profiled type")
    tensor_inputs = [(i, v) for i, v in enumerate(sub.inputs) if isinstance(v.type, TensorType)]
    for _, v in tensor_inputs:
        if not v.type.complete:
            raise LoweringError(f"input %{v.name} has no complete profiled type")

    # 1. axes and their sources
    def axes_of(v: Value) -> tuple[Optional[int], ...]:
        return axes.of.get(v, tuple(None for _ in v.type.sizes))

    source: dict[int, tuple[int, int]] = {}
    for i, v in tensor_inputs:
        for d, a in enumerate(axes_of(v)):
            if a is not None:
                source.setdefault(a, (i, d))
    domain = {a for v in list(sub.inputs) + list(outs) if isinstance(v.type, TensorType) for a in axes_of(v) if a is not None}
    domain |= set(axes.reduced)
    missing = sorted(domain - set(source))
    if missing:
        raise LoweringError(f"loop axes {missing} are not sized by any input")

    # 2. roots: kept axes, then reduced axes, in the reference's stride order
    ref_value = _reference(nodes, axes, sub)
    ref, ref_axes = ref_value.type, axes_of(ref_value)
    order = [ref_axes[d] for d in ref.stride_order if ref_axes[d] is not None]
    order = sorted(domain - set(order)) + order
    kept = [a for a in order if a not in axes.reduced]
    red = [a for a in order if a in axes.reduced]

    io_types = [(v.type, axes_of(v)) for _, v in tensor_inputs] + [(_dense(o.type), axes_of(o)) for o in outs]

    def contiguous_pair(t: TensorType, ax: tuple, a: int, b: int) -> bool:
        m = {x: d for d, x in enumerate(ax) if x is not None}
        if a not in m and b not in m:
            return True
        if a not in m or b not in m:
            return False
        pos = t.stride_order.index(m[a])
        return pos + 1 < len(t.stride_order) and t.stride_order[pos + 1] == m[b] and t.contiguity[pos]

    # random rows key their numbers on the row-major linear index of their output: a root may
    # only cover axes consecutive in that order (``_random_linear``)
    rank = _random_ranks(nodes, axes_of, domain)
    roots: list[list[int]] = []
    for cls in (kept, red):
        start = len(roots)
        for a in cls:
            if len(roots) > start and all(contiguous_pair(t, ax, roots[-1][-1], a) for t, ax in io_types) \
                    and (rank is None or rank[a] == rank[roots[-1][-1]] + 1):
                roots[-1].append(a)
            else:
                roots.append([a])
    linear = None if rank is None else \
        [tuple(q for q, rq in enumerate(roots) if rq and r and rank[rq[0]] > rank[r[-1]]) for r in roots]
    if not roots:
        roots = [[]]        # 0-dim / all-size-1 groups: one root of extent 1 (every tensor broadcasts)
    red_roots = tuple(r for r, g in enumerate(roots) if g and g[0] in axes.reduced)

    # 3. tensor params
    params: list[TensorParam] = []
    tplans: list[TensorPlan] = []

    def add_param(label: str, t: TensorType, ax: tuple, is_output: bool, pos: int) -> int:
        m = {x: d for d, x in enumerate(ax) if x is not None}
        kinds, dims = [], []
        for group in roots:
            mine = [m[a] for a in group if a in m]
            dims.append(mine)
            if not mine:
                kinds.append("bcast")
                continue
            p = t.stride_order.index(mine[-1])
            kinds.append("unit" if p == len(t.stride_order) - 1 and t.contiguity[p] else "strided")
        dense = bool(kinds) and all(k != "bcast" for k in kinds) and kinds[-1] == "unit" and all(
            contiguous_pair(t, ax, roots[r][-1], roots[r + 1][0]) for r in range(len(roots) - 1))
        params.append(TensorParam(label, t.dtype, is_output, tuple(kinds), dense))
        tplans.append(TensorPlan(label, is_output, pos, dims, t.dtype))
        return len(params) - 1

    b = _Builder()
    env: dict[Value, Any] = {}
    scalars: list[ScalarParam] = []
    scalar_inputs: list[int] = []
    for i, v in enumerate(sub.inputs):
        if isinstance(v.type, TensorType):
            k = add_param(f"t{len(params)}", v.type, axes_of(v), False, i)
            env[v] = b.load(k, v.type.dtype)
            continue
        dt = {"int": torch.int64, "float": torch.float64, "bool": torch.bool}.get(v.type.name)
        if dt is None:
            env[v] = None           # a shape list only the eager fallback reads
            continue
        scalars.append(ScalarParam(f"a{len(scalars)}", dt))
        scalar_inputs.append(i)
        env[v] = b.arg(len(scalars) - 1, dt)

    # 4. expressions
    for node in nodes:
        b.trivial = is_reduction_node(node) and not axes.node_reduced.get(node)
        b.column = bool(axes.columns) and axes.node_reduced.get(node) == axes.columns
        lower_node(node, env, b)
        b.trivial = b.column = False

    same = returned_inputs(sub.inputs, nodes)
    stores, outputs, aliases, detached = [], [], {}, set()
    for k, o in enumerate(outs):
        t = o.type
        outputs.append(OutputPlan(t.dtype, axes_of(o), t.stride_order, t.device))
        e = env[o]
        if isinstance(e, Load) and o in same:
            # eager returns the input itself (no-op cast, dropout in eval); an op that computes
            # the identity here (a reduction over size-1 dims, floor of an int) allocates
            src = sub.inputs[tplans[e.tensor].position]
            if src is same[o] and src.type.dtype == t.dtype and src.type.sizes == t.sizes \
                    and src.type.stride_order == t.stride_order:
                aliases[k] = tplans[e.tensor].position
                if through_detach(o, src):
                    detached.add(k)
                continue
        if not isinstance(e, Expr):
            e = b.const(e, t.dtype)
        col = _through_casts(e, t.dtype)
        if isinstance(col, ColumnSum):
            stores.append(_column_store(o, col, axes, axes_of, add_param, params, k))
            continue
        p = add_param(f"t{len(params)}", _dense(t), axes_of(o), True, k)
        stores.append((p, b.cast(e, compute_dtype(t.dtype))))

    every = topo_exprs([e for _, e in stores])
    if any(isinstance(e, ColumnSum) for e in every):
        raise LoweringError("a column sum feeds another value of the group (only its own output may read it)")
    reduces = [e for e in every if isinstance(e, Reduce)]
    if reduces and not red_roots:
        raise LoweringError("the group reduces, but no reduced loop axis is left")
    kind = "none"
    if red_roots and reduces:
        # The kind follows the inputs that span the loop domain (the bulk of the bytes): a
        # per-reduced-index vector (RMSNorm's saved rstd [N, 1] in the weight gradient's column
        # sum) is contiguous along the reduced root, yet the [N, C] operands are read along C.
        full_inputs = [t for t in params if not t.is_output and "bcast" not in t.dim_kinds] or \
            [t for t in params if not t.is_output]
        ref_param = next((t for t in full_inputs if t.dim_kinds[red_roots[-1]] == "unit"), None)
        # a lone (strided or expanded) row has no kept dim for the outer schedules to spread
        kind = "inner" if ref_param is not None or len(red_roots) == len(roots) else "outer"
        row_outputs = [t for t in params if t.is_output and "bcast" not in t.dim_kinds
                       and t.dim_kinds[red_roots[-1]] == "unit"]
        narrow = all(_narrow_columns(sub, tplans[j], red_roots) for j, t in enumerate(params) if t in full_inputs)
        if kind == "outer" and full_inputs and row_outputs and narrow:
            # kept dims inside the reduced one span fewer than a warp and an output is written
            # along the reduced dim (CaiT's softmax over keys with its 4 heads innermost, after
            # the talking-heads projection, into eager's contiguous result): an outer kernel's
            # warp would read 4-element pieces of 8 rows and write 32 rows one element each, a
            # row kernel reads its strided row (the neighbours' pieces stay in L2) and writes it
            # contiguously
            kind = "inner"
    elif red_roots:
        # the group's reductions reach no output (a sum read only as type_as's dtype argument:
        # fuzz graph 7521 of seed 8787): nothing is reduced, every root is walked as a kept one
        red_roots = ()
    if axes.columns and kind != "inner":
        raise LoweringError("column sums need a row kernel whose reduced axes are the contiguous ones")
    kernel = ReductionKernel(name, params, scalars, len(roots), stores, red_roots=red_roots, kind=kind,
                             linear=linear)
    kernel.stores = _multiply_by_row_reciprocals(kernel, b)
    plan = ReductionPlan(roots, source, tplans, outputs, scalar_inputs, red_roots, aliases, detached,
                         tuple(sorted({e.op for e in reduces})))
    plan.axis_uses = [(i, d, a) for i, v in tensor_inputs for d, a in enumerate(axes_of(v))
                      if a is not None and source[a] != (i, d)]
    plan.size_checks = _size_checks(nodes, sub, axes_of)
    return kernel, plan


def _narrow_columns(sub: Graph, tp: "TensorPlan", red_roots: tuple) -> bool:
    """Do the kept dims of input ``tp`` with strides below its (last) reduced dim's span fewer
    than 32 elements in the profiled sizes (the columns an outer kernel's warp would spread)?"""
    t = sub.inputs[tp.position].type
    rd = tp.dims[red_roots[-1]]
    if not rd or t.sizes is None or t.strides is None:
        return False
    rs, inner = t.strides[rd[-1]], 1
    for r, dims in enumerate(tp.dims):
        if r not in red_roots:
            for d in dims:
                if t.sizes[d] > 1 and t.strides[d] < rs:
                    inner *= t.sizes[d]
    return inner < 32


def _through_casts(e: Expr, dtype: torch.dtype) -> Expr:
    """``e`` without the casts and the rounding to the output's precision (``dtype`` fp16 / bf16)
    that a cast to the output's dtype lowers to: a column sum's launcher casts the summed slots
    to the output's dtype, which rounds the same way."""
    rounding = {torch.float16: "round_half", torch.bfloat16: "round_bf16"}.get(dtype)
    while isinstance(e, Cast) or (isinstance(e, Call) and e.op == rounding):
        e = e.arg if isinstance(e, Cast) else e.args[0]
    return e


def _column_store(o: Value, col: ColumnSum, axes: Axes, axes_of, add_param, params: list, out: int) -> tuple:
    """The store of column sum ``col`` (output ``o``): its summand into a partials tensor of the
    accumulator dtype, which walks the reduced roots (unit or broadcast; the launcher allocates
    it [slots, reduced extents] and sums the slots into ``o``)."""
    t = o.type
    misfit = column_output_misfit(o, axes)
    if misfit:
        raise LoweringError(misfit)
    k = add_param(f"t{len(params)}", replace(_dense(t), dtype=col.dtype), axes_of(o), True, out)
    p = params[k]
    if "strided" in p.dim_kinds:
        raise LoweringError(f"column sum %{o.name} spans reduced roots that do not coalesce")
    p.partials = True
    return (k, col.args[0])


def _random_ranks(nodes: list[Node], axes_of, domain: set[int]) -> Optional[dict[int, int]]:
    """Axis -> its dim in the output of the group's random rows (row-major rank), or None
    without random rows. Every random row's output must walk every loop axis, in one order: the
    partition only forms such groups (``ops.axes.random_misfit``)."""
    from ...ops.random import RANDOM_ROWS

    rank: Optional[dict[int, int]] = None
    for n in nodes:
        row = lookup(n.kind)
        if row is None or row.name not in RANDOM_ROWS:
            continue
        mine = [a for a in axes_of(n.outputs[0]) if a is not None]
        if set(mine) != domain or (rank is not None and mine != sorted(rank, key=rank.__getitem__)):
            raise LoweringError(f"{n.where()}: random numbers need the op's output to span the loop axes")
        rank = {a: k for k, a in enumerate(mine)}
    return rank


def _size_checks(nodes: list[Node], sub: Graph, axes_of) -> list[tuple[Optional[int], Any]]:
    """The rows' size relations (normalized_shape vs trailing dims ...) as (axis, expected)."""
    inputs = {v: i for i, v in enumerate(sub.inputs)}
    out: list[tuple[Optional[int], Any]] = []
    for n in nodes:
        row = lookup(n.kind)
        rule = getattr(row, "size_checks", None)
        if rule is None:
            continue
        for v, d, e in rule(n, bind(row, n)[0]):
            ax = axes_of(v)
            if not 0 <= d < len(ax):
                continue
            if isinstance(e, Value):
                if e not in inputs:
                    raise LoweringError(f"{n.kind}: a size the kernel relies on is computed inside the group")
                e = ("input", inputs[e])
            elif not isinstance(e, int):
                continue
            out.append((ax[d], e))
    return out


def _multiply_by_row_reciprocals(kernel: ReductionKernel, b: ExprBuilder) -> list:
    """``x / s`` with ``s`` a per-row value (softmax's sum) -> ``x * (1 / s)``: one division per
    row instead of one per element (what eager's CPU softmax does too; within an ulp)."""
    new: dict[int, Expr] = {}
    full: dict[int, bool] = {}
    for e in topo_exprs([e for _, e in kernel.stores]):
        args = getattr(e, "args", None) or ((e.arg,) if isinstance(e, Cast) else ())
        nargs = [new[id(a)] for a in args]
        if isinstance(e, Load):
            full[id(e)], new[id(e)] = not kernel.is_row(e.tensor), e
            continue
        if isinstance(e, LinearIndex):
            full[id(e)], new[id(e)] = True, e
            continue
        full[id(e)] = not isinstance(e, Reduce) and any(full[id(a)] for a in args)
        if isinstance(e, Reduce):
            new[id(e)] = b._intern(Reduce(e.op, tuple(nargs), e.dtype))
        elif isinstance(e, Cast):
            new[id(e)] = b.cast(nargs[0], e.dtype)
        elif isinstance(e, Call) and e.op == "div" and e.dtype.is_floating_point and full[id(args[0])] \
                and not full[id(args[1])]:
            new[id(e)] = b.mul(nargs[0], b.call("reciprocal", nargs[1]))
        elif isinstance(e, Call):
            new[id(e)] = b._intern(Call(e.op, tuple(nargs), e.dtype))
        else:
            new[id(e)] = e
    return [(p, new[id(e)]) for p, e in kernel.stores]
