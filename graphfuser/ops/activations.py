"""Rows for the activations and masks real models are made of (MobileNetV3, EfficientNet,
GhostNet, attention masks): relu6, hardswish, hardsigmoid, mish, masked_fill.

Every comparison is written so that NaN propagates as eager's kernels do (``x < lo ? lo : x``
keeps a NaN ``x``).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..codegen.kir import Expr
from .table import OpCall, OpRow, register


def _clamp_const(call: OpCall, x: Expr, lo: float, hi: float) -> Expr:
    b = call.b
    x = b.where(b.call("lt", x, call.const(lo)), call.const(lo), x)
    return b.where(b.call("gt", x, call.const(hi)), call.const(hi), x)


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
