"""Reduction and normalization rows of the op table.

Every row here decomposes into the four reduction primitives of the kernel IR (``sum``,
``prod``, ``max``, ``min``; ``ExprBuilder.reduce``) plus pointwise primitives, so the kernel
IR and the renderers know nothing about softmax or layer norm. Moments (var / std and the
normalizations) use *shifted data* (``moments``): the shift ``k`` is the reduced segment's
first element (``ExprBuilder.at_first``: a per-row value every thread reads), the sums
``s1 = sum(x - k)``, ``s2 = sum((x - k)^2)`` accumulate in one phase, ``mean = k + s1 / N``,
``M2 = s2 - s1 * s1 / N``. For a constant row every ``x - k`` is 0, so the mean is exactly the
row's value and ``M2 == 0`` (eager's Welford has that property too; ``sum / N`` alone does not,
and ``(x - mean) * rsqrt(var + eps)`` turns its rounding into an O(1) error); a large mean with
a small spread is accurate because ``x - k`` is of the spread's size. Both sums are plain sums
of one phase: one combine across threads (one round of barriers for the pair) and blocks (a row
split across blocks adds its partial ``(s1, s2)``, each block having read the same ``k``),
where a first mean costs a second block reduction, Welford a division per element and Chan's
merge divisions at every combine. The price: ``M2`` loses relative accuracy as
``(k - mean)^2 / var`` grows (a first element far out in the tail of its row).
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

from ..ir.kir import FLOAT_TYPES, INT_TYPES, Expr, compute_dtype
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


def _fits_type(name: str, type_name: str) -> bool:
    """Can an argument of type ``type_name`` be the overload's argument ``name``?"""
    if name == "unbiased":
        return type_name == "bool"
    if name == "dtype":
        return not type_name.endswith("[]")
    return True


@dataclass
class ReductionRow(OpRow):
    """A row whose node reduces dims or lines tensors up other than by right alignment."""

    n_outputs: int = 1
    overloads: tuple = ()                       # argument-name tuples, by arity, for schema-less nodes
    planner: Optional[Callable[[Node, dict, dict], Union[DimPlan, str]]] = None
    out_dtype: Optional[Callable[[torch.dtype, dict], Union[torch.dtype, str]]] = None
    shape_args: tuple[str, ...] = ()            # list args whose values the kernel never reads
    # int-list args profiled into a guarded constant when the graph computes the list whole
    # (``x.shape[-1:]``); a list literal keeps its items as run-time values the launcher checks
    profiled_lists: tuple[str, ...] = ()
    # (value, dim, expected size) relations eager checks and the kernel relies on; the launcher
    # compares them before every launch. ``expected``: an int or a Value holding an int.
    size_checks: Optional[Callable[[Node, dict], list[tuple[Value, int, Any]]]] = None

    def names_for(self, node: Node) -> tuple[str, ...]:
        schema = getattr(node.schema, "schema", "") or ""
        if schema:
            names = tuple(a.name for a in torch._C.parse_schema(schema).arguments)
            if all(n in self.arg_names for n in names):
                return names
        # TorchScript passes every argument, defaults included: an overload of the node's own
        # arity comes first (a printed and parsed ``aten::prod(%x, %dtype)`` is prod(self, *,
        # dtype), not prod.dim_int with a dim of 6 and keepdim, dtype left to their defaults)
        n_in = len(node.inputs)
        fits = sorted((o for o in self.overloads if len(o) >= n_in), key=lambda o: len(o) != n_in)
        if len(fits) > 1:
            typed = [o for o in fits if all(_fits_type(n, v.type.name) for n, v in zip(o, node.inputs))]
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
def rank_of(v: Any) -> int:
    """Rank of a tensor Value (0 for anything else)."""
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
    rank = rank_of(args[tensor])
    dims = normalize_dims(args.get(dim_arg), rank)
    if isinstance(dims, str):
        return dims
    keep = bool(args.get(keep_arg, False))
    out = tuple(None if d in dims else d for d in range(rank)) if keep else tuple(d for d in range(rank) if d not in dims)
    return DimPlan(rank, {tensor: tuple(range(rank))}, [out] * len(node.outputs), dims)


def _softmax_plan(node: Node, args: dict, consts: dict) -> Union[DimPlan, str]:
    rank = rank_of(args["self"])
    dims = normalize_dims(args["dim"], rank)
    if isinstance(dims, str):
        return dims
    return DimPlan(rank, {"self": tuple(range(rank))}, [tuple(range(rank))], dims)


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
    if not red:
        # eager returns ``self`` itself there (an alias, with its strides): nothing to fuse
        return "sum_to_size to the input's own shape returns the input itself"
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


def _sum_to_size_checks(node: Node, args: dict) -> list[tuple[Value, int, Any]]:
    """sum_to_size: every non-1 entry of size equals the input's aligned dim."""
    v, items = args["self"], list_items(args.get("size"))
    if not isinstance(v, Value) or items is None:
        return []
    off = rank_of(v) - len(items)
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


def same_float(dt: torch.dtype, consts: dict) -> Union[torch.dtype, str]:
    """Output dtype rule: the input's float dtype; integer inputs are not fused."""
    return dt if dt in FLOAT_TYPES else f"integer input ({dt}) is not fused for this op"


def _same_nonbool(dt: torch.dtype, consts: dict) -> Union[torch.dtype, str]:
    return dt if dt != torch.bool else "bool input is not fused for this op"


# -- lowerings ------------------------------------------------------------------------------
def arg_expr(call: OpCall, name: str = "self") -> Expr:
    """The kernel IR expression of tensor argument ``name``."""
    return call.x(name)


def dtype_input(call: OpCall) -> Expr:
    """The input of ``sum`` / ``prod`` as eager reads it: with ``dtype=`` an fp16 / bf16 other than
    the input's, each element is converted to it first (eager reduces ``self.to(dtype)``), rounded
    as a cast row rounds: ``torch.sum(x, dtype=torch.float16)`` of a float32 [1e5, -1e5, 3] is
    inf - inf = NaN in eager, where the unrounded sum gave 3. (``mean`` with such a dtype converts
    to float32 instead, eager's accumulator: ``arg_expr``.)"""
    x = arg_expr(call)
    given = scalar_type(call.args.get("dtype"))
    src = call.types.get("self")
    if given in (torch.float16, torch.bfloat16) and (src is None or src.dtype != given):
        x = call.b.call("round_half" if given == torch.float16 else "round_bf16", x)
    return x


def _sum(call: OpCall) -> Expr:
    """sum(self)"""
    return call.b.reduce("sum", dtype_input(call), call.compute)


def mean_of(call: OpCall, x: Expr) -> Expr:
    """sum(x) / N over the kernel's reduction axes."""
    return call.b.div(call.b.reduce("sum", x, call.compute), call.b.reduction_size(call.compute))


def _mean(call: OpCall) -> Expr:
    """sum(self) / N"""
    return mean_of(call, arg_expr(call))


def _prim_reduce(op: str):
    def lower(call: OpCall) -> Expr:
        return call.b.reduce(op, dtype_input(call), call.compute)
    lower.__doc__ = f"{op}(self)"
    return lower


def _correction(call: OpCall) -> float:
    c = call.args.get("correction")
    if c is not None:
        return float(c)
    unbiased = call.args.get("unbiased")
    return 1.0 if unbiased is None or unbiased else 0.0


def shifted_moments(call: OpCall, x: Expr, acc: Optional[torch.dtype] = None) -> tuple[Expr, Expr, Expr, Expr]:
    """``(d, c, mean, M2)`` from sums shifted by the segment's first element ``k`` (one
    reduction phase): ``d = x - k`` (exact where ``x`` is within a factor 2 of ``k``), ``c = s1 / N``
    (the mean's offset from ``k``), ``mean = k + c``, ``M2 = s2 - s1 * c``.

    ``d - c`` is ``x - mean`` without the rounding of ``mean`` to the data's magnitude: for data
    with a huge mean and a small spread (1e4 +- 1e-2 in fp32) ``x - mean`` loses every digit of the
    spread, ``d - c`` keeps them. Constant rows give exactly 0. ``M2`` is kept >= 0 against
    rounding. Non-finite data follow eager's Welford: any inf or NaN in the segment makes the
    statistics NaN, except a segment of one element, whose mean is that element. ``acc``: the
    dtype the sums accumulate in (default: the compute dtype).

    Finite data whose sum of squares overflows the accumulator (a float32 group of 0 and 1e30:
    its variance 2.5e59 is past float32's range) get an infinite ``M2``: the variance rounded to
    the dtype, so a normalization of them is ``(x - mean) * rsqrt(inf) = 0``, the value of a
    pipeline that rounds every statistic correctly and eager's CUDA value (``s2 - s1 * c`` had
    made it inf - inf = NaN: fuzz graph 2403 of CUDA seed 7777). The float64 value (+-1 there)
    would need float64 sums or a second set of scaled sums on every segment: measured on an H100,
    a bf16 layer norm of [65536, 384] went from 54.9 to 69.0 us (float64 sums) and 80.5 us
    (scaled sums), for data whose variance float32 cannot hold."""
    b, ct = call.b, acc or call.compute
    n = b.reduction_size(ct)
    x = b.cast(x, ct)
    k = b.at_first(x)
    d = b.sub(x, k)
    # x * 0 is 0 for finite x and NaN for an inf or a NaN: added to the deviations it makes s2
    # NaN exactly where the data hold one, and leaves it an inf where finite data's sums or
    # differences overflow (0.5 then 3e38 twice in a float32 row: s1 is inf, as for an inf).
    # Added to d itself (one fused multiply-add, which both sums then read), not to its square:
    # a bf16 layer norm's row is loaded once and each element's arithmetic is most of what its
    # kernel does besides (the shift by the first element alone cost 2-2.5 points of copy
    # bandwidth, logs/sweep-layer-norm-twins-cuda-H200.md); s1 is then NaN too where s2 is, and
    # the statistics are NaN there either way
    dn = b.add(d, b.mul(x, call.const(0, ct)))
    s1 = b.reduce("sum", dn, ct)
    s2 = b.reduce("sum", b.mul(dn, dn), ct)
    c = b.div(s1, n)
    m2 = b.sub(s2, b.mul(s1, c))
    m2 = b.where(b.call("lt", m2, call.const(0, ct)), call.const(0, ct), m2)
    nan = call.const(float("nan"), ct)
    # inf or NaN data make s2 NaN; finite data whose sums or squares overflow keep finite
    # statistics' rule: M2 inf, as eager's kernels have it (their running means stay finite, their
    # M2 does not), not NaN
    bad = b.call("or", b.call("not", b.call("isfinite", k)), b.call("isnan", s2))
    m2 = b.where(b.call("isfinite", s2), m2, call.const(float("inf"), ct))
    # one element: the mean is that element, inf included (eager's Welford); its M2 NaN if inf
    mean = b.where(b.call("eq", n, call.const(1)), k, b.where(bad, nan, b.add(k, c)))
    m2 = b.where(bad, nan, m2)
    return d, c, mean, m2


def moments(call: OpCall, x: Expr, acc: Optional[torch.dtype] = None) -> tuple[Expr, Expr]:
    """(mean, M2) of ``shifted_moments``."""
    return shifted_moments(call, x, acc)[2:]


def _moment_acc(call: OpCall) -> torch.dtype:
    """What var / std accumulate in: float64 for float32 on the CPU (eager's CPU accumulation type
    for float; a spread of 1e30 squares past float32's range: fuzz graph 5799 of seed 8383),
    the compute dtype elsewhere (eager's CUDA kernels accumulate float in float)."""
    return torch.float64 if call.device_type == "cpu" and call.compute == torch.float32 else call.compute


def _var_mean(call: OpCall, x: Expr) -> tuple[Expr, Expr]:
    """variance from the shifted sums: M2 / max(N - correction, 0), and the mean. On non-finite
    data the mean follows eager's Welford. On the CPU it meets the segment in order: one ±inf as
    its last element and finite data before it give that inf, any other non-finite data NaN. On
    CUDA its partials combine with others, empty ones included (an inf partial met by an empty
    one is inf + (0 - inf) * 0 = NaN): the mean of data holding an inf is NaN there, the inf
    last too (the CPU's rule had given inf: fuzz graph 41 of CUDA seed 7878)."""
    b, ct = call.b, _moment_acc(call)
    mean, m2 = moments(call, x, ct)
    if call.device_type != "cpu":
        return b.div(m2, _dof(call, ct)), mean
    xc = b.cast(x, ct)
    last = b.at_last(xc)
    others = b.reduce("sum", b.cast(b.call("not", b.call("isfinite", xc)), torch.int32), torch.int32)
    alone = b.call("and", b.call("isinf", last), b.call("eq", others, call.const(1, torch.int32)))
    mean = b.where(alone, last, mean)
    return b.div(m2, _dof(call, ct)), mean


def _dof(call: OpCall, ct: torch.dtype) -> Expr:
    """max(N - correction, 0)"""
    b = call.b
    return b.call("maximum", b.sub(b.reduction_size(ct), call.const(_correction(call), ct)), call.const(0, ct))


def _var(call: OpCall) -> Expr:
    """sum((x - mean)^2) / max(N - correction, 0)"""
    return _var_mean(call, arg_expr(call))[0]


def _std(call: OpCall) -> Expr:
    """sqrt(var)"""
    return call.b.call("sqrt", _var(call))


def _var_mean_pair(call: OpCall) -> tuple[Expr, Expr]:
    """(var, mean)"""
    return _var_mean(call, arg_expr(call))


def _std_mean_pair(call: OpCall) -> tuple[Expr, Expr]:
    """(std, mean)"""
    var, mean = _var_mean(call, arg_expr(call))
    return call.b.call("sqrt", var), mean


def _softmax(call: OpCall) -> Expr:
    """exp(x - max(x)) / sum(exp(x - max(x)))"""
    b, x = call.b, arg_expr(call)
    e = b.call("exp", b.sub(x, b.reduce("max", x, call.compute)))
    return b.div(e, b.reduce("sum", e, call.compute))


def _safe_softmax(call: OpCall) -> Expr:
    """softmax, 0 where every x of the row is -inf (max(x) = -inf: max propagates NaN)"""
    b, x = call.b, arg_expr(call)
    m = b.reduce("max", x, call.compute)
    e = b.call("exp", b.sub(x, m))
    soft = b.div(e, b.reduce("sum", e, call.compute))
    return b.where(b.call("eq", m, call.const(float("-inf"))), call.const(0.0), soft)


def _log_softmax(call: OpCall) -> Expr:
    """x - max(x) - log(sum(exp(x - max(x))))"""
    b, x = call.b, arg_expr(call)
    shifted = b.sub(x, b.reduce("max", x, call.compute))
    return b.sub(shifted, b.call("log", b.reduce("sum", b.call("exp", shifted), call.compute)))


# -- checks ---------------------------------------------------------------------------------
def need_const(*names: str):
    """A check: every named argument must be a constant."""
    def check(node: Node, args: dict, consts: dict) -> Optional[str]:
        for n in names:
            if n in args and n not in consts:
                return f"argument {n!r} of {node.kind} must be a constant"
        return None
    return check


CHECKS: dict[str, Callable[[Node, dict, dict], Optional[str]]] = {}


def reduction(name: str, aten: tuple[str, ...], kind: str, args: tuple[str, ...], lower, *, planner=None,
              out_dtype=None, overloads: tuple = (), consts: tuple[str, ...] = (), n_outputs: int = 1,
              shape_args: tuple[str, ...] = (), check=None, eager=None, doc: str = "",
              size_checks=None, profiled_lists: tuple[str, ...] = ()) -> ReductionRow:
    first = args[0].split("=")[0]
    row = ReductionRow(name, aten, kind, args, "none", (first,), consts=consts, decomp=lower, eager=eager, doc=doc,
                       n_outputs=n_outputs, overloads=overloads, planner=planner or _reduce_plan,
                       out_dtype=out_dtype, shape_args=shape_args, size_checks=size_checks,
                       profiled_lists=profiled_lists)
    register(row)
    CHECKS[name] = check or need_const(*consts)
    return row


_DIMS = ("self", "dim=None", "keepdim=False", "dtype=None")
_DIM_OVERLOADS = (("self", "dim", "keepdim", "dtype"), ("self", "dtype"))
reduction("sum", ("aten::sum",), "reduction", _DIMS, _sum, out_dtype=_sum_dtype, overloads=_DIM_OVERLOADS,
          consts=("dim", "keepdim", "dtype"), eager=torch.sum, doc="sum over dims (int inputs sum in int64)")
reduction("mean", ("aten::mean",), "reduction", _DIMS, _mean, out_dtype=_float_dtype("mean"),
          overloads=_DIM_OVERLOADS, consts=("dim", "keepdim", "dtype"), eager=torch.mean, doc="sum / N")
def _prod_check(node: Node, args: dict, consts: dict) -> Optional[str]:
    """eager's CPU prod of fp16 / bf16 accumulates in that type: a product overflows to inf
    within a few factors and a zero met after it gives NaN, in an order of eager's lanes that a
    kernel accumulating in float64 (``_prod``) does not follow. Left to eager on the CPU (CUDA's
    prod accumulates in fp32, whose range the kernel's float64 covers)."""
    out = node.outputs[0].type if node.outputs else None
    if isinstance(out, TensorType) and out.dtype in (torch.float16, torch.bfloat16) and \
            out.device is not None and out.device.type == "cpu":
        return ("prod with an fp16/bf16 result on the CPU is left to eager (it accumulates in that type: "
                "overflow then a zero gives NaN in eager's lane order)")
    return need_const("dim", "keepdim", "dtype")(node, args, consts)


def _prod(call: OpCall) -> Expr:
    """prod(self); a floating product's factors multiplied in float64, rounded once at the end.
    A float32 accumulator overflows within a few dozen factors of 100 (1e54 > 3.4e38), and a zero
    met after that gives inf * 0 = NaN where the product is 0: whether eager meets it depends on
    the order of its lanes (the CPU fuzz's graph 973 of seed 36690, a column of 33 values 33 * k
    with a zero 28th: eager 0, the fused fp32 product NaN). float64's range holds any product of
    float32 factors of a reduction this size that float64 itself holds, so the result is the
    float64 reference's, rounded; where eager's lanes overflow instead, eager's NaN or inf is the
    fuzz's ``eager_overflow`` deviation."""
    x = dtype_input(call)
    if call.compute.is_floating_point and call.compute != torch.float64:
        return call.b.cast(call.b.reduce("prod", x, torch.float64), call.compute)
    return call.b.reduce("prod", x, call.compute)


reduction("prod", ("aten::prod",), "reduction", _DIMS, _prod, out_dtype=_sum_dtype,
          overloads=_DIM_OVERLOADS, consts=("dim", "keepdim", "dtype"), check=_prod_check, eager=torch.prod,
          doc="product over dims")
for _n, _op in (("amax", "max"), ("amin", "min")):
    reduction(_n, (f"aten::{_n}",), "reduction", ("self", "dim=[]", "keepdim=False"), _prim_reduce(_op),
              out_dtype=_same_nonbool, consts=("dim", "keepdim"), eager=getattr(torch, _n),
              doc=f"{_op} over dims, NaN propagating")

_VAR = ("self", "dim=None", "unbiased=None", "correction=None", "keepdim=False")
_VAR_OVERLOADS = (("self", "unbiased"), ("self", "dim", "unbiased", "keepdim"), ("self", "dim", "correction", "keepdim"))
for _n, _fn, _k in (("var", _var, 1), ("std", _std, 1), ("var_mean", _var_mean_pair, 2),
                    ("std_mean", _std_mean_pair, 2)):
    reduction(_n, (f"aten::{_n}",), "reduction", _VAR, _fn, out_dtype=same_float, overloads=_VAR_OVERLOADS,
              consts=("dim", "unbiased", "correction", "keepdim"), n_outputs=_k, eager=getattr(torch, _n),
              doc=f"{_n} with correction (sums shifted by the first element)")
reduction("sum_to_size", ("aten::sum_to_size",), "reduction", ("self", "size"), _sum, planner=_sum_to_size_plan,
          out_dtype=_same_nonbool, consts=("size",), size_checks=_sum_to_size_checks,
          eager=lambda self, size: self.sum_to_size(size),
          doc="sum the dims that size broadcasts")

_SOFTMAX_OVERLOADS = (("self", "dim", "dtype"),)
reduction("softmax", ("aten::softmax",), "normalization", ("self", "dim", "dtype=None"), _softmax,
          planner=_softmax_plan, out_dtype=_softmax_dtype, overloads=_SOFTMAX_OVERLOADS, consts=("dim", "dtype"),
          eager=lambda self, dim, dtype=None: torch.softmax(self, dim, dtype=scalar_type(dtype)),
          doc="exp(x - max) / sum(exp(x - max)) along dim")
reduction("_safe_softmax", ("aten::_safe_softmax",), "normalization", ("self", "dim", "dtype=None"), _safe_softmax,
          planner=_softmax_plan, out_dtype=_softmax_dtype, overloads=_SOFTMAX_OVERLOADS, consts=("dim", "dtype"),
          eager=lambda self, dim, dtype=None: torch._safe_softmax(self, dim, dtype=scalar_type(dtype)),
          doc="softmax along dim; 0 along a row that is -inf throughout (SDPA's math backend)")
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
