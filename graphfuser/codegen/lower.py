"""Lowering: a typed fusion subgraph -> kernel IR (``kir.Kernel``) + a host-side launch plan.

Steps:

1. The iteration space is the broadcast of every tensor in the group (right-aligned), ordered
   by the reference output's profiled stride order (outermost first); dims that are 1 in every
   tensor are dropped.
2. Adjacent iteration dims are coalesced when every tensor is either broadcast in both or
   contiguous across them (the guards guarantee the contiguity), so a dense tensor costs one
   index. What is left are the kernel's root dims; their extents are run-time arguments.
3. Per tensor and root: ``bcast`` (stride 0, costs nothing), ``unit`` (stride 1) or ``strided``
   (a run-time stride argument). A tensor dense over all roots in order is marked ``dense``.
4. The group's nodes are lowered through their op-table rows into scalar expressions.

The ``LaunchPlan`` records, for the host program, where each root extent and stride comes from
and how each output is allocated (its profiled stride order, dense), so sizes stay run-time
arguments: a new batch size reuses the kernel.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from ..ir.graph import Graph, Node, Value
from ..ir.types import TensorType
from ..ops import bind, host_scalar, lookup
from ..ops.table import OpCall
from ..ir.kir import Expr, ExprBuilder, Kernel, ScalarParam, TensorParam, compute_dtype


# (floating, bool) -> the kernel argument type a host-read 0-dim tensor is passed as
_HOST_ARG_DTYPES = {(True, False): torch.float64, (False, False): torch.int64, (False, True): torch.bool}


class LoweringError(ValueError):
    """The group cannot be expressed as one kernel; the message says why."""


@dataclass
class TensorPlan:
    """How the host reads one tensor: which input/output, its dims per root."""

    name: str
    is_output: bool
    position: int                      # group input index, or output index
    dims: list[list[int]]              # per root: the tensor's own dims merged into it ([] = bcast)
    dtype: torch.dtype
    flipped: tuple[int, ...] = ()      # the tensor's own dims read back to front (a flip: ``_Flips``)


@dataclass
class LaunchPlan:
    root_dims: list[list[int]]         # per root: iteration dims (output dim numbering) it covers
    dim_source: dict[int, tuple[int, int]]  # iteration dim -> (group input index, tensor dim)
    out_rank: int
    outputs: list[tuple[torch.dtype, tuple[int, ...], tuple[int, ...], torch.device]]
    #        (dtype, sizes template: -1 = iteration dim size, 1 = size 1; stride order outer->inner, device)
    tensors: list[TensorPlan]
    scalar_inputs: list[int]           # group input index of each scalar param
    aliases: dict[int, int] = field(default_factory=dict)  # output index -> group input index
    detached: set[int] = field(default_factory=set)  # aliased outputs returned as ``input.detach()``
    strided: list[tuple[int, int]] = field(default_factory=list)  # (tensor param, root) needing a stride arg
    host_scalars: list[int] = field(default_factory=list)  # group inputs: CPU 0-dim tensors passed by value


def _aligned(t: TensorType, out_rank: int) -> dict[int, int]:
    """iteration dim -> tensor dim for the tensor's non-broadcast dims (right-aligned)."""
    off = out_rank - t.rank
    return {off + d: d for d in range(t.rank) if t.sizes[d] != 1}


def lower_group(sub: Graph, name: str = "kernel", coalesce: bool = True) -> tuple[Kernel, LaunchPlan]:
    """Lower a fusion subgraph with complete profiled types to a kernel and its launch plan.

    ``coalesce=False`` keeps one root per iteration dim (hand-written schedules address the
    output's logical dims, so they need them).
    """
    outs = sub.outputs
    out_types = [o.type for o in outs]
    for o, t in zip(outs, out_types):
        if not isinstance(t, TensorType) or not t.complete:
            raise LoweringError(f"output %{o.name} has no complete profiled type")
    device = out_types[0].device
    # CPU 0-dim tensors of a CUDA group are read on the host and passed as scalar arguments
    host = {i for i, v in enumerate(sub.inputs) if isinstance(v.type, TensorType) and v.type.complete
            and host_scalar(v.type, device)}
    tensor_inputs = [(i, v) for i, v in enumerate(sub.inputs) if isinstance(v.type, TensorType) and i not in host]
    for i, v in tensor_inputs:
        if not v.type.complete:
            raise LoweringError(f"input %{v.name} has no complete profiled type")
    out_rank = max([t.rank for t in out_types] + [v.type.rank for _, v in tensor_inputs])

    # 1. iteration dims and their order
    typed = [("in", i, v.type) for i, v in tensor_inputs] + [("out", k, t) for k, t in enumerate(out_types)]
    live: set[int] = set()
    for _, _, t in typed:
        live |= set(_aligned(t, out_rank))
    ref = max(out_types, key=lambda t: (len(_aligned(t, out_rank)), t.rank))
    ref_map = _aligned(ref, out_rank)
    inv = {d: od for od, d in ref_map.items()}
    order = [inv[d] for d in ref.stride_order if d in inv]
    order = sorted(live - set(order)) + order          # dims the reference lacks go outermost
    dim_source: dict[int, tuple[int, int]] = {}
    for i, v in tensor_inputs:
        for od, d in _aligned(v.type, out_rank).items():
            dim_source.setdefault(od, (i, d))
    missing = [od for od in order if od not in dim_source]
    if missing:
        raise LoweringError(f"iteration dims {missing} are not sized by any input")

    # flipped iteration dims (``flip`` nodes) stay roots of their own: a flipped read of a
    # tensor steps back along them, so no dense run crosses them
    flips = _Flips(sub, out_rank)

    # 2. coalescing
    def contiguous_pair(t: TensorType, a: int, b: int) -> bool:
        if a in flips.dims or b in flips.dims:
            return False
        m = _aligned(t, out_rank)
        if a not in m and b not in m:
            return True
        if a not in m or b not in m:
            return False
        da, db = m[a], m[b]
        pos = t.stride_order.index(da)
        return pos + 1 < len(t.stride_order) and t.stride_order[pos + 1] == db and t.contiguity[pos]

    out_layouts = [_dense(t) for t in out_types]
    roots: list[list[int]] = []
    # random kernels merge only dims adjacent in row-major order, so the row-major linear index
    # is a sum of root indices times root extents (``_linear_strides``)
    rank_of = {od: k for k, od in enumerate(sorted(live))}
    random = _has_random(sub)
    for od in order:
        if coalesce and roots and all(contiguous_pair(t, roots[-1][-1], od) for t in
                         [v.type for _, v in tensor_inputs] + out_layouts) \
                and (not random or rank_of[od] == rank_of[roots[-1][-1]] + 1):
            roots[-1].append(od)
        else:
            roots.append([od])
    linear = _linear_strides(sub, roots, out_rank, live)
    if not roots:
        # 0-dim or all-size-1 tensors: one root of extent 1 that every tensor broadcasts over
        roots = [[]]
    n_roots = len(roots)

    # 3. tensor params
    params: list[TensorParam] = []
    tplans: list[TensorPlan] = []
    strided: list[tuple[int, int]] = []

    def add_param(label: str, t: TensorType, is_output: bool, pos: int, flip: frozenset = frozenset()) -> int:
        m = _aligned(t, out_rank)
        kinds, dims = [], []
        for r, group in enumerate(roots):
            mine = [m[od] for od in group if od in m]
            dims.append(mine)
            if not mine:
                kinds.append("bcast")
                continue
            inner = mine[-1]
            p = t.stride_order.index(inner)
            unit = p == len(t.stride_order) - 1 and t.contiguity[p] and not set(group) & flip
            kinds.append("unit" if unit else "strided")
            if not unit:
                strided.append((len(params), r))
        dense = not flip and all(k != "bcast" for k in kinds) and kinds[-1] == "unit" and all(
            contiguous_pair(t, roots[r][-1], roots[r + 1][0]) for r in range(n_roots - 1))
        params.append(TensorParam(label, t.dtype, is_output, tuple(kinds), dense))
        tplans.append(TensorPlan(label, is_output, pos, dims, t.dtype, tuple(sorted(m[od] for od in flip))))
        return len(params) - 1

    env: dict[Value, Any] = {}
    b = ExprBuilder()
    scalars: list[ScalarParam] = []
    scalar_inputs: list[int] = []
    for i, v in enumerate(sub.inputs):
        if isinstance(v.type, TensorType) and i not in host:
            k = add_param(f"t{len(params)}", v.type, False, i)
            env[v] = b.load(k, v.type.dtype)
        elif i in host:
            dt = _HOST_ARG_DTYPES[v.type.dtype.is_floating_point, v.type.dtype == torch.bool]
            scalars.append(ScalarParam(f"a{len(scalars)}", dt))
            scalar_inputs.append(i)
            env[v] = b.arg(len(scalars) - 1, dt) if dt == compute_dtype(v.type.dtype) else \
                b.cast(b.arg(len(scalars) - 1, dt), compute_dtype(v.type.dtype))
        else:
            dt = {"int": torch.int64, "float": torch.float64, "bool": torch.bool}.get(v.type.name)
            if dt is None:
                raise LoweringError(f"input %{v.name} of type {v.type} cannot be a kernel argument")
            scalars.append(ScalarParam(f"a{len(scalars)}", dt))
            scalar_inputs.append(i)
            env[v] = b.arg(len(scalars) - 1, dt)

    # 4. expressions
    if flips.flip:
        flips.lower(env, b, lambda i, v, f: add_param(f"t{len(params)}", v.type, False, i, f))
    else:
        for node in sub.block.nodes:
            lower_node(node, env, b)
    same = returned_inputs(sub.inputs, sub.block.nodes)

    stores, outputs, aliases, detached = [], [], {}, set()
    for k, (o, t) in enumerate(zip(outs, out_types)):
        e = env[o]
        sizes = tuple(1 if s == 1 else -1 for s in t.sizes)
        outputs.append((t.dtype, sizes, t.stride_order, t.device))
        if o in same:
            # eager returns its input itself here (a group input, x.to(x.dtype), dropout in eval
            # mode): so do we. Ops that merely compute the identity (floor of an int) allocate.
            src = same[o]
            if src.type.dtype == t.dtype and src.type.rank == t.rank and src.type.sizes == t.sizes \
                    and src.type.stride_order == t.stride_order:
                aliases[k] = sub.inputs.index(src)
                if through_detach(o, src):
                    detached.add(k)
                continue
        if not isinstance(e, Expr):
            e = b.const(e, t.dtype)
        p = add_param(f"t{len(params)}", out_layouts[k], True, k)
        stores.append((p, b.cast(e, compute_dtype(t.dtype))))
    kernel = Kernel(name, params, scalars, n_roots, stores, linear=linear)
    plan = LaunchPlan(roots, dim_source, out_rank, outputs, tplans, scalar_inputs, aliases, detached, strided,
                      sorted(host))
    return kernel, plan


class _Flips:
    """A pointwise group's ``flip`` nodes as index remaps (``ops/movement.py``).

    ``dims``: the iteration dims some flip reverses (a flip of a size-1 dim is the identity).
    ``lower`` fills ``env`` as the plain node walk does, except that a value under a set of
    flipped iteration dims ``F`` is built again from its producers with ``F`` applied to their
    loads: a group input read under ``F`` is a parameter of its own (the same tensor through a
    pointer to its last element along ``F`` and negated strides there, ``compiled._input_pointer``),
    a constant or scalar is what it is, a flip toggles its dims in ``F``. Pointwise ops commute
    with any remap of their indices, so the result is the producers' values at the flipped index.
    """

    def __init__(self, sub: Graph, out_rank: int) -> None:
        from ..ops.movement import flip_dims

        self.sub, self.out_rank = sub, out_rank
        self.flip: dict[Node, frozenset] = {}
        for n in sub.block.nodes:
            if n.kind != "aten::flip":
                continue
            if _has_random(sub):
                raise LoweringError(f"{n.where()}: a flip beside a random row")
            t = n.inputs[0].type
            off = out_rank - t.rank
            self.flip[n] = frozenset(off + d for d in flip_dims(n) if t.sizes[d] != 1)
        self.dims: frozenset = frozenset().union(*self.flip.values())

    def lower(self, env: dict, b: ExprBuilder, param) -> None:
        sub, out_rank = self.sub, self.out_rank
        inputs = {v: i for i, v in enumerate(sub.inputs)}
        envs: dict[frozenset, dict] = {frozenset(): env}
        loads: dict[tuple[Value, frozenset], Expr] = {}

        def value(v: Value, f: frozenset) -> Any:
            e = envs.setdefault(f, {})
            if v in e:
                return e[v]
            if v in inputs:
                t = v.type
                mine = f & frozenset(out_rank - t.rank + d for d in range(t.rank) if t.sizes[d] != 1) \
                    if isinstance(t, TensorType) and f else frozenset()
                if not mine:
                    e[v] = env[v]
                else:
                    if (v, mine) not in loads:
                        loads[v, mine] = b.load(param(inputs[v], v, mine), t.dtype)
                    e[v] = loads[v, mine]
                return e[v]
            node = v.node
            if node.kind == "aten::flip":
                e[v] = value(node.inputs[0], f ^ self.flip[node])
                return e[v]
            for u in node.inputs:
                value(u, f)
            lower_node(node, e, b)
            return e[v]

        for node in sub.block.nodes:
            for o in node.outputs:
                value(o, frozenset())


def returned_inputs(inputs: list[Value], nodes: list) -> dict[Value, Value]:
    """Values that eager returns as one of ``inputs`` itself (not a copy) or as a view of all of
    it: the inputs, and the results of no-op casts / eval-mode dropout / ``detach`` of such values
    (``through_detach`` tells which are views). Only those outputs may be handed
    back as the input tensor; an op that merely computes the identity (floor of an int, a
    reduction over no dim) allocates in eager, and a later in-place write must not reach the input.
    """
    same: dict[Value, Value] = {v: v for v in inputs if isinstance(v.type, TensorType)}
    for node in nodes:
        if node.kind in ("prim::Constant", "prim::ListConstruct") or len(node.outputs) != 1:
            continue
        out_t = node.output.type
        src_t = node.inputs[0].type if node.inputs else None
        already = isinstance(src_t, TensorType) and isinstance(out_t, TensorType) and src_t.dtype == out_t.dtype
        if already and node.inputs[0] in same and _returns_self(node, lookup(node.kind).name):
            same[node.output] = same[node.inputs[0]]
    return same


def through_detach(v: Value, src: Value) -> bool:
    """Whether the chain of ``returned_inputs`` from ``src`` to ``v`` passes a ``detach``: eager
    returns a view of ``src`` (its strides, cut from autograd), not ``src`` itself."""
    while v is not src and v.node is not None:
        if v.node.kind == "aten::detach":
            return True
        v = v.node.inputs[0]
    return False


def _has_random(sub: Graph) -> bool:
    from ..ops.random import RANDOM_ROWS

    return any(getattr(lookup(n.kind), "name", None) in RANDOM_ROWS for n in sub.block.nodes)


def _linear_strides(sub: Graph, roots: list[list[int]], out_rank: int, live: set[int]) -> Optional[list[tuple]]:
    """Random rows key their numbers on the row-major linear index of their output. Per root: the
    roots whose extents multiply into its row-major stride (``Kernel.linear``), so the index is
    the same whatever the iteration order (transposed, channels-last) and schedule. None without
    random rows. The op's output must span the iteration space and each root cover consecutive
    dims; otherwise the group runs its fallback, which draws the same numbers (``ops/philox.py``)."""
    from ..ops.random import RANDOM_ROWS

    random = False
    for node in sub.block.nodes:
        row = lookup(node.kind)
        if row is None or row.name not in RANDOM_ROWS:
            continue
        random = True
        t = node.outputs[0].type
        if t.rank != out_rank or set(_aligned(t, out_rank)) != live:
            raise LoweringError(f"{node.where()}: random numbers need the op's output to span the iteration space")
        ranks = {od: k for k, od in enumerate(sorted(live))}
        if any([ranks[od] for od in r] != list(range(ranks[r[0]], ranks[r[0]] + len(r))) for r in roots if r):
            raise LoweringError(f"{node.where()}: random numbers need each iteration root to cover consecutive dims")
    if not random:
        return None
    return [tuple(q for q, rq in enumerate(roots) if rq and r and rq[0] > r[-1]) for r in roots]


def _returns_self(node, row_name: str) -> bool:
    """Whether eager returns the input tensor itself (not a copy) when the dtype is unchanged."""
    if row_name == "dropout":
        return True           # fused only with train=False or p=0, where eager returns the input
    if row_name == "detach":
        return True           # a view of the whole input (plan.detached)
    if node.kind not in ("aten::to", "aten::type_as"):
        return False          # aten::_to_copy always copies
    # x.to(..., copy=True) copies: any constant True after self (copy, or non_blocking) -> copy
    return not any(v.is_constant and v.constant() is True for v in node.inputs[1:])


def lower_node(node, env: dict, b: ExprBuilder, emulate: Optional[bool] = None) -> None:
    """Lower one subgraph node through its op-table row into ``env`` (Value -> Expr or constant).

    Shared by the pointwise and the reduction lowering. Outputs are cast to their compute dtype;
    a cast to fp16/bf16 rounds to that precision (unless it is a no-op cast), as eager does.
    With ``emulate`` (default: the ``emulate_precision_casts`` knob) every fp16/bf16 result is
    rounded to its dtype, as eager rounds after each op; the rounding also keeps the compiler
    from contracting a multiply in one node with an add in the next.
    """
    if emulate is None:
        from ..config import config

        emulate = bool(config.emulate_precision_casts)
    if node.kind == "prim::Constant":
        env[node.output] = node.attrs.get("value")
        return
    if node.kind == "prim::ListConstruct":
        env[node.output] = [env[v] for v in node.inputs]
        return
    row = lookup(node.kind)
    if row is None:
        raise LoweringError(f"{node.where()} has no op-table row")
    if row.kind == "movement":
        raise LoweringError(f"{node.where()} re-indexes its input: only a pointwise kernel lowers it (_Flips)")
    args_v, consts, parts = bind(row, node)
    args = {k: (env[v] if isinstance(v, Value) else v) for k, v in args_v.items()}
    if row.kind == "cast":
        out_dtype, compute = node.output.type.dtype, compute_dtype(node.output.type.dtype)
    else:
        out_dtype, compute = row.result_dtypes(parts, consts)
    if emulate and out_dtype in (torch.float16, torch.bfloat16) and _rounds_scalars(node):
        _round_scalar_operands(row.name, args, parts, out_dtype, b)
    dev = next((v.type.device for v in node.inputs if getattr(v.type, "device", None) is not None), None)
    types = {k: v.type for k, v in args_v.items() if isinstance(v, Value) and isinstance(v.type, TensorType)}
    result = row.lower(OpCall(args, parts, out_dtype, compute, b, dev.type if dev is not None else "", types))
    results = result if isinstance(result, tuple) else (result,)
    src_t = node.inputs[0].type if node.inputs else None
    for o, e in zip(node.outputs, results):
        dt = o.type.dtype
        e = b.cast(e, compute_dtype(dt))
        no_op = isinstance(src_t, TensorType) and src_t.dtype == dt
        if dt in (torch.float16, torch.bfloat16) and (emulate or (row.kind == "cast" and not no_op)):
            e = b.call("round_half" if dt == torch.float16 else "round_bf16", e)
        env[o] = e


# Rows whose eager kernel computes with a Python-scalar operand converted to the tensor's
# fp16/bf16 dtype first (TensorIterator's common-dtype cast of the wrapped number), measured on
# torch's CPU kernels; mul and div keep the unrounded scalar (their reduced-float fast path).
# CUDA kernels keep every scalar unrounded (see _rounds_scalars).
_HALF_SCALAR_ARGS = {"add": ("other", "alpha"), "sub": ("other", "alpha"), "rsub": ("other", "alpha"),
                     "pow": ("exponent",), "fmod": ("other",), "remainder": ("other",)}


def _rounds_scalars(node) -> bool:
    """Eager's CPU kernels round a wrapped scalar to the tensor's half type first; its CUDA kernels
    convert the scalar straight to the fp32 compute type (``opmath``) and do not."""
    t = node.outputs[0].type if node.outputs else None
    return isinstance(t, TensorType) and t.device is not None and t.device.type == "cpu"


def _round_scalar_operands(row_name: str, args: dict, parts: dict, dtype: torch.dtype, b: ExprBuilder) -> None:
    """Round the wrapped-scalar operands of ``row_name`` to ``dtype`` in place (emulation only)."""
    prim = "round_half" if dtype == torch.float16 else "round_bf16"
    for name in _HALF_SCALAR_ARGS.get(row_name, ()):
        v = args.get(name)
        if v is None or isinstance(v, (bool, str, list)):
            continue
        p = parts.get(name)
        if p is not None and p.priority != "wrapped":
            continue
        if name == "alpha" and not isinstance(v, Expr) and v == 1:
            continue
        e = v if isinstance(v, Expr) else b.const(v, torch.float32)
        args[name] = b.call(prim, b.cast(e, torch.float32))


def _dense(t: TensorType) -> TensorType:
    """The layout graphfuser allocates an output with: dense in its profiled stride order."""
    from dataclasses import replace

    return replace(t, contiguity=tuple(True for _ in t.stride_order))
