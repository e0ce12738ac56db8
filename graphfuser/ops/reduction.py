"""Reduction and normalization rows of the op table.

Every row here decomposes into the four reduction primitives of the kernel IR (``sum``,
``prod``, ``max``, ``min``; ``ExprBuilder.reduce``) plus pointwise primitives, so the kernel
IR and the renderers know nothing about softmax or layer norm. Moments (mean / var / std and
the normalizations) are a *corrected* two-pass (``_moments``): a first mean ``m0 = sum(x) / N``,
then the shifted sums ``s1 = sum(x - m0)``, ``s2 = sum((x - m0)^2)``, ``mean = m0 + s1 / N``,
``M2 = s2 - s1 * s1 / N``. ``m0`` is within rounding of the row, so the shifted sums do not
cancel; for a constant row ``x - m0`` is one small exactly representable value, every sum of it
is exact, and the mean comes out exactly the row's value with ``M2 == 0`` (eager's Welford has
that property too; ``sum / N`` alone does not, and ``(x - mean) * rsqrt(var + eps)`` turns its
rounding into an O(1) error). It keeps the pass structure of the plain two-pass (the second
pass carries two sums of one difference instead of one) and combines across threads and blocks
by plain sums, where Welford needs a division per element and Chan's merge at every combine.
A row also gives its ``DimPlan``
(``ops/axes.py``): which dims of its input it reduces and how its outputs and parameter tensors
line up with the input.

Arguments are bound by the node's TorchScript schema (``aten::sum`` has overloads of different
arity); dims, keepdim, dtype, correction and eps must be constants, and ``dim`` lists built by
``prim::ListConstruct`` from constants count as constants. So do values the graph computes or
takes as arguments when every profiling run saw the same value (``ops.profiled_args``): the
fusion group holds them as constants and its guard checks them; a value that changed between
profiling runs keeps the node unfused, and the partition log says so.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

import torch

from ..codegen.kir import FLOAT_TYPES, INT_TYPES, Expr, compute_dtype
from ..ir.graph import Node, Value
from ..ir.types import TensorType
from .axes import DimPlan
from .table import OpCall, OpRow, register

_SCALAR_TYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.float32,
                 torch.float64, torch.complex32, torch.complex64, torch.complex128, torch.bool, torch.qint8,
                 torch.quint8, torch.qint32, torch.bfloat16]


def scalar_type_code(dtype: torch.dtype) -> Optional[int]:
    """The ScalarType enum value TorchScript passes for ``dtype`` (None for one it does not list)."""
    return _SCALAR_TYPES.index(dtype) if dtype in _SCALAR_TYPES else None


def scalar_type(code: Any) -> Optional[torch.dtype]:
    """A ``ScalarType`` constant (TorchScript passes its enum value) as a torch dtype."""
    if code is None or isinstance(code, torch.dtype):
        return code
    return _SCALAR_TYPES[int(code)]


@dataclass
class ReductionRow(OpRow):
    """A row whose node reduces dims or lines tensors up other than by right alignment."""

    n_outputs: int = 1
    overloads: tuple = ()                       # argument-name tuples, by arity, for schema-less nodes
    planner: Optional[Callable[[Node, dict, dict], Union[DimPlan, str]]] = None
    out_dtype: Optional[Callable[[torch.dtype, dict], Union[torch.dtype, str]]] = None
    shape_args: tuple[str, ...] = ()            # list args whose values the kernel never reads
    # (value, dim, expected size) relations eager checks and the kernel relies on; the launcher
    # compares them before every launch. ``expected``: an int or a Value holding an int.
    size_checks: Optional[Callable[[Node, dict], list[tuple[Value, int, Any]]]] = None

    def names_for(self, node: Node) -> tuple[str, ...]:
        schema = getattr(node.schema, "schema", "") or ""
        if schema:
            names = tuple(a.name for a in torch._C.parse_schema(schema).arguments)
            if all(n in self.arg_names for n in names):
                return names
        fits = [o for o in self.overloads if len(o) >= len(node.inputs)]
        if len(fits) > 1:
            typed = [o for o in fits if all(not (n == "unbiased") or node.inputs[i].type.name == "bool"
                                            for i, n in enumerate(o[:len(node.inputs)]))]
            fits = typed or fits
        return fits[0] if fits else self.arg_names

    def input_dtype(self, parts) -> torch.dtype:
        return parts[self.promote[0]].dtype

    def result_dtypes(self, parts, consts) -> tuple[torch.dtype, torch.dtype]:
        out = self.out_dtype(self.input_dtype(parts), consts) if self.out_dtype else self.input_dtype(parts)
        if isinstance(out, str):
            raise TypeError(out)
        return out, compute_dtype(out)

    def dim_plan(self, node: Node, args: dict, consts: dict) -> Union[DimPlan, str]:
        return self.planner(node, args, consts)


# -- dims -----------------------------------------------------------------------------------
def _rank(v: Any) -> int:
    return v.type.rank if isinstance(v, Value) and isinstance(v.type, TensorType) else 0


def normalize_dims(dims: Any, rank: int) -> Union[tuple[int, ...], str]:
    """``dim`` argument -> sorted non-negative dims (None or [] means every dim)."""
    if dims is None or dims == []:
        return tuple(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    if not isinstance(dims, (list, tuple)) or not all(isinstance(d, int) for d in dims):
        return f"dims {dims!r} are not constant ints"
    span = max(rank, 1)
    out = []
    for d in dims:
        if not -span <= d < span:
            return f"dim {d} is out of range for a rank-{rank} tensor"
        out.append(d % span)
    if len(set(out)) != len(out):
        return f"dim list {dims!r} repeats a dim"
    return tuple(sorted(d for d in out if d < rank))


def _reduce_plan(node: Node, args: dict, consts: dict, dim_arg: str = "dim", keep_arg: str = "keepdim",
                 tensor: str = "self") -> Union[DimPlan, str]:
    rank = _rank(args[tensor])
    dims = normalize_dims(args.get(dim_arg), rank)
    if isinstance(dims, str):
        return dims
    keep = bool(args.get(keep_arg, False))
    out = tuple(None if d in dims else d for d in range(rank)) if keep else tuple(d for d in range(rank) if d not in dims)
    return DimPlan(rank, {tensor: tuple(range(rank))}, [out] * len(node.outputs), dims)


def _softmax_plan(node: Node, args: dict, consts: dict) -> Union[DimPlan, str]:
    rank = _rank(args["self"])
    dims = normalize_dims(args["dim"], rank)
    if isinstance(dims, str):
        return dims
    return DimPlan(rank, {"self": tuple(range(rank))}, [tuple(range(rank))], dims)


def _norm_len(v: Any) -> Optional[int]:
    """Length of a ``normalized_shape`` argument: a constant list or a ``prim::ListConstruct``."""
    if isinstance(v, (list, tuple)):
        return len(v)
    if isinstance(v, int):
        return 1
    if isinstance(v, Value) and v.node is not None and v.node.kind == "prim::ListConstruct":
        return len(v.node.inputs)
    return None


def _layer_norm_plan(node: Node, args: dict, consts: dict) -> Union[DimPlan, str]:
    rank = _rank(args["input"])
    k = _norm_len(args["normalized_shape"])
    if k is None:
        return "normalized_shape is not a list literal (its length must be known)"
    if not 0 < k <= rank:
        return f"normalized_shape of length {k} for a rank-{rank} input"
    plan = {"input": tuple(range(rank))}
    for name in ("weight", "bias"):
        if isinstance(args.get(name), Value):
            if _rank(args[name]) != k:
                return f"{name} has rank {_rank(args[name])}, normalized_shape has {k} dims"
            plan[name] = tuple(range(rank - k, rank))
    red = tuple(range(rank - k, rank))
    outs = [tuple(range(rank))] + [tuple(None if d in red else d for d in range(rank))] * (len(node.outputs) - 1)
    return DimPlan(rank, plan, outs, red)


def _channel_plan(reduce_spatial: bool):
    def plan(node: Node, args: dict, consts: dict) -> Union[DimPlan, str]:
        rank = _rank(args["input"])
        if rank < 2:
            return f"{node.kind} needs an input of rank >= 2"
        p = {"input": tuple(range(rank))}
        for name in ("weight", "bias", "running_mean", "running_var"):
            if isinstance(args.get(name), Value):
                if _rank(args[name]) != 1:
                    return f"{name} must be 1-D"
                p[name] = (1,)
        if reduce_spatial:
            red = tuple(range(2, rank)) if args.get("use_input_stats") else ()
        else:       # batch_norm: batch statistics per channel in training
            red = (0,) + tuple(range(2, rank)) if args.get("training") else ()
        return DimPlan(rank, p, [tuple(range(rank))], red)
    return plan


def _group_norm_plan(node: Node, args: dict, consts: dict) -> Union[DimPlan, str]:
    """num_groups == 1: every dim but N is reduced, weight and bias line up with C.

    Other group counts are left to eager: per (N, group) statistics over C/G channels need the
    C dim split into a (G, C/G) pair of loop axes, and a loop axis here is always one whole
    tensor dim (the launcher sizes and strides it from that dim, and the guards check no
    concrete sizes). num_groups == C is the same as instance norm only while C stays equal to
    num_groups, which no guard checks, so it is not fused either."""
    rank = _rank(args["input"])
    if rank < 2:
        return f"{node.kind} needs an input of rank >= 2"
    g = args.get("num_groups")
    if not isinstance(g, int) or isinstance(g, bool):
        return "group_norm with a run-time num_groups is not fused"
    if g != 1:
        sizes = getattr(args["input"].type, "sizes", None)
        if sizes is not None and sizes[1] == g:
            return (f"group_norm with num_groups == C == {g} is not fused: it equals instance norm only "
                    f"while C stays {g}, and the guards never check concrete sizes (a call with C = "
                    f"{2 * g} would pass them); only num_groups=1 is fused")
        return (f"group_norm with num_groups={g} is not fused (only num_groups=1): statistics per group "
                f"of C/{g} channels need the channel dim split into ({g}, C/{g}) loop axes, and a loop "
                f"axis is one whole tensor dim")
    p = {"input": tuple(range(rank))}
    for name in ("weight", "bias"):
        if isinstance(args.get(name), Value):
            if _rank(args[name]) != 1:
                return f"{name} must be 1-D"
            p[name] = (1,)
    return DimPlan(rank, p, [tuple(range(rank))], tuple(range(1, rank)))


def _sum_to_size_plan(node: Node, args: dict, consts: dict) -> Union[DimPlan, str]:
    t_in, t_out = args["self"].type, node.outputs[0].type
    rank, orank = t_in.rank, t_out.rank
    if orank > rank:
        return "sum_to_size to a larger rank"
    off = rank - orank
    red = [d for d in range(off)]
    out = []
    for j in range(orank):
        d = off + j
        if t_out.sizes[j] == 1 and t_in.sizes[d] != 1:
            red.append(d)
            out.append(None)
        else:
            out.append(d)
    return DimPlan(rank, {"self": tuple(range(rank))}, [tuple(out)], tuple(red))


def list_items(v: Any) -> Optional[list[Any]]:
    """Entries of a list argument (ints, or Values for run-time entries), None when unknown."""
    if isinstance(v, int) and not isinstance(v, bool):
        return [v]
    if isinstance(v, (list, tuple)):
        return list(v)
    if isinstance(v, Value) and v.node is not None:
        if v.node.kind == "prim::Constant":
            val = v.node.attrs.get("value")
            return list(val) if isinstance(val, (list, tuple)) else None
        if v.node.kind == "prim::ListConstruct":
            out = []
            for i in v.node.inputs:
                c = list_items(i) if i.node is not None and i.node.kind == "prim::Constant" else None
                out.append(c[0] if c and len(c) == 1 else i)
            return out
    return None


def _trailing_checks(node: Node, args: dict) -> list[tuple[Value, int, Any]]:
    """layer_norm / rms_norm: input.shape[-k:] == normalized_shape (eager raises otherwise)."""
    v, items = args["input"], list_items(args.get("normalized_shape"))
    if not isinstance(v, Value) or items is None:
        return []
    rank, k = _rank(v), len(items)
    return [(v, rank - k + j, e) for j, e in enumerate(items)]


def _sum_to_size_checks(node: Node, args: dict) -> list[tuple[Value, int, Any]]:
    """sum_to_size: every non-1 entry of size equals the input's aligned dim."""
    v, items = args["self"], list_items(args.get("size"))
    if not isinstance(v, Value) or items is None:
        return []
    off = _rank(v) - len(items)
    return [(v, off + j, e) for j, e in enumerate(items) if e != 1 and off + j >= 0]


# -- dtypes ---------------------------------------------------------------------------------
def _is_int(dt: torch.dtype) -> bool:
    return dt in INT_TYPES or dt == torch.bool


def _sum_dtype(dt: torch.dtype, consts: dict) -> torch.dtype:
    given = scalar_type(consts.get("dtype"))
    if given is not None:
        return given
    return torch.int64 if _is_int(dt) else dt


def _float_dtype(what: str):
    def rule(dt: torch.dtype, consts: dict) -> Union[torch.dtype, str]:
        given = scalar_type(consts.get("dtype"))
        if given is not None:
            return given
        if _is_int(dt):
            return f"{what} of integer input needs dtype= (eager raises)"
        return dt
    return rule


def _softmax_dtype(dt: torch.dtype, consts: dict) -> Union[torch.dtype, str]:
    if consts.get("half_to_float"):
        return torch.float32
    return _float_dtype("softmax")(dt, consts)


def _same_float(dt: torch.dtype, consts: dict) -> Union[torch.dtype, str]:
    return dt if dt in FLOAT_TYPES else f"integer input ({dt}) is not fused for this op"


def _same_nonbool(dt: torch.dtype, consts: dict) -> Union[torch.dtype, str]:
    return dt if dt != torch.bool else "bool input is not fused for this op"


# -- lowerings ------------------------------------------------------------------------------
def _x(call: OpCall, name: str = "self") -> Expr:
    return call.x(name)


def _sum(call: OpCall) -> Expr:
    """sum(self)"""
    return call.b.reduce("sum", _x(call), call.compute)


def _mean_of(call: OpCall, x: Expr) -> Expr:
    return call.b.div(call.b.reduce("sum", x, call.compute), call.b.reduction_size(call.compute))


def _mean(call: OpCall) -> Expr:
    """sum(self) / N"""
    return _mean_of(call, _x(call))


def _prim_reduce(op: str):
    def lower(call: OpCall) -> Expr:
        return call.b.reduce(op, _x(call), call.compute)
    lower.__doc__ = f"{op}(self)"
    return lower


def _correction(call: OpCall) -> float:
    c = call.args.get("correction")
    if c is not None:
        return float(c)
    unbiased = call.args.get("unbiased")
    return 1.0 if unbiased is None or unbiased else 0.0


def _moments(call: OpCall, x: Expr) -> tuple[Expr, Expr]:
    """(mean, M2) by the corrected two-pass: shifted sums against the first-pass mean ``m0``.

    Exact for constant rows (``mean`` is the row's value, ``M2`` is 0); ``M2`` is kept >= 0
    against rounding (NaN stays NaN)."""
    b, ct = call.b, call.compute
    n = b.reduction_size(ct)
    m0 = _mean_of(call, x)
    d = b.sub(x, m0)
    s1 = b.reduce("sum", d, ct)
    s2 = b.reduce("sum", b.mul(d, d), ct)
    c = b.div(s1, n)
    m2 = b.sub(s2, b.mul(s1, c))
    m2 = b.where(b.call("lt", m2, call.const(0)), call.const(0), m2)
    return b.add(m0, c), m2


def _var_mean(call: OpCall, x: Expr) -> tuple[Expr, Expr]:
    """corrected two-pass variance: M2 / max(N - correction, 0), and the mean"""
    b = call.b
    mean, m2 = _moments(call, x)
    dof = b.call("maximum", b.sub(b.reduction_size(call.compute), call.const(_correction(call))), call.const(0))
    return b.div(m2, dof), mean


def _var(call: OpCall) -> Expr:
    """sum((x - mean)^2) / max(N - correction, 0)"""
    return _var_mean(call, _x(call))[0]


def _std(call: OpCall) -> Expr:
    """sqrt(var)"""
    return call.b.call("sqrt", _var(call))


def _var_mean_pair(call: OpCall) -> tuple[Expr, Expr]:
    """(var, mean)"""
    return _var_mean(call, _x(call))


def _std_mean_pair(call: OpCall) -> tuple[Expr, Expr]:
    """(std, mean)"""
    var, mean = _var_mean(call, _x(call))
    return call.b.call("sqrt", var), mean


def _softmax(call: OpCall) -> Expr:
    """exp(x - max(x)) / sum(exp(x - max(x)))"""
    b, x = call.b, _x(call)
    e = b.call("exp", b.sub(x, b.reduce("max", x, call.compute)))
    return b.div(e, b.reduce("sum", e, call.compute))


def _log_softmax(call: OpCall) -> Expr:
    """x - max(x) - log(sum(exp(x - max(x))))"""
    b, x = call.b, _x(call)
    shifted = b.sub(x, b.reduce("max", x, call.compute))
    return b.sub(shifted, b.call("log", b.reduce("sum", b.call("exp", shifted), call.compute)))


def _affine(call: OpCall, y: Expr) -> Expr:
    if isinstance(call.args.get("weight"), Expr):
        y = call.b.mul(y, call.x("weight"))
    if isinstance(call.args.get("bias"), Expr):
        y = call.b.add(y, call.x("bias"))
    return y


def _normalize(call: OpCall) -> tuple[Expr, Expr, Expr]:
    b, x = call.b, _x(call, "input")
    mean, m2 = _moments(call, x)
    var = b.div(m2, b.reduction_size(call.compute))
    rstd = b.call("rsqrt", b.add(var, call.const(call["eps"])))
    return _affine(call, b.mul(b.sub(x, mean), rstd)), mean, rstd


def _layer_norm(call: OpCall) -> Expr:
    """(x - mean) * rsqrt(var + eps) [* weight] [+ bias]"""
    return _normalize(call)[0]


def _native_layer_norm(call: OpCall) -> tuple[Expr, Expr, Expr]:
    """(layer_norm(x), mean, rstd)"""
    return _normalize(call)


def _rms_norm(call: OpCall) -> Expr:
    """x * rsqrt(mean(x^2) + eps) [* weight]"""
    b, x = call.b, _x(call, "input")
    eps = call["eps"]
    if eps is None:
        eps = torch.finfo(call.out_dtype).eps
    ms = _mean_of(call, b.mul(x, x))
    return _affine(call, b.mul(x, b.call("rsqrt", b.add(ms, call.const(eps)))))


def _batch_norm(call: OpCall) -> Expr:
    """(x - running_mean) * rsqrt(running_var + eps) [* weight] [+ bias]; in training, the batch
    statistics over every dim but C (the running stats' update is separate nodes,
    passes/batch_norm.py)"""
    if call.args.get("training"):
        return _normalize(call)[0]
    b, x = call.b, _x(call, "input")
    invstd = b.call("rsqrt", b.add(call.x("running_var"), call.const(call["eps"])))
    return _affine(call, b.mul(b.sub(x, call.x("running_mean")), invstd))


def _group_norm(call: OpCall) -> Expr:
    """per (n, group): (x - mean) * rsqrt(var + eps) [* weight] [+ bias]"""
    return _normalize(call)[0]


def _instance_norm(call: OpCall) -> Expr:
    """per (n, c): (x - mean) * rsqrt(var + eps) [* weight] [+ bias]; running stats when not use_input_stats"""
    if not call["use_input_stats"]:
        return _batch_norm(call)
    return _normalize(call)[0]


# -- checks ---------------------------------------------------------------------------------
def _need_const(*names: str):
    def check(node: Node, args: dict, consts: dict) -> Optional[str]:
        for n in names:
            if n in args and n not in consts:
                return f"argument {n!r} of {node.kind} must be a constant"
        return None
    return check


def _batch_norm_check(node: Node, args: dict, consts: dict) -> Optional[str]:
    training = consts.get("training")
    if training is None:
        return "batch_norm with a run-time training flag is not fused"
    if training:
        if any(isinstance(args.get(n), Value) for n in ("running_mean", "running_var")):
            return ("batch_norm in training mode updates its running stats in place; not fused (the "
                    "batch_norm_training pass splits the update off where the flag is known True and the "
                    "running stats are Tensor-typed)")
        return _need_const("eps")(node, args, consts)
    if not isinstance(args.get("running_mean"), Value) or not isinstance(args.get("running_var"), Value):
        return "batch_norm inference needs running_mean and running_var tensors"
    return _need_const("eps")(node, args, consts)


def _instance_norm_check(node: Node, args: dict, consts: dict) -> Optional[str]:
    use = consts.get("use_input_stats")
    if use is None:
        return "instance_norm with a run-time use_input_stats is not fused"
    given = [isinstance(args.get(n), Value) for n in ("running_mean", "running_var")]
    if use and any(given):
        return "instance_norm with input stats updates the running stats in place; not fused"
    if not use and not all(given):
        return "instance_norm without input stats needs running_mean and running_var tensors"
    return _need_const("eps")(node, args, consts)


CHECKS: dict[str, Callable[[Node, dict, dict], Optional[str]]] = {}


def reduction(name: str, aten: tuple[str, ...], kind: str, args: tuple[str, ...], lower, *, planner=None,
              out_dtype=None, overloads: tuple = (), consts: tuple[str, ...] = (), n_outputs: int = 1,
              shape_args: tuple[str, ...] = (), check=None, eager=None, doc: str = "",
              size_checks=None) -> ReductionRow:
    first = args[0].split("=")[0]
    row = ReductionRow(name, aten, kind, args, "none", (first,), consts=consts, decomp=lower, eager=eager, doc=doc,
                       n_outputs=n_outputs, overloads=overloads, planner=planner or _reduce_plan,
                       out_dtype=out_dtype, shape_args=shape_args, size_checks=size_checks)
    register(row)
    CHECKS[name] = check or _need_const(*consts)
    return row


_DIMS = ("self", "dim=None", "keepdim=False", "dtype=None")
_DIM_OVERLOADS = (("self", "dim", "keepdim", "dtype"), ("self", "dtype"))
reduction("sum", ("aten::sum",), "reduction", _DIMS, _sum, out_dtype=_sum_dtype, overloads=_DIM_OVERLOADS,
          consts=("dim", "keepdim", "dtype"), eager=torch.sum, doc="sum over dims (int inputs sum in int64)")
reduction("mean", ("aten::mean",), "reduction", _DIMS, _mean, out_dtype=_float_dtype("mean"),
          overloads=_DIM_OVERLOADS, consts=("dim", "keepdim", "dtype"), eager=torch.mean, doc="sum / N")
reduction("prod", ("aten::prod",), "reduction", _DIMS, _prim_reduce("prod"), out_dtype=_sum_dtype,
          overloads=_DIM_OVERLOADS, consts=("dim", "keepdim", "dtype"), eager=torch.prod, doc="product over dims")
for _n, _op in (("amax", "max"), ("amin", "min")):
    reduction(_n, (f"aten::{_n}",), "reduction", ("self", "dim=[]", "keepdim=False"), _prim_reduce(_op),
              out_dtype=_same_nonbool, consts=("dim", "keepdim"), eager=getattr(torch, _n),
              doc=f"{_op} over dims, NaN propagating")

_VAR = ("self", "dim=None", "unbiased=None", "correction=None", "keepdim=False")
_VAR_OVERLOADS = (("self", "unbiased"), ("self", "dim", "unbiased", "keepdim"), ("self", "dim", "correction", "keepdim"))
for _n, _fn, _k in (("var", _var, 1), ("std", _std, 1), ("var_mean", _var_mean_pair, 2),
                    ("std_mean", _std_mean_pair, 2)):
    reduction(_n, (f"aten::{_n}",), "reduction", _VAR, _fn, out_dtype=_same_float, overloads=_VAR_OVERLOADS,
              consts=("dim", "unbiased", "correction", "keepdim"), n_outputs=_k, eager=getattr(torch, _n),
              doc=f"{_n} with correction (corrected two-pass)")
reduction("sum_to_size", ("aten::sum_to_size",), "reduction", ("self", "size"), _sum, planner=_sum_to_size_plan,
          out_dtype=_same_nonbool, consts=("size",), size_checks=_sum_to_size_checks,
          eager=lambda self, size: self.sum_to_size(size),
          doc="sum the dims that size broadcasts")

_SOFTMAX_OVERLOADS = (("self", "dim", "dtype"),)
reduction("softmax", ("aten::softmax",), "normalization", ("self", "dim", "dtype=None"), _softmax,
          planner=_softmax_plan, out_dtype=_softmax_dtype, overloads=_SOFTMAX_OVERLOADS, consts=("dim", "dtype"),
          eager=lambda self, dim, dtype=None: torch.softmax(self, dim, dtype=scalar_type(dtype)),
          doc="exp(x - max) / sum(exp(x - max)) along dim")
reduction("log_softmax", ("aten::log_softmax",), "normalization", ("self", "dim", "dtype=None"), _log_softmax,
          planner=_softmax_plan, out_dtype=_softmax_dtype, overloads=_SOFTMAX_OVERLOADS, consts=("dim", "dtype"),
          eager=lambda self, dim, dtype=None: torch.log_softmax(self, dim, dtype=scalar_type(dtype)),
          doc="x - max - log(sum(exp(x - max))) along dim")
reduction("_softmax", ("aten::_softmax",), "normalization", ("self", "dim", "half_to_float"), _softmax,
          planner=_softmax_plan, out_dtype=_softmax_dtype, consts=("dim", "half_to_float"),
          eager=torch._softmax, doc="softmax, optionally half -> float")
reduction("_log_softmax", ("aten::_log_softmax",), "normalization", ("self", "dim", "half_to_float"),
          _log_softmax, planner=_softmax_plan, out_dtype=_softmax_dtype, consts=("dim", "half_to_float"),
          eager=torch._log_softmax, doc="log_softmax, optionally half -> float")

_LN = ("input", "normalized_shape", "weight=None", "bias=None", "eps=1e-05", "cudnn_enable=True")
reduction("layer_norm", ("aten::layer_norm",), "normalization", _LN, _layer_norm, planner=_layer_norm_plan,
          out_dtype=_same_float, consts=("eps",), shape_args=("normalized_shape",), size_checks=_trailing_checks,
          eager=lambda input, ns, weight=None, bias=None, eps=1e-5, cudnn_enable=True:
          torch.layer_norm(input, ns, weight, bias, eps),
          doc="(x - mean) * rsqrt(var + eps) * weight + bias over the last dims")
reduction("native_layer_norm", ("aten::native_layer_norm",), "normalization",
          ("input", "normalized_shape", "weight", "bias", "eps"), _native_layer_norm, planner=_layer_norm_plan,
          out_dtype=_same_float, consts=("eps",), shape_args=("normalized_shape",), size_checks=_trailing_checks,
          n_outputs=3,
          eager=torch.native_layer_norm, doc="(layer_norm, mean, rstd)")
reduction("rms_norm", ("aten::rms_norm",), "normalization", ("input", "normalized_shape", "weight=None", "eps=None"),
          _rms_norm, planner=_layer_norm_plan, out_dtype=_same_float, consts=("eps",),
          shape_args=("normalized_shape",), size_checks=_trailing_checks, eager=torch.rms_norm,
          doc="x * rsqrt(mean(x^2) + eps) * weight")
reduction("batch_norm", ("aten::batch_norm",), "normalization",
          ("input", "weight", "bias", "running_mean", "running_var", "training", "momentum", "eps",
           "cudnn_enabled"), _batch_norm, planner=_channel_plan(False), out_dtype=_same_float,
          consts=("training", "eps"), check=_batch_norm_check,
          eager=lambda input, w, b, rm, rv, training, momentum, eps, cudnn=True:
          torch.batch_norm(input, w, b, rm, rv, training, momentum, eps, cudnn),
          doc="batch norm: running stats, or batch stats over N and the spatial dims in training (channel dim 1, any memory format)")
reduction("instance_norm", ("aten::instance_norm",), "normalization",
          ("input", "weight", "bias", "running_mean", "running_var", "use_input_stats", "momentum", "eps",
           "cudnn_enabled"), _instance_norm, planner=_channel_plan(True), out_dtype=_same_float,
          consts=("use_input_stats", "eps"), check=_instance_norm_check,
          eager=lambda input, w, b, rm, rv, use, momentum, eps, cudnn=True:
          torch.instance_norm(input, w, b, rm, rv, use, momentum, eps, cudnn),
          doc="per-sample, per-channel normalization over the spatial dims")
reduction("group_norm", ("aten::group_norm",), "normalization",
          ("input", "num_groups", "weight=None", "bias=None", "eps=1e-05", "cudnn_enabled=True"), _group_norm,
          planner=_group_norm_plan, out_dtype=_same_float, consts=("num_groups", "eps"),
          eager=lambda input, num_groups, weight=None, bias=None, eps=1e-5, cudnn_enabled=True:
          torch.group_norm(input, num_groups, weight, bias, eps, cudnn_enabled),
          doc="per-sample normalization over C and the spatial dims (fused for num_groups=1)")
