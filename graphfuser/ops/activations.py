"""Rows for the activations and masks real models are made of: relu, leaky_relu, hardtanh, gelu,
silu, softplus, and (MobileNetV3, EfficientNet, GhostNet, attention masks) relu6, hardswish,
hardsigmoid, mish, masked_fill.

Every comparison is written so that NaN propagates as eager's kernels do (``x < lo ? lo : x``
keeps a NaN ``x``).
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F

from ..ir.kir import Expr
from .table import OpCall, OpRow, register


def _clamp_const(call: OpCall, x: Expr, lo: float, hi: float) -> Expr:
    """minimum(maximum(x, lo), hi): NaN propagates, and a zero's sign follows the device's
    maximum / minimum as eager's clamp does (codegen/dialects.py: on CUDA -0.0 < 0.0)"""
    b = call.b
    return b.call("minimum", b.call("maximum", x, call.const(lo)), call.const(hi))


def _relu6(call: OpCall) -> Expr:
    """clamp(x, 0, 6)"""
    return _clamp_const(call, call.x("self"), 0, 6)


def _hardsigmoid(call: OpCall) -> Expr:
    """clamp(x + 3, 0, 6) / 6"""
    b = call.b
    return b.div(_clamp_const(call, b.add(call.x("self"), call.const(3)), 0, 6), call.const(6))


def _hardswish(call: OpCall) -> Expr:
    """x * clamp(x + 3, 0, 6) / 6"""
    b, x = call.b, call.x("self")
    return b.div(b.mul(x, _clamp_const(call, b.add(x, call.const(3)), 0, 6)), call.const(6))


def _mish(call: OpCall) -> Expr:
    """x * tanh(softplus(x)), softplus linear above 20 as in eager"""
    b, x = call.b, call.x("self")
    soft = b.where(b.call("gt", x, call.const(20)), x, b.call("log1p", b.call("exp", x)))
    return b.mul(x, b.call("tanh", soft))


register(OpRow("relu6", ("aten::relu6",), "pointwise", ("self",), "default", ("self",), decomp=_relu6,
               no_bool=True, eager=F.relu6, doc="min(max(self, 0), 6)"))
register(OpRow("hardsigmoid", ("aten::hardsigmoid",), "pointwise", ("self",), "default", ("self",),
               decomp=_hardsigmoid, float_only=True, eager=F.hardsigmoid, doc="clamp(x + 3, 0, 6) / 6"))
register(OpRow("hardswish", ("aten::hardswish",), "pointwise", ("self",), "default", ("self",),
               decomp=_hardswish, float_only=True, eager=F.hardswish, doc="x * clamp(x + 3, 0, 6) / 6"))
register(OpRow("mish", ("aten::mish",), "pointwise", ("self",), "default", ("self",), decomp=_mish,
               float_only=True, eager=F.mish, doc="x * tanh(softplus(x))"))


def _masked_fill(call: OpCall) -> Expr:
    """mask ? value : self (value cast to self's dtype)"""
    b = call.b
    mask = call["mask"]
    cond = b.cast(mask, torch.bool) if isinstance(mask, Expr) else call.const(mask, torch.bool)
    return b.where(cond, call.x("value"), call.x("self"))


# The output keeps self's dtype: only self takes part in promotion; mask and value are read.
# A value tensor with dims or a non-bool mask makes eager raise while profiling, so such a node
# never gets a profiled type; the guard keeps rank and dtype as profiled.
register(OpRow("masked_fill", ("aten::masked_fill",), "pointwise", ("self", "mask", "value"), "default",
               ("self",), decomp=_masked_fill, eager=torch.masked_fill,
               doc="mask ? value : self"))


# -- the common activations ------------------------------------------------------------------------------
def _relu(call: OpCall) -> Expr:
    """maximum(x, 0), NaN propagating: eager's relu is clamp_min(x, 0), so relu(-0.0) is 0.0 on
    CUDA (::max orders -0.0 below 0.0) and -0.0 on the CPU (std::max keeps the first operand)"""
    b = call.b
    return b.call("maximum", call.x("self"), call.const(0))


register(OpRow("relu", ("aten::relu",), "pointwise", ("self",), "default", ("self",), decomp=_relu,
               no_bool=True, eager=torch.relu, doc="max(self, 0)"))


def _leaky_relu(call: OpCall) -> Expr:
    """x > 0 ? x : x * negative_slope"""
    b, x = call.b, call.x("self")
    return b.where(b.call("gt", x, call.const(0)), x, b.mul(x, call.const(call["negative_slope"])))


register(OpRow("leaky_relu", ("aten::leaky_relu",), "pointwise", ("self", "negative_slope=0.01"), "default",
               ("self",), consts=("negative_slope",), decomp=_leaky_relu, float_only=True,
               eager=lambda self, negative_slope=0.01: torch.nn.functional.leaky_relu(self, negative_slope),
               doc="x if x > 0 else negative_slope * x"))


def _hardtanh(call: OpCall) -> Expr:
    """clamp(x, min_val, max_val)"""
    return _clamp_const(call, call.x("self"), call["min_val"], call["max_val"])


register(OpRow("hardtanh", ("aten::hardtanh",), "pointwise", ("self", "min_val=-1", "max_val=1"), "default",
               ("self",), consts=("min_val", "max_val"), decomp=_hardtanh, no_bool=True,
               eager=lambda self, min_val=-1, max_val=1: torch.nn.functional.hardtanh(self, min_val, max_val),
               doc="clamp(self, min_val, max_val)"))


def _gelu(call: OpCall) -> Expr:
    """0.5 x (1 + erf(x / sqrt 2)), or with approximate='tanh' x * sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3))"""
    b, x = call.b, call.x("self")
    half, one = call.const(0.5), call.const(1)
    if call["approximate"] == "tanh":
        # 0.5 x (1 + tanh(u)) == x * sigmoid(2u): same function, one exp instead of tanh, and no
        # cancellation in (1 + tanh(u)) for negative x.
        inner = b.mul(call.const(2 * math.sqrt(2 / math.pi)),
                      b.add(x, b.mul(call.const(0.044715), b.mul(x, b.mul(x, x)))))
        return b.mul(x, b.call("sigmoid", inner))
    return b.mul(b.mul(half, x), b.add(one, b.call("erf", b.mul(x, call.const(math.sqrt(0.5))))))


def _gelu_check(consts, parts) -> Optional[str]:
    if consts.get("approximate") not in ("none", "tanh"):
        return f"gelu approximate={consts.get('approximate')!r} is not known"
    return None


register(OpRow("gelu", ("aten::gelu",), "pointwise", ("self", "approximate='none'"), "default", ("self",),
               consts=("approximate",), decomp=_gelu, float_only=True, check=_gelu_check,
               eager=lambda self, approximate="none": torch.nn.functional.gelu(self, approximate=approximate),
               doc="GELU, exact (erf) or approximate='tanh'"))


def _silu(call: OpCall) -> Expr:
    """x * sigmoid(x)"""
    x = call.x("self")
    return call.b.mul(x, call.b.call("sigmoid", x))


register(OpRow("silu", ("aten::silu",), "pointwise", ("self",), "default", ("self",), decomp=_silu,
               float_only=True, eager=torch.nn.functional.silu, doc="x * sigmoid(x)"))


def _softplus(call: OpCall) -> Expr:
    """x * beta > threshold ? x : log1p(exp(x * beta)) / beta"""
    b, x = call.b, call.x("self")
    beta = call.const(call["beta"])
    xb = b.mul(x, beta)
    soft = b.div(b.call("log1p", b.call("exp", xb)), beta)
    return b.where(b.call("gt", xb, call.const(call["threshold"])), x, soft)


register(OpRow("softplus", ("aten::softplus",), "pointwise", ("self", "beta=1", "threshold=20"), "default",
               ("self",), consts=("beta", "threshold"), decomp=_softplus, float_only=True,
               eager=lambda self, beta=1, threshold=20: torch.nn.functional.softplus(self, beta, threshold),
               doc="log(1 + exp(beta x)) / beta, linear above threshold"))
