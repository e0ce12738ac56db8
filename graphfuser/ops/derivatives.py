"""Derivative formulas: the op table's derivative column, registered by row name.

A formula is called by the backward builder (``graphfuser.autodiff.backward``) with a ``D``
builder that emits aten nodes into the backward graph, the forward node's arguments by schema
name (``Value`` for tensors and runtime scalars, Python values for constants), the gradient of
the node's output ``g`` and the output ``out`` itself (recomputed in the backward). It returns
``{arg name: gradient}``; an argument it leaves out gets no gradient from this node, ``ZERO``
says "a zero gradient" (rounding ops, ``div`` with a rounding mode) without computing one.
Gradients come back in the output's shape: the builder sums them back to each input's shape
(``sum_to_size``), except a reduction's data argument (its formula gives that gradient in the
input's shape) and an ``Exact`` result (summed to its input's shape by the formula) and autograd casts them to the input's dtype. Formulas follow eager's
(``tools/autograd/derivatives.yaml``), including its conventions at kinks: ``clamp`` passes the
gradient at the bounds (inclusive mask), ``maximum`` / ``minimum`` split ties 50/50, ``relu``
passes nothing at 0, ``abs`` gives 0 at 0 (``sign``).

Rows with no entry (comparisons, logical and bitwise ops, ``isnan`` ...) produce bool or
integer outputs and are not differentiable; a differentiable input reaching a row that has no
entry makes its group run unfused under grad, with the reason logged under ``>partition``.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import torch

ZERO = object()      # "this input's gradient is zero"

# Rows whose outputs never carry a gradient, whatever their inputs: differentiability stops there.
NON_DIFFERENTIABLE = frozenset({"detach"})

DERIVATIVES: dict[str, Callable[..., dict[str, Any]]] = {}


def derivative(*names: str):
    """Register the decorated formula for the rows ``names``."""
    def wrap(fn):
        for n in names:
            DERIVATIVES[n] = fn
        return fn
    return wrap


def _scaled(d, g, alpha):
    return g if alpha == 1 else d.mul(g, alpha)


@derivative("add")
def _add(d, a, g, out):
    return {"self": g, "other": _scaled(d, g, a.get("alpha", 1))}


@derivative("sub")
def _sub(d, a, g, out):
    return {"self": g, "other": d.neg(_scaled(d, g, a.get("alpha", 1)))}


@derivative("rsub")
def _rsub(d, a, g, out):
    return {"self": d.neg(_scaled(d, g, a.get("alpha", 1))), "other": g}


@derivative("mul")
def _mul(d, a, g, out):
    return {"self": d.mul(g, a["other"]), "other": d.mul(g, a["self"])}


@derivative("div")
def _div(d, a, g, out):
    if a.get("rounding_mode") is not None:
        return {"self": ZERO, "other": ZERO}
    q = d.div(g, a["other"])
    return {"self": q, "other": d.neg(d.mul(q, d.div(a["self"], a["other"])))}


@derivative("floor", "ceil", "trunc", "round", "sign")   # floor_divide: eager has no derivative either
def _zero(d, a, g, out):
    return {k: ZERO for k in ("self", "other")}


@derivative("frac")
def _frac(d, a, g, out):
    return {"self": g}


@derivative("fmod")
def _fmod_(d, a, g, out):
    return {"self": g, "other": d.neg(d.mul(g, d.op("aten::trunc", d.div(a["self"], a["other"]))))}


@derivative("remainder")
def _remainder(d, a, g, out):
    return {"self": g, "other": d.neg(d.mul(g, d.op("aten::floor", d.div(a["self"], a["other"]))))}


@derivative("neg")
def _neg(d, a, g, out):
    return {"self": d.neg(g)}


@derivative("abs")
def _abs(d, a, g, out):
    return {"self": d.mul(g, d.op("aten::sign", a["self"]))}


@derivative("reciprocal")
def _reciprocal(d, a, g, out):
    return {"self": d.neg(d.mul(g, d.mul(out, out)))}


@derivative("exp")
def _exp(d, a, g, out):
    return {"self": d.mul(g, out)}


@derivative("exp2")
def _exp2(d, a, g, out):
    return {"self": d.mul(d.mul(g, out), math.log(2.0))}


@derivative("expm1")
def _expm1(d, a, g, out):
    return {"self": d.mul(g, d.add(out, 1.0))}


@derivative("log")
def _log(d, a, g, out):
    return {"self": d.div(g, a["self"])}


@derivative("log2", "log10")
def _logb(d, a, g, out):
    base = 2.0 if d.row == "log2" else 10.0
    return {"self": d.div(g, d.mul(a["self"], math.log(base)))}


@derivative("log1p")
def _log1p(d, a, g, out):
    return {"self": d.div(g, d.add(a["self"], 1.0))}


@derivative("sqrt")
def _sqrt(d, a, g, out):
    return {"self": d.div(g, d.mul(out, 2.0))}


@derivative("rsqrt")
def _rsqrt(d, a, g, out):
    return {"self": d.mul(d.mul(g, d.mul(out, d.mul(out, out))), -0.5)}


@derivative("sin")
def _sin(d, a, g, out):
    return {"self": d.mul(g, d.op("aten::cos", a["self"]))}


@derivative("cos")
def _cos(d, a, g, out):
    return {"self": d.neg(d.mul(g, d.op("aten::sin", a["self"])))}


@derivative("tan")
def _tan(d, a, g, out):
    return {"self": d.mul(g, d.add(d.mul(out, out), 1.0))}


@derivative("asin", "acos")
def _asin(d, a, g, out):
    x = a["self"]
    r = d.mul(g, d.op("aten::rsqrt", d.rsub(d.mul(x, x), 1.0)))
    return {"self": r if d.row == "asin" else d.neg(r)}


@derivative("atan")
def _atan(d, a, g, out):
    x = a["self"]
    return {"self": d.div(g, d.add(d.mul(x, x), 1.0))}


@derivative("sinh")
def _sinh(d, a, g, out):
    return {"self": d.mul(g, d.op("aten::cosh", a["self"]))}


@derivative("cosh")
def _cosh(d, a, g, out):
    return {"self": d.mul(g, d.op("aten::sinh", a["self"]))}


@derivative("tanh")
def _tanh(d, a, g, out):
    return {"self": d.mul(g, d.rsub(d.mul(out, out), 1.0))}


@derivative("sigmoid")
def _sigmoid(d, a, g, out):
    return {"self": d.mul(g, d.mul(out, d.rsub(out, 1.0)))}


@derivative("erf", "erfc")
def _erf(d, a, g, out):
    x = a["self"]
    r = d.mul(d.mul(g, d.op("aten::exp", d.neg(d.mul(x, x)))), 2.0 / math.sqrt(math.pi))
    return {"self": r if d.row == "erf" else d.neg(r)}


@derivative("atan2")
def _atan2(d, a, g, out):
    x, y = a["self"], a["other"]
    q = d.div(g, d.add(d.mul(x, x), d.mul(y, y)))
    return {"self": d.mul(q, y), "other": d.neg(d.mul(q, x))}


@derivative("relu")
def _relu(d, a, g, out):
    return {"self": d.where(d.op("aten::gt", out, 0.0), g, 0.0)}


@derivative("leaky_relu")
def _leaky_relu(d, a, g, out):
    return {"self": d.where(d.op("aten::gt", a["self"], 0.0), g, d.mul(g, a.get("negative_slope", 0.01)))}


@derivative("hardtanh")
def _hardtanh(d, a, g, out):
    x = a["self"]
    inside = d.op("aten::logical_and", d.op("aten::gt", x, a.get("min_val", -1.0)),
                  d.op("aten::lt", x, a.get("max_val", 1.0)))
    return {"self": d.where(inside, g, 0.0)}


@derivative("gelu")
def _gelu(d, a, g, out):
    x = a["self"]
    if a.get("approximate", "none") == "tanh":
        beta, kappa = math.sqrt(2.0 / math.pi), 0.044715
        x2 = d.mul(x, x)
        inner = d.mul(d.add(x, d.mul(d.mul(x2, x), kappa)), beta)
        t = d.op("aten::tanh", inner)
        left = d.mul(d.add(t, 1.0), 0.5)
        right = d.mul(d.mul(d.mul(x, 0.5), d.rsub(d.mul(t, t), 1.0)),
                      d.mul(d.add(d.mul(x2, 3.0 * kappa), 1.0), beta))
        return {"self": d.mul(g, d.add(left, right))}
    cdf = d.mul(d.add(d.op("aten::erf", d.mul(x, 1.0 / math.sqrt(2.0))), 1.0), 0.5)
    pdf = d.mul(d.op("aten::exp", d.mul(d.mul(x, x), -0.5)), 1.0 / math.sqrt(2.0 * math.pi))
    return {"self": d.mul(g, d.add(cdf, d.mul(x, pdf)))}


@derivative("silu")
def _silu(d, a, g, out):
    x = a["self"]
    s = d.op("aten::sigmoid", x)
    return {"self": d.mul(d.mul(g, s), d.add(d.mul(x, d.rsub(s, 1.0)), 1.0))}


@derivative("softplus")
def _softplus(d, a, g, out):
    x, beta, thr = a["self"], a.get("beta", 1), a.get("threshold", 20)
    bx = d.mul(x, beta)
    z = d.op("aten::exp", bx)
    return {"self": d.where(d.op("aten::gt", bx, thr), g, d.div(d.mul(g, z), d.add(z, 1.0)))}


@derivative("pow")
def _pow(d, a, g, out):
    x, e = a["self"], a["exponent"]
    grads = {}
    if d.is_value(x):
        if d.is_value(e):
            gx = d.mul(d.mul(g, e), d.op("aten::pow", x, d.sub(e, 1.0)))
            grads["self"] = d.where(d.op("aten::eq", e, 0.0), 0.0, gx)
        elif e == 0:
            grads["self"] = ZERO
        else:
            grads["self"] = d.mul(d.mul(g, e), d.op("aten::pow", x, e - 1))
    if d.is_value(e):
        ge = d.mul(d.mul(g, out), d.op("aten::log", x) if d.is_value(x) else math.log(x) if x > 0 else float("nan"))
        if d.is_value(x):
            cond = d.op("aten::logical_and", d.op("aten::eq", x, 0.0), d.op("aten::ge", e, 0.0))
            ge = d.where(cond, 0.0, ge)
        elif x == 0:
            ge = d.where(d.op("aten::ge", e, 0.0), 0.0, ge)
        grads["exponent"] = ge
    return grads


def _max_min(first_masked: str, second_masked: str):
    def formula(d, a, g, out):
        x, y = a["self"], a["other"]
        h = d.where(d.op("aten::eq", x, y), d.mul(g, 0.5), g)
        return {"self": d.where(d.op(first_masked, x, y), 0.0, h),
                "other": d.where(d.op(second_masked, x, y), 0.0, h)}
    return formula


DERIVATIVES["maximum"] = _max_min("aten::lt", "aten::gt")
DERIVATIVES["minimum"] = _max_min("aten::gt", "aten::lt")


def _clamp_mask(d, x, lo, hi):
    mask = None
    for bound, cmp in ((lo, "aten::ge"), (hi, "aten::le")):
        if bound is None:
            continue
        m = d.op(cmp, x, bound)
        mask = m if mask is None else d.op("aten::logical_and", mask, m)
    return mask


@derivative("clamp")
def _clamp(d, a, g, out):
    mask = _clamp_mask(d, a["self"], a.get("min"), a.get("max"))
    return {"self": g if mask is None else d.where(mask, g, 0.0)}


@derivative("clamp_min")
def _clamp_min(d, a, g, out):
    return {"self": d.where(_clamp_mask(d, a["self"], a["min"], None), g, 0.0)}


@derivative("clamp_max")
def _clamp_max(d, a, g, out):
    return {"self": d.where(_clamp_mask(d, a["self"], None, a["max"]), g, 0.0)}


@derivative("where")
def _where(d, a, g, out):
    c = a["condition"]
    return {"self": d.where(c, g, 0.0), "other": d.where(c, 0.0, g)}


@derivative("threshold")
def _threshold(d, a, g, out):
    return {"self": d.where(d.op("aten::gt", a["self"], a["threshold"]), g, 0.0)}


@derivative("lerp")
def _lerp(d, a, g, out):
    x, end, w = a["self"], a["end"], a["weight"]
    grads = {"self": d.mul(g, d.rsub(w, 1.0) if d.is_value(w) else 1.0 - w), "end": d.mul(g, w)}
    if d.is_value(w):
        grads["weight"] = d.mul(g, d.sub(end, x))
    return grads


@derivative("addcmul")
def _addcmul(d, a, g, out):
    v = a.get("value", 1)
    return {"self": g, "tensor1": _scaled(d, d.mul(g, a["tensor2"]), v),
            "tensor2": _scaled(d, d.mul(g, a["tensor1"]), v)}


@derivative("addcdiv")
def _addcdiv(d, a, g, out):
    v = a.get("value", 1)
    q = _scaled(d, d.div(g, a["tensor2"]), v)
    return {"self": g, "tensor1": q, "tensor2": d.neg(d.mul(q, d.div(a["tensor1"], a["tensor2"])))}


@derivative("nan_to_num")
def _nan_to_num(d, a, g, out):
    return {"self": d.where(d.op("aten::isfinite", a["self"]), g, 0.0)}


@derivative("to", "autocast_to_full_precision", "autocast_to_reduced_precision")
def _to(d, a, g, out):
    x = a["self"]
    return {"self": d.op("aten::type_as", g, x) if d.is_value(x) else g}   # grad cast back to the input dtype


@derivative("dropout")
def _dropout(d, a, g, out):
    if a.get("train") and a.get("p", 0.5) != 0:
        return {}
    return {"input": g}        # identity: eval mode, or p = 0 in training (timm's default drop rates)


# -- reductions and normalizations --------------------------------------------------------------
# A reduction's gradient comes back in the reduced shape with size-1 dims (``restore_dims``) and
# is broadcast to the input's shape by a fusible ``where(x == x, g, g)`` so that it fuses with
# what consumes it.


def _reduced(d, a, g):
    x = a["self"]
    return x, d.restore_dims(g, a.get("dim"), bool(a.get("keepdim")), d.rank(x))


@derivative("sum")
def _sum(d, a, g, out):
    x, gu = _reduced(d, a, g)
    return {"self": d.expand_like(gu, x)}


@derivative("mean")
def _mean(d, a, g, out):
    x, gu = _reduced(d, a, g)
    n_out = d.op("aten::numel", out, out=_INT)
    n_in = d.op("aten::numel", x, out=_INT)
    return {"self": d.expand_like(d.div(d.mul(gu, n_out), n_in), x)}


@derivative("amax", "amin")
def _amax(d, a, g, out):
    x, gu = _reduced(d, a, g)
    ou = d.restore_dims(out, a.get("dim"), bool(a.get("keepdim")), d.rank(x))
    mask = d.op("aten::eq", x, ou)
    count = d.op("aten::sum", mask, a.get("dim") if a.get("dim") not in (None, []) else None, True)
    return {"self": d.where(mask, d.div(gu, count), 0.0)}


@derivative("sum_to_size")
def _sum_to_size(d, a, g, out):
    return {"self": d.expand_like(g, a["self"])}


@derivative("softmax", "_softmax")
def _softmax(d, a, g, out):
    s = d.op("aten::sum", d.mul(g, out), [a["dim"]], True)
    return {"self": d.mul(out, d.sub(g, s))}


@derivative("log_softmax", "_log_softmax")
def _log_softmax(d, a, g, out):
    s = d.op("aten::sum", g, [a["dim"]], True)
    return {"self": d.sub(g, d.mul(d.op("aten::exp", out), s))}


def _int_type():
    from ..ir.types import Type

    return Type("int")


_INT = _int_type()


# -- moments, prod and the normalizations ---------------------------------------------------------
# The statistics are recomputed in the backward graph as ``aten::mean`` / ``aten::var`` with
# keepdim over the forward's reduced dims, so the partition puts them in one reduction group with
# the two sums each normalization backward needs (``sum(g')``, ``sum(g' * xhat)``), followed by the
# pointwise ``dx``. A parameter broadcast along the channel dim (batch / instance / group norm)
# gets its gradient summed to its own shape here (``EXACT``); one broadcast by right alignment
# (layer_norm, rms_norm) comes back in the output's shape and the builder sums it.


class Exact:
    """A gradient already in its input's shape: the builder adds no ``sum_to_size``."""

    def __init__(self, value: Any) -> None:
        self.value = value


def _dims_of(dims: Any, rank: int) -> list[int]:
    """A reduction's ``dim`` argument as a sorted list of non-negative dims (None / [] is all)."""
    if dims is None or dims == []:
        return list(range(rank))
    dims = [dims] if isinstance(dims, int) else list(dims)
    return sorted(x % max(rank, 1) for x in dims)


def _correction(a: dict) -> float:
    if a.get("correction") is not None:
        return float(a["correction"])
    unbiased = a.get("unbiased")
    return 1.0 if unbiased is None or unbiased else 0.0


def _var_grad(d, a, g, x) -> Any:
    """eager's ``var_backward``: ``g * 2 (x - mean) / (N - correction)``, N the reduced count."""
    dims = _dims_of(a.get("dim"), d.rank(x))
    gu = d.restore_dims(g, dims, bool(a.get("keepdim")), d.rank(x))
    mean = d.op("aten::mean", x, dims, True)
    # N, the reduced count, as a sum of ones over the same dims: it joins the reduction of the
    # mean (a numel of x would be a shape read of a fused intermediate, outside the group)
    n = d.op("aten::sum", d.expand_like(1.0, x), dims, True)
    return d.div(d.mul(d.sub(x, mean), d.mul(gu, 2.0)), d.sub(n, _correction(a)))


def _std_to_var(d, g, std):
    """eager's ``std_backward``: ``g / (2 std)``, 0 where std is 0."""
    return d.where(d.op("aten::eq", std, 0.0), 0.0, d.div(g, d.mul(std, 2.0)))


def _mean_grad(d, a, g, x) -> Any:
    dims = _dims_of(a.get("dim"), d.rank(x))
    gu = d.restore_dims(g, dims, bool(a.get("keepdim")), d.rank(x))
    n_in = d.op("aten::numel", x, out=_INT)
    n_out = d.op("aten::numel", g, out=_INT)
    return d.expand_like(d.div(d.mul(gu, n_out), n_in), x)


@derivative("var")
def _var_row(d, a, g, out):
    return {"self": _var_grad(d, a, g, a["self"])}


@derivative("std")
def _std_row(d, a, g, out):
    return {"self": _var_grad(d, a, _std_to_var(d, g, out), a["self"])}


def _pair(first_to_var):
    """var_mean / std_mean: (first, mean) outputs, either gradient may be missing."""
    def formula(d, a, gs, outs):
        x = a["self"]
        parts = []
        if gs[0] is not None:
            gv = _std_to_var(d, gs[0], outs[0]) if first_to_var else gs[0]
            parts.append(_var_grad(d, a, gv, x))
        if gs[1] is not None:
            parts.append(_mean_grad(d, a, gs[1], x))
        r = parts[0]
        for p in parts[1:]:
            r = d.add(r, p)
        return {"self": r}
    formula.multi_output = True
    return formula


DERIVATIVES["var_mean"] = _pair(False)
DERIVATIVES["std_mean"] = _pair(True)


@derivative("prod")
def _prod(d, a, g, out):
    """eager's ``prod_backward``: ``g * prod / x`` where x != 0; at a zero, the product of the
    others when it is the only zero of its slice, else 0."""
    x = a["self"]
    dims = _dims_of(a.get("dim"), d.rank(x))
    keep = bool(a.get("keepdim"))
    gu = d.restore_dims(g, dims, keep, d.rank(x))
    ou = d.restore_dims(out, dims, keep, d.rank(x))
    zero = d.op("aten::eq", x, 0.0)
    count = d.op("aten::sum", zero, dims, True)
    others = _prod_dims(d, d.where(zero, 1.0, x), dims)
    at_zero = d.where(d.op("aten::eq", count, 1), d.mul(gu, others), 0.0)
    return {"self": d.where(zero, at_zero, d.div(d.mul(gu, ou), x))}


def _prod_dims(d, x, dims: list[int]):
    """prod over several dims (``aten::prod`` takes one dim): one dim after another, keepdim."""
    for dim in dims:
        x = d.op("aten::prod", x, dim, True)
    return x


def _channel(d, v, rank: int):
    """A per-channel [C] tensor viewed as [C, 1, ...] to broadcast along dim 1 of a rank-``rank`` input."""
    for _ in range(rank - 2):
        v = d.op("aten::unsqueeze", v, -1)
    return v


def _normalized_grad(d, g, x, w, dims: list[int], mean, rstd):
    """dx of ``(x - mean) * rstd * w`` with mean and rstd the statistics of x over ``dims``:
    ``rstd * (gw - mean(gw) - xhat * mean(gw * xhat))``; also returns xhat."""
    xhat = d.mul(d.sub(x, mean), rstd)
    gw = g if w is None else d.mul(g, w)
    m1 = d.op("aten::mean", gw, dims, True)
    m2 = d.op("aten::mean", d.mul(gw, xhat), dims, True)
    return d.mul(rstd, d.sub(d.sub(gw, m1), d.mul(xhat, m2))), xhat


def _stats(d, x, dims: list[int], eps: float):
    mean = d.op("aten::mean", x, dims, True)
    var = d.op("aten::var", x, dims, False, True)
    return mean, d.op("aten::rsqrt", d.add(var, eps))


def _tensor(d, a: dict, name: str):
    """Argument ``name`` when it is a tensor (weight / bias may be None)."""
    v = a.get(name)
    return v if d.is_value(v) else None


@derivative("layer_norm")
def _layer_norm(d, a, g, out):
    x = a["input"]
    rank = d.rank(x)
    k = _norm_len_of(a["normalized_shape"])
    dims = list(range(rank - k, rank))
    mean, rstd = _stats(d, x, dims, a["eps"])
    w = _tensor(d, a, "weight")
    dx, xhat = _normalized_grad(d, g, x, w, dims, mean, rstd)
    return {"input": dx, "weight": d.mul(g, xhat), "bias": g}


def _native_layer_norm(d, a, gs, outs):
    if gs[1] is not None or gs[2] is not None:
        return {}     # gradients through mean / rstd: left to eager (the partition log says so)
    return _layer_norm(d, a, gs[0], outs[0])


_native_layer_norm.multi_output = True
DERIVATIVES["native_layer_norm"] = _native_layer_norm


def _norm_len_of(ns: Any) -> int:
    from .reduction import list_items

    items = list_items(ns)
    assert items is not None, "normalized_shape of unknown length"
    return len(items)


@derivative("rms_norm")
def _rms_norm(d, a, g, out):
    """y = x * r * w, r = rsqrt(mean(x^2) + eps): dx = r * (gw - x * r^2 * mean(gw * x))."""
    x = a["input"]
    rank = d.rank(x)
    dims = list(range(rank - _norm_len_of(a["normalized_shape"]), rank))
    eps = a.get("eps")
    if eps is None:
        eps = float(torch.finfo(d.ftypes[x].dtype).eps)
    r = d.op("aten::rsqrt", d.add(d.op("aten::mean", d.mul(x, x), dims, True), eps))
    w = _tensor(d, a, "weight")
    gw = g if w is None else d.mul(g, w)
    m = d.op("aten::mean", d.mul(gw, x), dims, True)
    dx = d.mul(r, d.sub(gw, d.mul(d.mul(x, d.mul(r, r)), m)))
    return {"input": dx, "weight": d.mul(g, d.mul(x, r))}


def _channel_norm_grads(d, a, g, dims: list[int], mean, rstd) -> dict:
    """Gradients of a per-channel affine normalization (batch / instance / group norm) of
    ``input`` with statistics over ``dims``; weight and bias are [C] along dim 1."""
    x = a["input"]
    rank = d.rank(x)
    w = _tensor(d, a, "weight")
    wc = None if w is None else _channel(d, w, rank)
    dx, xhat = _normalized_grad(d, g, x, wc, dims, mean, rstd)
    param_dims = [0] + list(range(2, rank))
    return {"input": dx,
            "weight": Exact(d.op("aten::sum", d.mul(g, xhat), param_dims, False)),
            "bias": Exact(d.op("aten::sum", g, param_dims, False))}


def _running_stats_grads(d, a, g) -> dict:
    """Normalization by given statistics: ``(x - rm) * rsqrt(rv + eps) * w + b`` (batch norm in
    inference, instance norm without input stats)."""
    x = a["input"]
    rank = d.rank(x)
    param_dims = [0] + list(range(2, rank))
    rm, rv = _channel(d, a["running_mean"], rank), _channel(d, a["running_var"], rank)
    rstd = d.op("aten::rsqrt", d.add(rv, a["eps"]))
    w = _tensor(d, a, "weight")
    gw = g if w is None else d.mul(g, _channel(d, w, rank))
    xc = d.sub(x, rm)
    return {"input": d.mul(gw, rstd),
            "weight": Exact(d.op("aten::sum", d.mul(g, d.mul(xc, rstd)), param_dims, False)),
            "bias": Exact(d.op("aten::sum", g, param_dims, False)),
            "running_mean": Exact(d.neg(d.op("aten::sum", d.mul(gw, rstd), param_dims, False))),
            "running_var": Exact(d.op("aten::sum", d.mul(d.mul(gw, xc), d.mul(d.op("aten::pow", rstd, 3), -0.5)),
                                      param_dims, False))}


@derivative("batch_norm")
def _batch_norm(d, a, g, out):
    if not a.get("training"):
        return _running_stats_grads(d, a, g)
    rank = d.rank(a["input"])
    dims = [0] + list(range(2, rank))
    mean, rstd = _stats(d, a["input"], dims, a["eps"])
    return _channel_norm_grads(d, a, g, dims, mean, rstd)


@derivative("instance_norm")
def _instance_norm(d, a, g, out):
    if not a.get("use_input_stats"):
        return _running_stats_grads(d, a, g)
    dims = list(range(2, d.rank(a["input"])))
    mean, rstd = _stats(d, a["input"], dims, a["eps"])
    return _channel_norm_grads(d, a, g, dims, mean, rstd)


@derivative("group_norm")
def _group_norm(d, a, g, out):
    """num_groups == 1 (the only group count the partition fuses): statistics over every dim but N."""
    dims = list(range(1, d.rank(a["input"])))
    mean, rstd = _stats(d, a["input"], dims, a["eps"])
    return _channel_norm_grads(d, a, g, dims, mean, rstd)


# -- random rows (ops/random.py) -----------------------------------------------------------------
# dropout's backward is dropout of the gradient with the forward's (seed, offset): the backward
# graph regenerates the keep mask inside its own kernel; no mask is stored.
@derivative("philox_dropout")
def _philox_dropout(d, a, g, out):
    return {"input": d.op("graphfuser::dropout", g, a["p"], a["seed"], a["offset"])}


@derivative("philox_rand_like", "philox_bernoulli", "philox_bernoulli_p")
def _philox_sample(d, a, g, out):
    return {"self": ZERO}      # samples do not depend on the input's values (eager: zero gradient)
