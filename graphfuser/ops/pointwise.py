"""Pointwise and cast rows of the op table.

Each row is declared once here; simple rows name a primitive (its C template lives in
``codegen.kir.PRIMS``), composite rows give a decomposition into primitives.
"""
from __future__ import annotations

from typing import Optional

import torch

from ..ir.kir import FLOAT_TYPES, INT_TYPES, Expr
from .table import OpCall, OpRow, register

BOTH = ("self", "other")


def _is_int(dt: torch.dtype) -> bool:
    return dt in INT_TYPES or dt == torch.bool


# -- small combinators ---------------------------------------------------------------------
def unary(name: str, prim: Optional[str] = None, promotion: str = "int_to_float", aten=None,
          eager=None, doc: str = "", **kw) -> OpRow:
    return register(OpRow(name, aten or (f"aten::{name}",), "pointwise", ("self",), promotion,
                          ("self",), prim=prim or name, eager=eager or getattr(torch, name), doc=doc, **kw))


def binary(name: str, prim: Optional[str] = None, promotion: str = "default", aten=None, eager=None,
           doc: str = "", **kw) -> OpRow:
    return register(OpRow(name, aten or (f"aten::{name}",), "pointwise", BOTH, promotion, BOTH,
                          prim=prim or name, eager=eager or getattr(torch, name), doc=doc, **kw))


def _reject_int(what: str):
    def check(consts, parts) -> Optional[str]:
        if all(_is_int(p.dtype) for p in parts.values()):
            return f"{what} on integer inputs can divide by zero, which eager reports as an error; not fused"
        return None
    return check


# -- arithmetic -------------------------------------------------------------------------------
def _scaled(call: OpCall, name: str) -> Expr:
    alpha = call["alpha"]
    x = call.x(name)
    if isinstance(alpha, Expr):
        return call.b.mul(call.b.cast(alpha, call.compute), x)
    if alpha == 1:
        return x
    return call.b.mul(call.const(alpha), x)


def _add(call: OpCall) -> Expr:
    """self + alpha * other"""
    return call.b.add(call.x("self"), _scaled(call, "other"))


def _sub(call: OpCall) -> Expr:
    """self - alpha * other"""
    return call.b.sub(call.x("self"), _scaled(call, "other"))


def _rsub(call: OpCall) -> Expr:
    """other - alpha * self"""
    return call.b.sub(call.x("other"), _scaled(call, "self"))


def _alpha_check(consts, parts) -> Optional[str]:
    if isinstance(consts.get("alpha"), bool):
        return "boolean alpha is not fused"
    return None


register(OpRow("add", ("aten::add",), "pointwise", ("self", "other", "alpha=1"), "default", BOTH,
               consts=("alpha",), decomp=_add, check=_alpha_check,
               eager=lambda self, other, alpha=1: torch.add(self, other, alpha=alpha),
               doc="self + alpha * other"))
register(OpRow("sub", ("aten::sub",), "pointwise", ("self", "other", "alpha=1"), "default", BOTH,
               consts=("alpha",), decomp=_sub, no_bool=True, check=_alpha_check,
               eager=lambda self, other, alpha=1: torch.sub(self, other, alpha=alpha),
               doc="self - alpha * other"))
register(OpRow("rsub", ("aten::rsub",), "pointwise", ("self", "other", "alpha=1"), "default", BOTH,
               consts=("alpha",), decomp=_rsub, no_bool=True, check=_alpha_check,
               eager=lambda self, other, alpha=1: torch.rsub(self, other, alpha=alpha),
               doc="other - alpha * self"))
binary("mul", aten=("aten::mul",), doc="self * other")


def _div(call: OpCall) -> Expr:
    """self / other, with rounding_mode None | 'trunc' | 'floor'"""
    b, mode = call.b, call["rounding_mode"]
    x, y = call.x("self"), call.x("other")
    if mode is None:
        return b.div(x, y)
    if mode == "trunc":
        return b.call("trunc", b.div(x, y))
    return _floor_div(call, x, y)


def _floor_div(call: OpCall, x: Expr, y: Expr) -> Expr:
    # Python-style floor division, as torch computes it for floating types: (x - fmod(x, y)) / y
    # corrected towards -inf, and plain x / y when y == 0.
    b = call.b
    zero = call.const(0)
    mod = b.call("fmod", x, y)
    div = b.div(b.sub(x, mod), y)
    wrong_sign = b.call("and", b.call("ne", mod, zero),
                        b.call("ne", b.call("lt", y, zero), b.call("lt", mod, zero)))
    div = b.where(wrong_sign, b.sub(div, call.const(1)), div)
    floor = b.call("floor", div)
    floor = b.where(b.call("gt", b.sub(div, floor), call.const(0.5)), b.add(floor, call.const(1)), floor)
    # torch returns copysign(0, x / y) when the quotient is zero
    signed_zero = b.where(b.call("signbit", b.div(x, y)), call.const(-0.0), zero)
    nonzero_div = b.where(b.call("ne", div, zero), floor, signed_zero)
    return b.where(b.call("eq", y, zero), b.div(x, y), nonzero_div)


def _div_promotion(consts) -> str:
    return "int_to_float" if consts.get("rounding_mode") is None else "default"


def _div_check(consts, parts) -> Optional[str]:
    if consts.get("rounding_mode") is not None:
        return _reject_int("integer division with rounding")(consts, parts)
    return None


register(OpRow("div", ("aten::div", "aten::true_divide"), "pointwise", ("self", "other", "rounding_mode=None"),
               "int_to_float", BOTH, consts=("rounding_mode",), decomp=_div, check=_div_check,
               promotion_for=_div_promotion,
               eager=lambda self, other, rounding_mode=None: torch.div(self, other, rounding_mode=rounding_mode),
               doc="self / other (rounding_mode: None, 'trunc', 'floor')"))
register(OpRow("floor_divide", ("aten::floor_divide",), "pointwise", BOTH, "default", BOTH,
               decomp=lambda call: _floor_div(call, call.x("self"), call.x("other")),
               check=_reject_int("integer floor division"), eager=torch.floor_divide,
               doc="floor(self / other)"))

unary("neg", promotion="default", no_bool=True, aten=("aten::neg", "aten::negative"), doc="-self")


def _abs(call: OpCall) -> Expr:
    """|self| (identity on bool)"""
    if call.compute == torch.bool:
        return call.x("self")
    return call.b.call("abs", call.x("self"))


register(OpRow("abs", ("aten::abs",), "pointwise", ("self",), "default", ("self",), decomp=_abs,
               eager=torch.abs, doc="|self|"))


def _sign(call: OpCall) -> Expr:
    """(0 < x) - (x < 0)"""
    b, x = call.b, call.x("self")
    if call.compute == torch.bool:
        return x
    zero = call.const(0)
    return b.sub(b.cast(b.call("lt", zero, x), call.compute), b.cast(b.call("lt", x, zero), call.compute))


register(OpRow("sign", ("aten::sign",), "pointwise", ("self",), "default", ("self",), decomp=_sign,
               eager=torch.sign, doc="sign of self: -1, 0 or 1"))
unary("reciprocal", doc="1 / self")

for _n in ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan",
           "asin", "acos", "atan", "sinh", "cosh", "tanh", "sigmoid", "erf", "erfc", "lgamma"):
    unary(_n, doc=f"{_n}(self)")
binary("atan2", promotion="int_to_float", doc="atan2(self, other)")


# -- powers and remainders --------------------------------------------------------------------
def _pow(call: OpCall) -> Expr:
    """self ** exponent (small constant exponents become multiplications)"""
    b = call.b
    e = call["exponent"]
    x = call.x("self")
    if not isinstance(e, Expr) and not isinstance(call["self"], Expr):
        return b.call("pow", x, call.x("exponent"))
    base = call.participants.get("self")
    cpu_half = call.device_type == "cpu" and base is not None and base.dtype == torch.float16
    if not isinstance(e, Expr):
        if call.compute in FLOAT_TYPES:
            special = {1: lambda: x, 2: lambda: b.mul(x, x), 3: lambda: b.mul(b.mul(x, x), x),
                       0.5: lambda: b.call("sqrt", x), -0.5: lambda: b.call("rsqrt", x),
                       -1: lambda: b.call("reciprocal", x), -2: lambda: b.call("reciprocal", b.mul(x, x)),
                       0: lambda: call.const(1)}
            if cpu_half:
                # eager's CPU kernel for float16 takes std::pow for every exponent: pow(-0, 0.5)
                # is 0, sqrt(-0) -0; pow(-inf, -0.5) is 0, rsqrt(-inf) NaN (the other special
                # cases agree with pow on every value)
                del special[0.5], special[-0.5]
            if e in special:
                return special[e]()
        elif e in (0, 1, 2, 3):
            out = call.const(1)
            for _ in range(int(e)):
                out = b.mul(out, x)
            return out
    part = call.participants.get("exponent")
    if isinstance(e, Expr) and isinstance(call["self"], Expr) and call.compute in FLOAT_TYPES \
            and part is not None and part.priority == "wrapped" and not cpu_half:
        # a run-time Python-number exponent: eager's pow(Tensor, Scalar) takes sqrt for 0.5 and
        # rsqrt for -0.5 (they differ from pow at -inf and -0: sqrt(-inf) is NaN, pow(-inf, 0.5)
        # inf); the other special cases (2, 3, -1, -2) agree with pow on every value. Eager's
        # CPU kernel for float16 takes std::pow for every exponent.
        ex = call.x("exponent")
        p = b.call("pow", x, ex)
        return b.where(b.call("eq", ex, call.const(0.5)), b.call("sqrt", x),
                       b.where(b.call("eq", ex, call.const(-0.5)), b.call("rsqrt", x), p))
    return b.call("pow", x, call.x("exponent"))


def _pow_check(consts, parts) -> Optional[str]:
    # Integer pow is exact (wrapping) square-and-multiply for a constant exponent >= 0. A negative
    # integer exponent makes eager raise (a scalar exponent) or truncate (a tensor one): the
    # kernel cannot tell a run-time exponent's sign from the guards, so those stay eager.
    e = consts.get("exponent")
    if all(_is_int(p.dtype) for p in parts.values()) and not (isinstance(e, int) and e >= 0):
        return "integer pow with a run-time or negative exponent is not fused (eager raises or truncates)"
    return None


register(OpRow("pow", ("aten::pow",), "pointwise", ("self", "exponent"), "default", ("self", "exponent"),
               decomp=_pow, check=_pow_check, eager=torch.pow, doc="self ** exponent"))
binary("fmod", check=_reject_int("integer fmod"), doc="C fmod: remainder with the sign of self")
binary("remainder", check=_reject_int("integer remainder"), doc="Python remainder: sign of other")


def _rounding(name: str):
    def lower(call: OpCall) -> Expr:
        x = call.x("self")
        if _is_int(call.compute):
            return x
        return call.b.call(name, x)
    lower.__doc__ = f"{name}(self) (identity on integers)"
    return lower


for _n in ("floor", "ceil", "trunc"):
    register(OpRow(_n, (f"aten::{_n}",), "pointwise", ("self",), "default", ("self",), decomp=_rounding(_n),
                   no_bool=True, eager=getattr(torch, _n), doc=f"{_n}(self)"))
register(OpRow("round", ("aten::round",), "pointwise", ("self",), "default", ("self",), decomp=_rounding("round"),
               no_bool=True, eager=torch.round, doc="round half to even"))


def _frac(call: OpCall) -> Expr:
    """self - trunc(self)"""
    x = call.x("self")
    return call.b.sub(x, call.b.call("trunc", x))


register(OpRow("frac", ("aten::frac",), "pointwise", ("self",), "default", ("self",), decomp=_frac,
               float_only=True, eager=torch.frac, doc="self - trunc(self)"))
binary("maximum", doc="elementwise max, NaN propagating")
binary("minimum", doc="elementwise min, NaN propagating")
binary("fmax", doc="elementwise max ignoring NaN (NaN only where both are NaN)")
binary("fmin", doc="elementwise min ignoring NaN (NaN only where both are NaN)")


def _needs_other(what: str):
    def check(consts, parts) -> Optional[str]:
        if "other" not in parts:
            return f"{what} of one tensor is a reduction (amax/amin rows); only max(a, b) is pointwise"
        return None
    return check


# torch.max(a, b) / torch.min(a, b): the ``.other`` overloads of aten::max / aten::min. The
# reduction overloads (one tensor, or a dim with two outputs) are rejected by the check and by
# the output count.
binary("max_other", prim="maximum", aten=("aten::max",), eager=torch.max, check=_needs_other("max"),
       doc="torch.max(self, other): elementwise max, NaN propagating")
binary("min_other", prim="minimum", aten=("aten::min",), eager=torch.min, check=_needs_other("min"),
       doc="torch.min(self, other): elementwise min, NaN propagating")


# -- clamps, selects --------------------------------------------------------------------------
def _lone_nan_bound_propagates() -> bool:
    """Whether this torch's ``clamp`` with one Python-number bound, NaN, returns NaN (it returns
    the input unchanged before pytorch/pytorch#172200, on the CPU and on CUDA; ``clamp_min`` /
    ``clamp_max`` and ``clamp`` with both bounds propagate it in every version: eager checks
    those on the host). Asked once, of eager itself."""
    global _LONE_NAN
    if _LONE_NAN is None:
        x = torch.zeros(1)
        _LONE_NAN = bool(torch.clamp(x, min=float("nan")).isnan().all()) and \
            bool(torch.clamp(x, None, float("nan")).isnan().all())
    return _LONE_NAN


_LONE_NAN: Optional[bool] = None


def _clamp_with(call: OpCall, lone_bound_may_ignore_nan: bool) -> Expr:
    """minimum(maximum(self, min), max): NaN in self or in a bound propagates, and max wins when
    min > max, as in eager; ``aten::clamp`` given one Python-number bound that is NaN returns the
    input unchanged where this torch's eager does (``_lone_nan_bound_propagates``)."""
    b, x = call.b, call.x("self")
    given = [n for n in ("min", "max") if call.args.get(n) is not None]
    y = x
    for name, prim in (("min", "maximum"), ("max", "minimum")):
        if name in given:
            y = b.call(prim, y, call.x(name))
    if lone_bound_may_ignore_nan and len(given) == 1 and not _lone_nan_bound_propagates():
        part = call.participants.get(given[0])
        if part is None or part.priority == "wrapped":        # a Python number, not a tensor
            y = b.where(b.call("isnan", call.x(given[0])), x, y)
    return y


def _clamp(call: OpCall) -> Expr:
    """aten::clamp / clip"""
    return _clamp_with(call, True)


def _clamp_one_side(call: OpCall) -> Expr:
    """aten::clamp_min / clamp_max"""
    return _clamp_with(call, False)


def _clamp_check(consts, parts) -> Optional[str]:
    if "min" not in parts and "max" not in parts:
        return "clamp without min and max raises in eager; not fused"
    return None


register(OpRow("clamp", ("aten::clamp", "aten::clip"), "pointwise", ("self", "min=None", "max=None"), "default",
               ("self", "min", "max"), decomp=_clamp, no_bool=True, check=_clamp_check,
               eager=lambda self, min=None, max=None: torch.clamp(self, min, max), doc="clamp(self, min, max)"))
register(OpRow("clamp_min", ("aten::clamp_min",), "pointwise", ("self", "min"), "default", ("self", "min"),
               decomp=_clamp_one_side, no_bool=True, eager=torch.clamp_min, doc="max(self, min)"))
register(OpRow("clamp_max", ("aten::clamp_max",), "pointwise", ("self", "max"), "default", ("self", "max"),
               decomp=_clamp_one_side, no_bool=True, eager=torch.clamp_max, doc="min(self, max)"))


def _where(call: OpCall) -> Expr:
    """condition ? self : other"""
    return call.b.where(call.b.cast(call["condition"], torch.bool) if isinstance(call["condition"], Expr)
                        else call.const(call["condition"], torch.bool), call.x("self"), call.x("other"))


register(OpRow("where", ("aten::where",), "pointwise", ("condition", "self", "other"), "default", BOTH,
               decomp=_where, eager=torch.where, doc="condition ? self : other"))


def _threshold(call: OpCall) -> Expr:
    """self <= threshold ? value : self"""
    b, x = call.b, call.x("self")
    return b.where(b.call("le", x, call.x("threshold")), call.x("value"), x)


register(OpRow("threshold", ("aten::threshold",), "pointwise", ("self", "threshold", "value"), "default",
               ("self",), decomp=_threshold, no_bool=True, eager=torch.threshold,
               doc="self <= threshold ? value : self"))


def _lerp(call: OpCall) -> Expr:
    """start + weight * (end - start), computed as torch does for weight >= 0.5"""
    b = call.b
    s, e, w = call.x("self"), call.x("end"), call.x("weight")
    diff = b.sub(e, s)
    low = b.add(s, b.mul(w, diff))
    high = b.sub(e, b.mul(diff, b.sub(call.const(1), w)))
    return b.where(b.call("lt", b.call("abs", w), call.const(0.5)), low, high)


register(OpRow("lerp", ("aten::lerp",), "pointwise", ("self", "end", "weight"), "default", ("self", "end"),
               decomp=_lerp, float_only=True, eager=torch.lerp, doc="self + weight * (end - self)"))


def _addc(op: str):
    def lower(call: OpCall) -> Expr:
        b = call.b
        prod = b.call(op, call.x("tensor1"), call.x("tensor2"))
        v = call["value"]
        if not (not isinstance(v, Expr) and v == 1):
            prod = b.mul(call.x("value"), prod)
        return b.add(call.x("self"), prod)
    lower.__doc__ = f"self + value * tensor1 {'*' if op == 'mul' else '/'} tensor2"
    return lower


register(OpRow("addcmul", ("aten::addcmul",), "pointwise", ("self", "tensor1", "tensor2", "value=1"), "default",
               ("self", "tensor1", "tensor2"), decomp=_addc("mul"), no_bool=True,
               eager=lambda self, t1, t2, value=1: torch.addcmul(self, t1, t2, value=value),
               doc="self + value * tensor1 * tensor2"))
register(OpRow("addcdiv", ("aten::addcdiv",), "pointwise", ("self", "tensor1", "tensor2", "value=1"), "default",
               ("self", "tensor1", "tensor2"), decomp=_addc("div"), float_only=True,
               eager=lambda self, t1, t2, value=1: torch.addcdiv(self, t1, t2, value=value),
               doc="self + value * tensor1 / tensor2"))


# -- comparisons and logic --------------------------------------------------------------------
for _n in ("eq", "ne", "lt", "le", "gt", "ge"):
    binary(_n, promotion="always_bool", doc=f"self {_n} other")


def _logical(op: str):
    def lower(call: OpCall) -> Expr:
        b = call.b
        zero = call.const(0)
        args = [b.call("ne", call.x(n), zero) for n in call.args if n in ("self", "other")]
        if op == "xor":
            return b.call("ne", args[0], args[1])
        return b.call(op, *args)
    lower.__doc__ = f"logical {op} of (x != 0)"
    return lower


for _n in ("and", "or", "xor"):
    register(OpRow(f"logical_{_n}", (f"aten::logical_{_n}",), "pointwise", BOTH, "always_bool", BOTH,
                   decomp=_logical(_n), eager=getattr(torch, f"logical_{_n}"), doc=f"(self != 0) {_n} (other != 0)"))
register(OpRow("logical_not", ("aten::logical_not",), "pointwise", ("self",), "always_bool", ("self",),
               decomp=_logical("not"), eager=torch.logical_not, doc="self == 0"))


def _bitwise_check(consts, parts) -> Optional[str]:
    if any(p.dtype.is_floating_point for p in parts.values()):
        return "bitwise ops need integer or bool inputs"
    return None


for _n, _prim in (("and", "bitand"), ("or", "bitor"), ("xor", "bitxor")):
    binary(f"bitwise_{_n}", prim=_prim, aten=(f"aten::bitwise_{_n}", f"aten::__{_n}__"), check=_bitwise_check,
           doc=f"bitwise {_n}")


def _bitnot(call: OpCall) -> Expr:
    """~self (logical not on bool)"""
    x = call.x("self")
    return call.b.call("not" if call.compute == torch.bool else "bitnot", x)


register(OpRow("bitwise_not", ("aten::bitwise_not",), "pointwise", ("self",), "default", ("self",), decomp=_bitnot,
               check=_bitwise_check, eager=torch.bitwise_not, doc="~self"))


def _float_class(prim: str, int_value: bool):
    def lower(call: OpCall) -> Expr:
        if not call.compute.is_floating_point:
            # x == x / x != x: the constant, still reading x (a constant would leave a reduction
            # that feeds it with nothing to compute: "reduced loop axes without a reduction")
            x = call.x("self")
            return call.b.call("eq" if int_value else "ne", x, x)
        return call.b.call(prim, call.x("self"))
    lower.__doc__ = f"{prim}(self)"
    return lower


for _n, _v in (("isnan", False), ("isinf", False), ("isfinite", True)):
    register(OpRow(_n, (f"aten::{_n}",), "pointwise", ("self",), "always_bool", ("self",),
                   decomp=_float_class(_n, _v), eager=getattr(torch, _n), doc=f"{_n}(self)"))


def _nan_to_num(call: OpCall) -> Expr:
    """NaN -> nan, +inf -> posinf, -inf -> neginf (defaults: 0 and the dtype's finite extremes)"""
    b, x = call.b, call.x("self")
    if not call.compute.is_floating_point:
        return x
    info = torch.finfo(call.out_dtype)
    nan = call["nan"] if call["nan"] is not None else 0.0
    pos = call["posinf"] if call["posinf"] is not None else info.max
    neg = call["neginf"] if call["neginf"] is not None else info.min
    x2 = b.where(b.call("isnan", x), call.const(nan), x)
    isinf = b.call("isinf", x)
    pos_inf = b.call("and", isinf, b.call("gt", x, call.const(0)))
    neg_inf = b.call("and", isinf, b.call("lt", x, call.const(0)))
    return b.where(pos_inf, call.const(pos), b.where(neg_inf, call.const(neg), x2))


register(OpRow("nan_to_num", ("aten::nan_to_num",), "pointwise", ("self", "nan=None", "posinf=None", "neginf=None"),
               "default", ("self",), consts=("nan", "posinf", "neginf"), decomp=_nan_to_num,
               eager=lambda self, nan=None, posinf=None, neginf=None: torch.nan_to_num(self, nan, posinf, neginf),
               doc="replace NaN and infinities with finite values"))


# -- casts and no-ops -------------------------------------------------------------------------
def _cast(call: OpCall) -> Expr:
    """cast self to the output dtype"""
    return call.b.cast(call["self"], call.out_dtype)


def _to_eager(self, *args):
    return self.to(*[a for a in args[:2] if a is not None]) if args else self


register(OpRow("to", ("aten::to", "aten::type_as", "aten::_to_copy"), "cast", ("self", "arg1=None", "arg2=None",
               "arg3=None", "arg4=None", "arg5=None"), "cast", ("self",),
               ignored=("arg1", "arg2", "arg3", "arg4", "arg5"), decomp=_cast, eager=_to_eager,
               doc="dtype conversion: to(dtype), type_as, .float() / .half() / .double() / .int() / .long()"))

# autocast's casts made explicit (passes/autocast.py): each casts only floating tensors on a
# device autocast is enabled for; inside a group the guard pins the input's dtype and device, so
# the profiled output dtype is the one the kernel must write
register(OpRow("autocast_to_full_precision", ("aten::_autocast_to_full_precision",), "cast",
               ("self", "cuda_enabled", "cpu_enabled"), "cast", ("self",), ignored=("cuda_enabled", "cpu_enabled"),
               decomp=_cast, eager=torch.ops.aten._autocast_to_full_precision,
               doc="autocast's cast of fp16 / bf16 inputs to float32 (fp32-policy ops)"))
register(OpRow("autocast_to_reduced_precision", ("aten::_autocast_to_reduced_precision",), "cast",
               ("self", "cuda_enabled", "cpu_enabled", "cuda_dtype", "cpu_dtype"), "cast", ("self",),
               ignored=("cuda_enabled", "cpu_enabled", "cuda_dtype", "cpu_dtype"),
               decomp=_cast, eager=torch.ops.aten._autocast_to_reduced_precision,
               doc="autocast's cast of float32 inputs to the autocast dtype (lower-precision ops)"))


def _identity(call: OpCall) -> Expr:
    """identity (dropout in eval mode or with p = 0)"""
    return call.b.cast(call["input"], call.out_dtype)


def _dropout_check(consts, parts) -> Optional[str]:
    if consts.get("train") is False or consts.get("p") == 0:
        return None
    return "dropout in training mode (p > 0) draws random numbers; not fused"


register(OpRow("dropout", ("aten::dropout",), "pointwise", ("input", "p=0.5", "train=False"), "none", ("input",),
               consts=("p", "train"), decomp=_identity, check=_dropout_check,
               eager=lambda input, p=0.5, train=False: torch.nn.functional.dropout(input, p, train),
               doc="identity when train=False or p=0"))


def _identity(call: OpCall) -> Expr:
    """self"""
    return call.x("self")


class _BiasGrad(torch.autograd.Function):
    """``graphfuser::bias_grad``'s eager program: ``self`` as it is, and the gradient of ``self``
    summed to ``bias``'s shape as ``bias``'s gradient (the product's own bias gradient, which
    ``passes/bias.py`` detached)."""

    @staticmethod
    def forward(ctx, x, bias):
        ctx.bias_shape = bias.shape
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return g, g.sum_to_size(ctx.bias_shape)


def _eager_bias_grad(self, bias):
    return _BiasGrad.apply(self, bias) if torch.is_grad_enabled() else self


def _first(call: OpCall) -> Expr:
    """self (``bias`` is read by the derivative only)"""
    return call.x("self")


# bias_grad: the identity on a linear's / addmm's result through which its bias gets its gradient
# (passes/bias.py, route_bias_gradients): the fused backward of the group it joins sums the
# gradient into the bias's shape in the pass it makes anyway, where eager's addmm backward reads
# the gradient once more for its own sum
register(OpRow("bias_grad", ("graphfuser::bias_grad",), "pointwise", ("self", "bias"), "none", ("self",),
               decomp=_first, eager=_eager_bias_grad, float_only=True,
               doc="self; the gradient of self, summed to bias's shape, is bias's"))


def _eager_dense_copy(self, like):
    """Unfused (a guard miss, a fallback): the view itself, so that the reshape after it views
    or copies exactly as eager's reshape of it does."""
    return like


# dense_copy: ``self`` broadcast to the shape of ``like`` (its expanded view, read for its sizes
# only) in a new contiguous tensor (passes/broadcast_copy.py: the copy a reshape of an expanded
# view makes, grouped-query attention's repeat_kv). Fused, one kernel that reads ``self`` with
# its size-1 dims broadcast, in 16-byte vectors along a contiguous last dim, where eager's copy
# of the stride-0 view runs TensorIterator's scalar path; the group's guard holds only for the
# layouts profiled, where the reshape copied (a size-1 dim later may make it a view: the guard
# misses, and the view is what the reshape then gets)
register(OpRow("dense_copy", ("graphfuser::dense_copy",), "pointwise", ("self", "like"), "none", ("self",),
               decomp=_first, eager=_eager_dense_copy, dense_output=True,
               doc="self broadcast to like's shape, copied into a new contiguous tensor (unfused: like)"))


# detach: the identity that stops gradients (ops/derivatives.py NON_DIFFERENTIABLE). The partition
# keeps it out of a group where an in-place op writes its alias set (it returns a view in eager).
register(OpRow("detach", ("aten::detach",), "pointwise", ("self",), "default", ("self",), decomp=_identity,
               eager=torch.detach, doc="self, cut from autograd"))
