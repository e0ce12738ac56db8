"""Kernel IR: the target-neutral form a fusion group lowers to.

Two layers:

- scalar expressions (``Expr``): loads, kernel arguments, constants, casts and calls of primitive
  ops (``add``, ``exp``, ``where`` ...). Every expression has a *compute dtype* (a torch dtype:
  fp16/bf16 never appear here, they are loaded as float). Op-table rows build these through
  ``ExprBuilder``; the renderers print them through one template table (``PRIMS``).
- the kernel (``Kernel``): tensor and scalar parameters, the iteration domain shaped by a
  ``LoopNest`` (``schedule.py``), the ordered statements of the body, and the stores.

Nothing here touches tensors or devices.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import torch

FLOAT_TYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
INT_TYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


# Signed 32 / 64-bit add, sub, mul and neg wrap around as eager's do (two's complement): in C a
# signed overflow is undefined, and compilers use that (``x * x >= 0``), so these go through
# the unsigned type in ``gf_wrap_*`` (each dialect's shared prelude).
_WRAPPED = {"add": "gf_wrap_add({0}, {1})", "sub": "gf_wrap_sub({0}, {1})", "mul": "gf_wrap_mul({0}, {1})",
            "neg": "gf_wrap_neg({0})"}


def prim_text(op: str, dtype: torch.dtype, args: list[str]) -> str:
    """The C text of primitive ``op`` computing in ``dtype`` on argument texts ``args``."""
    if dtype in (torch.int32, torch.int64) and op in _WRAPPED:
        return _WRAPPED[op].format(*args)
    return PRIMS[op][1].format(*args)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype arithmetic runs in: fp16 and bf16 compute in fp32 (torch's "opmath")."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


# Primitive scalar ops: name -> (arity, C template, result rule). The template is shared by both
# dialects; functions spelled ``gf_*`` are defined by each dialect's prelude for every type.
# Result rule: "same" (the args' dtype), "bool", "float32" or "float64".
PRIMS: dict[str, tuple[int, str, str]] = {
    "add": (2, "({0} + {1})", "same"),
    "sub": (2, "({0} - {1})", "same"),
    "mul": (2, "({0} * {1})", "same"),
    "div": (2, "({0} / {1})", "same"),
    "neg": (1, "(-{0})", "same"),
    "lt": (2, "({0} < {1})", "bool"),
    "le": (2, "({0} <= {1})", "bool"),
    "gt": (2, "({0} > {1})", "bool"),
    "ge": (2, "({0} >= {1})", "bool"),
    "eq": (2, "({0} == {1})", "bool"),
    "ne": (2, "({0} != {1})", "bool"),
    "and": (2, "({0} && {1})", "bool"),
    "or": (2, "({0} || {1})", "bool"),
    "not": (1, "(!{0})", "bool"),
    "bitand": (2, "({0} & {1})", "same"),
    "bitor": (2, "({0} | {1})", "same"),
    "bitxor": (2, "({0} ^ {1})", "same"),
    "bitnot": (1, "(~{0})", "same"),
    "where": (3, "({0} ? {1} : {2})", "same"),
    "fma": (3, "gf_fma({0}, {1}, {2})", "same"),
    "pow": (2, "gf_pow({0}, {1})", "same"),
    "fmod": (2, "gf_fmod({0}, {1})", "same"),
    "remainder": (2, "gf_remainder({0}, {1})", "same"),
    "atan2": (2, "gf_atan2({0}, {1})", "same"),
    "maximum": (2, "gf_maximum({0}, {1})", "same"),
    "minimum": (2, "gf_minimum({0}, {1})", "same"),
    "fmax": (2, "gf_fmax({0}, {1})", "same"),        # NaN only where both are NaN
    "fmin": (2, "gf_fmin({0}, {1})", "same"),
    "isnan": (1, "gf_isnan({0})", "bool"),
    "isinf": (1, "gf_isinf({0})", "bool"),
    "isfinite": (1, "gf_isfinite({0})", "bool"),
    "signbit": (1, "gf_signbit({0})", "bool"),
    "round_half": (1, "gf_round_half({0})", "same"),   # round a float to fp16 precision
    "round_bf16": (1, "gf_round_bf16({0})", "same"),   # round a float to bf16 precision
    # Philox4x32-10 uniform in [0, 1) of (seed, offset, linear element index), all int64
    "philox_uniform_f32": (3, "gf_philox_uniform_f32({0}, {1}, {2})", "float32"),
    "philox_uniform_f64": (3, "gf_philox_uniform_f64({0}, {1}, {2})", "float64"),
}
RANDOM_PRIMS = ("philox_uniform_f32", "philox_uniform_f64")
_RESULT_DTYPES = {"bool": torch.bool, "float32": torch.float32, "float64": torch.float64}
# Unary math functions: gf_<name>(x) for float, double (and ints where noted in the preludes).
MATH_UNARY = (
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan",
    "asin", "acos", "atan", "sinh", "cosh", "tanh", "erf", "erfc", "lgamma", "floor", "ceil", "trunc",
    "round", "abs", "reciprocal", "sigmoid",
)
for _name in MATH_UNARY:
    PRIMS[_name] = (1, f"gf_{_name}({{0}})", "same")


class Expr:
    """A scalar expression node; ``dtype`` is its compute dtype."""

    __slots__ = ("dtype",)

    def key(self) -> tuple:
        raise NotImplementedError


@dataclass(frozen=True, eq=False)
class Const(Expr):
    value: Any
    dtype: torch.dtype

    def key(self) -> tuple:
        return ("const", repr(self.value), self.dtype)


@dataclass(frozen=True, eq=False)
class Load(Expr):
    """Element of tensor parameter ``tensor`` at the current iteration point, in compute dtype."""

    tensor: int
    dtype: torch.dtype

    def key(self) -> tuple:
        return ("load", self.tensor)


@dataclass(frozen=True, eq=False)
class LastLoad(Expr):
    """Element of tensor parameter ``tensor`` at the last point of the reduced segment (every
    reduced index at its extent - 1), per kept point: a row value (``at_last``; the mean of
    ``var_mean`` reads it to follow eager's Welford on infinite data). 0 for an empty segment."""

    tensor: int
    dtype: torch.dtype

    def key(self) -> tuple:
        return ("last", self.tensor)


@dataclass(frozen=True, eq=False)
class FirstLoad(Expr):
    """Element of tensor parameter ``tensor`` at the first point of the reduced segment (every
    reduced index 0), per kept point: a row value. The moments shift by it (``at_first``);
    renderers read 0 for an empty segment instead of touching memory."""

    tensor: int
    dtype: torch.dtype

    def key(self) -> tuple:
        return ("first", self.tensor)


@dataclass(frozen=True, eq=False)
class ScalarArg(Expr):
    index: int
    dtype: torch.dtype

    def key(self) -> tuple:
        return ("arg", self.index)


@dataclass(frozen=True, eq=False)
class Cast(Expr):
    arg: Expr
    dtype: torch.dtype

    def key(self) -> tuple:
        return ("cast", id(self.arg), self.dtype)


@dataclass(frozen=True, eq=False)
class Call(Expr):
    op: str
    args: tuple
    dtype: torch.dtype

    def key(self) -> tuple:
        return ("call", self.op, tuple(id(a) for a in self.args), self.dtype)


@dataclass(frozen=True, eq=False)
class Reduce(Expr):
    """``op`` (sum / prod / max / min) of ``args[0]`` over the kernel's reduction axes, per kept point.

    Reduction kernels only: every reduction of one kernel reduces the same axes. ``dtype`` is the
    accumulator dtype (fp32 for fp16/bf16 inputs, int64 for integer sums).
    """

    op: str
    args: tuple
    dtype: torch.dtype

    def key(self) -> tuple:
        return ("reduce", self.op, id(self.args[0]), self.dtype)


@dataclass(frozen=True, eq=False)
class ColumnSum(Expr):
    """The sum of ``args[0]`` over the kernel's *kept* axes, per reduced point: a column sum
    (a norm backward's weight gradient) in a row kernel. Lowering only; it never reaches the
    renderers: the store of a column sum becomes a store of its summand into a *partials*
    tensor (``TensorParam.partials``), which each row worker accumulates over its rows."""

    op: str
    args: tuple
    dtype: torch.dtype

    def key(self) -> tuple:
        return ("column", self.op, id(self.args[0]), self.dtype)


@dataclass(frozen=True, eq=False)
class ReductionSize(Expr):
    """The number of elements each reduction of the kernel combines (a run-time value)."""

    dtype: torch.dtype

    def key(self) -> tuple:
        return ("reduction_size", self.dtype)


@dataclass(frozen=True, eq=False)
class LinearIndex(Expr):
    """The row-major linear index of the current point in the kernel's iteration space (int64).

    Random ops key their numbers on it, so an element's number does not depend on the schedule
    (vectorization, unrolling, block size). Lowering only emits it when the iteration order is the
    row-major order of the random op's output (``lower.py``).
    """

    dtype: torch.dtype = torch.int64

    def key(self) -> tuple:
        return ("linear_index",)


@dataclass(frozen=True, eq=False)
class EdgeIndex(Expr):
    """``LinearIndex`` at the first (``last``: the last) point of the reduced segment, per kept
    point: a row value, what a random number under ``at_first`` / ``at_last`` is drawn at."""

    last: bool = False
    dtype: torch.dtype = torch.int64

    def key(self) -> tuple:
        return ("edge_index", self.last)


REDUCE_OPS = ("sum", "prod", "max", "min")


def _py_value(value: Any, dtype: torch.dtype) -> Any:
    if dtype == torch.bool:
        return bool(value)
    if dtype in INT_TYPES:
        return int(value)
    return float(value)


class ExprBuilder:
    """Builds scalar expressions with hash-consing (common subexpressions are shared).

    Example::

        >>> b = ExprBuilder()
        >>> x = b.load(0, torch.float16)          # loaded as float
        >>> y = b.call("exp", b.mul(x, b.const(2.0, torch.float32)))
        >>> y.dtype
        torch.float32
    """

    def __init__(self) -> None:
        self._memo: dict[tuple, Expr] = {}

    def _intern(self, e: Expr) -> Expr:
        return self._memo.setdefault(e.key(), e)

    def load(self, tensor: int, storage_dtype: torch.dtype) -> Expr:
        return self._intern(Load(tensor, compute_dtype(storage_dtype)))

    def arg(self, index: int, dtype: torch.dtype) -> Expr:
        return self._intern(ScalarArg(index, dtype))

    def const(self, value: Any, dtype: torch.dtype) -> Expr:
        dtype = compute_dtype(dtype)
        return self._intern(Const(_py_value(value, dtype), dtype))

    def cast(self, e: Expr, dtype: torch.dtype) -> Expr:
        dtype = compute_dtype(dtype)
        if e.dtype == dtype:
            return e
        if isinstance(e, Const):
            return self.const(e.value, dtype)
        return self._intern(Cast(e, dtype))

    def call(self, op: str, *args: Expr, dtype: Optional[torch.dtype] = None) -> Expr:
        """Apply primitive ``op``; args are cast to ``dtype`` (default: the first arg's dtype).

        For ``where`` the condition (first arg) is cast to bool and ``dtype`` applies to the rest.
        """
        arity, _, rule = PRIMS[op]
        assert len(args) == arity, f"{op} takes {arity} args"
        if op == "where":
            dt = dtype or args[1].dtype
            args = (self.cast(args[0], torch.bool), self.cast(args[1], dt), self.cast(args[2], dt))
        else:
            dt = dtype or args[0].dtype
            if op in ("and", "or", "not"):
                args = tuple(self.cast(a, torch.bool) for a in args)
                dt = torch.bool
            else:
                args = tuple(self.cast(a, dt) for a in args)
        return self._intern(Call(op, args, _RESULT_DTYPES.get(rule, dt)))

    def reduce(self, op: str, e: Expr, dtype: Optional[torch.dtype] = None) -> Expr:
        """``op`` of ``e`` over the kernel's reduction axes, accumulated in ``dtype``."""
        assert op in REDUCE_OPS, op
        dtype = compute_dtype(dtype or e.dtype)
        return self._intern(Reduce(op, (self.cast(e, dtype),), dtype))

    def linear_index(self) -> Expr:
        return self._intern(LinearIndex())

    def reduction_size(self, dtype: torch.dtype) -> Expr:
        return self._intern(ReductionSize(compute_dtype(dtype)))

    def at_first(self, e: Expr, load: type = FirstLoad) -> Expr:
        """``e`` evaluated at the first point of the reduced segment (a row value): every
        ``Load`` under it becomes a ``FirstLoad`` (``load``); row values (reductions, arguments) stay.

        A random number under ``e`` is drawn at the segment's first point too (``EdgeIndex``):
        left at the element's own index (``LinearIndex``), the "first" value had differed per
        element, and a layer norm of ``r + dropout(x)`` shifted every element by another value."""
        done: dict[int, Expr] = {}

        def walk(x: Expr) -> Expr:
            if id(x) in done:
                return done[id(x)]
            if isinstance(x, LinearIndex):
                y = self._intern(EdgeIndex(load is LastLoad))
            elif isinstance(x, Load):
                y = self._intern(load(x.tensor, x.dtype))
            elif isinstance(x, Cast):
                y = self.cast(walk(x.arg), x.dtype)
            elif isinstance(x, Call):
                y = self._intern(Call(x.op, tuple(walk(a) for a in x.args), x.dtype))
            else:
                y = x
            done[id(x)] = y
            return y

        return walk(e)

    def at_last(self, e: Expr) -> Expr:
        """``e`` evaluated at the last point of the reduced segment (``LastLoad``s)."""
        return self.at_first(e, LastLoad)

    # Short spellings for the common binary ops.
    def add(self, a: Expr, b: Expr) -> Expr:
        return self.call("add", a, b)

    def sub(self, a: Expr, b: Expr) -> Expr:
        return self.call("sub", a, b)

    def mul(self, a: Expr, b: Expr) -> Expr:
        return self.call("mul", a, b)

    def div(self, a: Expr, b: Expr) -> Expr:
        return self.call("div", a, b)

    def where(self, c: Expr, a: Expr, b: Expr) -> Expr:
        return self.call("where", c, a, b)


def topo_exprs(roots: list[Expr]) -> list[Expr]:
    """All expressions reachable from ``roots``, producers first, each once."""
    seen: set[int] = set()
    order: list[Expr] = []

    def visit(e: Expr) -> None:
        if id(e) in seen:
            return
        seen.add(id(e))
        for a in getattr(e, "args", ()) or ((e.arg,) if isinstance(e, Cast) else ()):
            visit(a)
        order.append(e)

    for r in roots:
        visit(r)
    return order


@dataclass
class TensorParam:
    """A tensor the kernel reads or writes, specialized on layout (never on sizes)."""

    name: str
    dtype: torch.dtype                  # storage dtype
    is_output: bool
    # For each iteration root dim: "bcast" (stride 0), "unit" (stride 1) or "strided" (runtime arg).
    dim_kinds: tuple[str, ...]
    dense: bool = False                 # offset equals the flat iteration index
    # Column-sum partials (reduction kernels): the kernel adds each stored value into slot
    # ``gf_slot`` of a float workspace [gf_slots, reduced extents] (one slot per row worker:
    # a block on CUDA, an OpenMP chunk on the CPU); the launcher sums the slots into the output.
    partials: bool = False


@dataclass
class ScalarParam:
    name: str
    dtype: torch.dtype                  # float64 / int64 / bool


@dataclass
class Kernel:
    """A lowered pointwise kernel: params, loop nest, expression body and stores."""

    name: str
    tensors: list[TensorParam]
    scalars: list[ScalarParam]
    n_dims: int                          # iteration root dims after coalescing
    stores: list[tuple[int, Expr]]       # (tensor param index, value)
    nest: Any = None                     # schedule.LoopNest
    notes: list[str] = field(default_factory=list)
    # random kernels: per root, the roots whose extents multiply into its row-major stride
    # (``LinearIndex`` is the row-major index whatever the iteration order)
    linear: Optional[list[tuple[int, ...]]] = None

    def exprs(self) -> list[Expr]:
        return topo_exprs([e for _, e in self.stores])

    def accessed(self) -> set[int]:
        """Indices of the tensors the kernel reads or writes: the outputs and every input an
        expression loads (not an input read for its sizes only, ``graphfuser::dense_copy``'s
        view: no width, alignment or stride of it matters)."""
        loaded = {e.tensor for e in self.exprs() if isinstance(e, Load)}
        return {p for p, t in enumerate(self.tensors) if t.is_output or p in loaded}

    def has_random(self) -> bool:
        """Whether the kernel draws random numbers (the ``unroll_with_rng`` knob looks)."""
        return any(isinstance(e, Call) and e.op in RANDOM_PRIMS for e in self.exprs())


def expr_text(e: Expr, names: dict[int, str]) -> str:
    """Readable pseudo-code of one expression (operands by their names in ``names``)."""
    if isinstance(e, Load):
        return f"load(t{e.tensor})"
    if isinstance(e, FirstLoad):
        return f"load_first(t{e.tensor})"
    if isinstance(e, LastLoad):
        return f"load_last(t{e.tensor})"
    if isinstance(e, Const):
        return repr(e.value)
    if isinstance(e, ScalarArg):
        return f"a{e.index}"
    if isinstance(e, ReductionSize):
        return "reduction_size()"
    if isinstance(e, LinearIndex):
        return "linear_index()"
    if isinstance(e, EdgeIndex):
        return f"linear_index_{'last' if e.last else 'first'}()"
    if isinstance(e, Cast):
        return f"cast({names[id(e.arg)]})"
    if isinstance(e, Reduce):
        return f"reduce_{e.op}({names[id(e.args[0])]})"
    return f"{e.op}({', '.join(names[id(a)] for a in e.args)})"


def kernel_ir_text(kernel, nest, header: str) -> str:
    """The ``kernel_ir`` dump: parameters, then the loop nest with the expression body inside."""
    lines = [header]
    for t in kernel.tensors:
        lines.append(f"  {'out' if t.is_output else 'in '} {t.name}: {t.dtype} dims={list(t.dim_kinds)}"
                     + (" dense" if getattr(t, "dense", False) else ""))
    for sp in kernel.scalars:
        lines.append(f"  arg {sp.name}: {sp.dtype}")
    names: dict[int, str] = {}
    body = []
    for i, e in enumerate(kernel.exprs()):
        names[id(e)] = f"e{i}"
        body.append(f"e{i} : {str(e.dtype).replace('torch.', '')} = {expr_text(e, names)}")
    for p, e in kernel.stores:
        body.append(f"{kernel.tensors[p].name}[...] = {names[id(e)]}")
    pad = "\n" + "  " * (len(nest.leaves) + 1)
    lines.append(nest.loop_nest_str(pad.join(body)))
    return "\n".join(lines)
