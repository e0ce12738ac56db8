"""Derivative formulas of the reduction, moment, product and normalization rows: the part of the op
table's derivative column (``graphfuser.ops.derivatives``) whose backward graphs recompute
statistics (mean, var) and sum over the reduced dims. Registered when ``derivatives`` loads."""
from __future__ import annotations

import math
from typing import Any, Callable

import torch

from ..ir.types import Type
from .derivatives import DERIVATIVES, REBUILDS, ZERO, _REDUCED, Exact, _dtype, derivative, opmath


# -- reductions --------------------------------------------------------------------------------
# A reduction's gradient comes back in the reduced shape with size-1 dims (``restore_dims``) and
# is broadcast to the input's shape by a fusible ``where(x == x, g, g)`` so that it fuses with
# what consumes it.


def reduced_count(d, x, dim) -> Any:
    """The number of elements a reduction of ``x`` over ``dim`` combines, as a keepdim sum of
    ones over the same dims: it joins the group of the reduction it scales. (A ``numel`` of a
    fused intermediate would be a shape read outside the group, which keeps the group from
    taking what follows: RMSNorm's backward split in three.)"""
    return d.op("aten::sum", d.expand_like(1.0, x), dim if dim not in (None, []) else None, True)


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
    return {"self": d.expand_like(d.div(gu, reduced_count(d, x, a.get("dim"))), x)}


@derivative("amax", "amin")
def _amax(d, a, g, out):
    x, gu = _reduced(d, a, g)
    ou = d.restore_dims(out, a.get("dim"), bool(a.get("keepdim")), d.rank(x))
    mask = d.op("aten::eq", x, ou)
    count = d.op("aten::sum", mask, a.get("dim") if a.get("dim") not in (None, []) else None, True)
    # eager's (grad / count) * mask: a NaN row (no element equals its NaN max, count 0) is NaN
    return {"self": d.mul(d.div(gu, count), mask)}


@derivative("sum_to_size")
def _sum_to_size(d, a, g, out):
    return {"self": d.expand_like(g, a["self"])}



# -- moments, prod and the normalizations ---------------------------------------------------------
# The statistics are recomputed in the backward graph as ``aten::mean`` / ``aten::var`` with
# keepdim over the forward's reduced dims, so the partition puts them in one reduction group with
# the two sums each normalization backward needs (``sum(g')``, ``sum(g' * xhat)``), followed by the
# pointwise ``dx``. A parameter broadcast along the channel dim (batch / instance / group norm)
# gets its gradient summed to its own shape here (``EXACT``); one broadcast by right alignment
# (layer_norm, rms_norm) comes back in the output's shape and the builder sums it.


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
    n = reduced_count(d, x, dims)
    dof = d.sub(n, _correction(a))
    # the scale first, as eager's (2 / dof) * grad: (x - mean) * 2 * grad before the division
    # overflows for data near float32's largest (fuzz graph 82 of CPU seed 33293: inf where
    # eager's and the float64 gradient are 2.4e38), and so does 2 * grad for an fp16 grad past
    # 32752 (fuzz graph 139 of CPU seed 33433: inf * 0 = NaN where eager's gradient is 0): the
    # division first, in the gradient's own precision (a float32 2 / dof would round a float64
    # gradient), then the exact doubling
    r = d.mul(_centered(d, x, mean, dims), d.mul(d.div(gu, dof), 2.0))
    if a.get("dim") is None or d.rank(x) == 0:
        # a full reduction with dof <= 0: eager's grad * (NaN where x is the mean, else inf). Where
        # x - mean is 0, not only where x == mean: a comparison reads x rounded to its dtype, the
        # mean of fp32 intermediates is not (fuzz graph 6582 of seed 9595: the bf16 variance of
        # one element under autocast gave inf where eager's is NaN); and where x == mean, as an
        # infinite x and its mean are (inf - inf is NaN, not 0: fuzz graph 4870 of CPU seed 11616)
        at_mean = d.op("aten::logical_or", d.op("aten::eq", d.sub(x, mean), 0.0), d.op("aten::eq", x, mean))
        edge = d.mul(gu, d.where(at_mean, math.nan, math.inf))
        r = d.where(d.op("aten::le", dof, 0.0), edge, r)
    return r


def _centered(d, x, mean, dims: list[int]):
    """``x - mean`` with the digits of the spread: a mean rounded to the data's magnitude (a sum
    of 33 values near 1e4 in fp32 is off by 1e-3, a tenth of a 1e-2 spread: fuzz graph 519 of
    seed 7373) is corrected by the mean of the deviations (a second pass over the same dims).
    Where that mean is not finite (inf or NaN data) the deviations stay eager's ``x - mean``."""
    dev = d.sub(x, mean)
    off = d.op("aten::mean", dev, dims, True)
    return d.where(d.op("aten::isfinite", off), d.sub(dev, off), dev)


def _std_to_var(d, g, std):
    """eager's ``std_backward``: ``g / (2 std)``, 0 where std is 0."""
    return d.where(d.op("aten::eq", std, 0.0), 0.0, d.div(g, d.mul(std, 2.0)))


def _mean_grad(d, a, g, x) -> Any:
    dims = _dims_of(a.get("dim"), d.rank(x))
    gu = d.restore_dims(g, dims, bool(a.get("keepdim")), d.rank(x))
    return d.expand_like(d.div(gu, reduced_count(d, x, dims)), x)


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
    """eager's ``prod_backward`` (``FunctionsManual.cpp``), path for path, on ``self`` cast to the
    gradient's dtype as eager does (``prod(x, dtype=...)``):

    - no zero anywhere in the input: ``g * (prod / x)`` (fused);
    - a zero somewhere: ``g`` times the product of the others, as exclusive prefix and suffix
      products along the reduced dim (``cumprod``, run by eager's kernels) -- in every slice,
      whether or not it holds the zero, so a NaN or inf among the others propagates as in eager
      (a row [0, NaN, a] gets NaN * a, 0 * a, 0 * NaN);
    - a full reduction over a flattened input, where two or more zeros make every gradient 0
      (eager's shortcut outside grad mode, which a backward runs in).

    The choice is made on the whole input, as eager makes it: a zero in one slice sends every
    slice through the exclusive products."""
    if d.rank(a["self"]) == 0:
        return {"self": g}
    # x as eager saved it (a recomputed fp16 / bf16 value rounded: an exp that overflows fp16 is
    # inf there, and inf / inf is eager's NaN; fuzz graph 2871 of seed 6161)
    x = d.stored(a["self"])
    if _dtype(d, out) is not None and _dtype(d, out) != _dtype(d, a["self"]):
        x = d.to(x, _dtype(d, out))
    full = a.get("dim") is None
    rank = d.rank(a["self"])
    dims = _dims_of(a.get("dim"), rank)
    keep = bool(a.get("keepdim"))
    gu = g if full else d.restore_dims(g, dims, keep, rank)
    ou = out if full else d.restore_dims(out, dims, keep, rank)
    zeros = d.op("aten::sum", d.op("aten::eq", x, 0.0))
    has_zero = d.op("aten::Bool", d.op("aten::gt", zeros, 0), out=Type("bool"))

    def exclusive():
        if not full:
            return d.mul(gu, _exclusive_products(d, x, dims[0]))
        flat = d.op("aten::reshape", x, [-1])
        r = d.op("aten::view_as", d.mul(gu, _exclusive_products(d, flat, 0)), x)
        return d.where(d.op("aten::gt", zeros, 1), 0.0, r)

    return {"self": d.branch(has_zero, exclusive, lambda: d.mul(gu, d.div(ou, x)))}


def _exclusive_products(d, x, dim: int):
    """The product of the other elements of each slice of ``x`` along ``dim``: exclusive prefix
    products times exclusive suffix products (eager's ``prod_safe_zeros_backward``), exact with
    zeros, NaN and inf. A dim of size 0 or 1 gives an empty tensor or ones."""
    ones = d.op("aten::ones_like", d.op("aten::slice", x, dim, 0, 1, 1))
    head = d.op("aten::slice", x, dim, 0, -1, 1)
    tail = d.op("aten::flip", d.op("aten::slice", x, dim, 1, None, 1), [dim])
    prefix = d.op("aten::cumprod", _cat(d, ones, head, dim), dim)
    suffix = d.op("aten::flip", d.op("aten::cumprod", _cat(d, ones, tail, dim), dim), [dim])
    return d.mul(prefix, suffix)


def _cat(d, a, b, dim: int):
    return d.op("aten::cat", d.op("prim::ListConstruct", a, b, out=Type("Tensor[]")), dim)




def _channel(d, v, rank: int):
    """A per-channel [C] tensor viewed as [C, 1, ...] to broadcast along dim 1 of a rank-``rank`` input:
    one ``view`` (one host call per backward; ``unsqueeze`` took one per spatial dim)."""
    return d.op("aten::view", v, [-1] + [1] * (rank - 2)) if rank > 2 else v


def _normalized_dx(d, rstd, gw, xhat, m1, m2):
    """``rstd * (gw - m1 - xhat * m2)``, the dx of a normalization (``m1 = mean(gw)``, ``m2 =
    mean(gw * xhat)``), with the mean added to the per-element term before the subtraction:
    ``rstd * (gw - (xhat * m2 + m1))``.

    ``(gw - m1) - xhat * m2`` (and eager's ``(g - mean(g)) - ...``) subtracts the small ``m1`` from
    the rounded ``gw``: the difference is rounded on ``gw``'s grid, so every element of a binade
    moves by the same rounding of ``m1``, a bias of the whole row or channel rather than noise.
    Whatever sums dx over many elements of one channel adds the bias up linearly: in a MobileNetV3
    block (``tests/autodiff/test_grad_accuracy.py``) the squeeze-excite's pooled gradient sums the
    projection batch norm's dx over H * W, and its fc and depthwise-BN-bias gradients were 0.9-1.1x
    eager's distance from float64 in rms over 24 steps, 2.5-3.3x at their worst steps.
    ``xhat * m2 + m1`` varies from element to element, so the final rounding is unbiased: the
    per-channel mean of dx's error fell from 6.6e-7 (eager's 7.5e-7) to 2.9e-7, and those
    gradients to 0.62-0.77x eager's distance in rms (2.0x at their worst steps), with or without
    contracted multiply-adds. The same operations, associated differently."""
    return d.mul(rstd, d.sub(gw, d.add(d.mul(xhat, m2), m1)))


def _normalized_grad(d, g, x, w, dims: list[int], mean, rstd):
    """dx of ``(x - mean) * rstd * w`` with mean and rstd the statistics of x over ``dims``:
    ``rstd * (gw - mean(gw) - xhat * mean(gw * xhat))``; also returns xhat. The deviations are
    re-centred as var's are (``_centered``): a float32 mean of rows near 1e4 with a 1e-2 spread is
    off by a tenth of the spread (fuzz graph 2713 of seed 9292, an instance norm's gradient 27%
    off where eager's was 3%)."""
    # rstd 0: finite data whose variance overflows (0.5 then 3e38 twice in a float32 row). The
    # forward gives such a row its bias (xhat 0, ops/norms.py ``_normalize_parts``), eager's
    # value; the backward's own mean may overflow there (inf, and (x - inf) * 0 is NaN), so xhat
    # is 0 as the forward's, and the row's dx 0, as eager's (fuzz graph 469 of CPU seed 34716)
    xhat = d.where(d.op("aten::eq", rstd, 0.0), 0.0, d.mul(_centered(d, x, mean, dims), rstd))
    gw = g if w is None else d.mul(g, w)
    m1 = d.op("aten::mean", gw, dims, True)
    m2 = d.op("aten::mean", d.mul(gw, xhat), dims, True)
    return _normalized_dx(d, rstd, gw, xhat, m1, m2), xhat


def _stats(d, x, dims: list[int], eps: float):
    mean = d.op("aten::mean", x, dims, True)
    var = d.op("aten::var", x, dims, False, True)
    return mean, d.op("aten::rsqrt", d.add(var, eps))


def _tensor(d, a: dict, name: str):
    """Argument ``name`` when it is a tensor (weight / bias may be None)."""
    v = a.get(name)
    return v if d.is_value(v) else None


@derivative("layer_norm")
@opmath
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
    """(y, mean, rstd): only y is differentiable, as in eager (``output_differentiability``:
    mean and rstd do not require grad, so nothing flows back through them)."""
    return _layer_norm(d, a, gs[0], outs[0])


_native_layer_norm.multi_output = True
_native_layer_norm.differentiable_outputs = (0,)
DERIVATIVES["native_layer_norm"] = _native_layer_norm


def _rebuild_from_statistics(d, a, outs, xt, yt, param):
    """y of a statistics row (``graphfuser::layer_norm_train`` / ``batch_norm_train``) from its
    saved statistics, as the forward kernel computed it: ``((x - shift) - offset) * rstd * w + b``
    in the statistics' dtype; ``param(v)``: a weight or bias shaped to broadcast."""
    _, shift, offset, rstd = outs
    x = a["input"]
    if xt.dtype in _REDUCED:
        x = d.to(x, torch.float32)
    y = d.mul(d.sub(d.sub(x, shift), offset), rstd)
    for name, fn in (("weight", d.mul), ("bias", d.add)):
        if _tensor(d, a, name) is not None:
            y = fn(y, param(a[name]))
    return d.to(y, yt.dtype) if yt.dtype in _REDUCED else y


def _rebuild_layer_norm_train(d, a, outs, xt, yt):
    return _rebuild_from_statistics(d, a, outs, xt, yt, lambda v: v)


@opmath
def _layer_norm_train_grads(d, a, g, outs):
    """The layer-norm gradients of ``_layer_norm`` from the saved statistics: the deviations
    ``(x - shift) - offset`` are the forward's, so one pass over the row takes both means dx
    needs. A row whose rstd is 0 (finite data whose variance overflowed) has xhat 0, as the
    forward's output there is its bias."""
    x = a["input"]
    rank = d.rank(x)
    dims = list(range(rank - _norm_len_of(a["normalized_shape"]), rank))
    _, shift, offset, rstd = outs
    xhat = d.where(d.op("aten::eq", rstd, 0.0), 0.0, d.mul(d.sub(d.sub(x, shift), offset), rstd))
    w = _tensor(d, a, "weight")
    gw = g if w is None else d.mul(g, w)
    m1 = d.op("aten::mean", gw, dims, True)
    m2 = d.op("aten::mean", d.mul(gw, xhat), dims, True)
    return {"input": _normalized_dx(d, rstd, gw, xhat, m1, m2), "weight": d.mul(g, xhat), "bias": g}


def statistics_row(name: str, grads, rebuild) -> None:
    """Register the derivative and the rebuild of a normalization row that also returns its
    statistics, ``(y, shift, offset, rstd)``: only y is differentiable; the statistics are the
    forward's, which ``grads(d, a, g, outs)`` reads."""
    def derivative_of(d, a, gs, outs):
        return grads(d, a, gs[0], outs)
    derivative_of.multi_output = True
    derivative_of.differentiable_outputs = (0,)
    DERIVATIVES[name] = derivative_of
    REBUILDS[name] = rebuild


statistics_row("layer_norm_train", _layer_norm_train_grads, _rebuild_layer_norm_train)


def _norm_len_of(ns: Any) -> int:
    from .reduction import list_items

    items = list_items(ns)
    assert items is not None, "normalized_shape of unknown length"
    return len(items)


@derivative("rms_norm")
@opmath
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
    param_dims = [0] + list(range(2, rank))
    if dims == param_dims:
        return _batch_norm_grads(d, g, x, wc, dims, mean, rstd)
    dx, xhat = _normalized_grad(d, g, x, wc, dims, mean, rstd)
    return {"input": dx,
            "weight": Exact(d.op("aten::sum", d.mul(g, xhat), param_dims, False)),
            "bias": Exact(d.op("aten::sum", g, param_dims, False))}


def _batch_norm_grads(d, g, x, w, dims: list[int], mean, rstd) -> dict:
    """``_normalized_grad`` and the parameter gradients where the statistics' dims are the
    parameters' (batch norm), with ``mean(gw * xhat)`` expanded: ``xhat = (dev - off) * rstd``
    (``off`` the mean of the deviations, 0 where not finite, as in ``_centered``), so it is
    ``rstd * (mean(gw * dev) - off * mean(gw))``. Every mean dx needs then takes only the
    statistics, not ``off``: the backward kernel reads x and the gradient once for all of them
    and once more for dx and the weight's sum (3 passes over x, not 4; a channel's column is
    N * H * W elements, past any cache)."""
    dev = d.sub(x, mean)
    off = d.op("aten::mean", dev, dims, True)
    off = d.where(d.op("aten::isfinite", off), off, 0.0)
    xhat = d.mul(d.sub(dev, off), rstd)
    gw = g if w is None else d.mul(g, w)
    m1 = d.op("aten::mean", gw, dims, True)
    m2 = d.mul(rstd, d.sub(d.op("aten::mean", d.mul(gw, dev), dims, True), d.mul(off, m1)))
    dx = _normalized_dx(d, rstd, gw, xhat, m1, m2)
    return {"input": dx,
            "weight": Exact(d.op("aten::sum", d.mul(g, xhat), dims, False)),
            "bias": Exact(d.op("aten::sum", g, dims, False))}


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
    # an input with no elements has a zero weight gradient, as eager's kernels return it, whatever
    # the statistics (a running var below -eps makes invstd NaN, and the empty sum times it NaN:
    # fuzz graph 618 of CPU seed 36577): the count of the sum, a sum of ones that joins it
    count = d.op("aten::sum", d.expand_like(1.0, x), param_dims, False)
    invstd = d.where(d.op("aten::gt", count, 0.0), d.op("aten::rsqrt", d.add(a["running_var"], a["eps"])), 0.0)
    return {"input": d.mul(gw, rstd),
            # sum(g * (x - rm)) * invstd, as eager's kernels (the sum first: near float's max,
            # per-element products past it would meet as inf - inf)
            "weight": Exact(d.mul(d.op("aten::sum", d.mul(g, xc), param_dims, False), invstd)),
            "bias": Exact(d.op("aten::sum", g, param_dims, False)),
            "running_mean": Exact(d.neg(d.op("aten::sum", d.mul(gw, rstd), param_dims, False))),
            "running_var": Exact(d.op("aten::sum", d.mul(d.mul(gw, xc), d.mul(d.op("aten::pow", rstd, 3), -0.5)),
                                      param_dims, False))}


@derivative("batch_norm")
@opmath
def _batch_norm(d, a, g, out):
    if not a.get("training"):
        return _running_stats_grads(d, a, g)
    rank = d.rank(a["input"])
    dims = [0] + list(range(2, rank))
    mean, rstd = _stats(d, a["input"], dims, a["eps"])
    return _channel_norm_grads(d, a, g, dims, mean, rstd)


def _rebuild_batch_norm_train(d, a, outs, xt, yt):
    return _rebuild_from_statistics(d, a, outs, xt, yt, lambda v: _channel(d, v, xt.rank))


@opmath
def _batch_norm_train_grads(d, a, g, outs):
    """The batch-norm gradients of ``_batch_norm_grads`` from the saved statistics: the
    deviations ``(x - shift) - offset`` are the forward's (no re-centring mean), so one pass over
    x and the gradient takes every mean dx needs and the parameters' sums, a second writes dx."""
    x = a["input"]
    rank = d.rank(x)
    dims = [0] + list(range(2, rank))
    _, shift, offset, rstd = outs
    xhat = d.mul(d.sub(d.sub(x, shift), offset), rstd)
    w = _tensor(d, a, "weight")
    gw = g if w is None else d.mul(g, _channel(d, w, rank))
    m1 = d.op("aten::mean", gw, dims, True)
    m2 = d.op("aten::mean", d.mul(gw, xhat), dims, True)
    return {"input": _normalized_dx(d, rstd, gw, xhat, m1, m2),
            "weight": Exact(d.op("aten::sum", d.mul(g, xhat), dims, False)),
            "bias": Exact(d.op("aten::sum", g, dims, False))}


statistics_row("batch_norm_train", _batch_norm_train_grads, _rebuild_batch_norm_train)


@derivative("instance_norm")
@opmath
def _instance_norm(d, a, g, out):
    if not a.get("use_input_stats"):
        return _running_stats_grads(d, a, g)
    dims = list(range(2, d.rank(a["input"])))
    mean, rstd = _stats(d, a["input"], dims, a["eps"])
    return _channel_norm_grads(d, a, g, dims, mean, rstd)


@derivative("group_norm")
@opmath
def _group_norm(d, a, g, out):
    """num_groups == 1 (the only group count the partition fuses): statistics over every dim but N."""
    rank = d.rank(a["input"])
    dims = list(range(1, rank))
    mean, rstd = _stats(d, a["input"], dims, a["eps"])
    grads = _channel_norm_grads(d, a, g, dims, mean, rstd)
    ft = d.ftypes.get(a["input"])
    sizes = getattr(ft, "sizes", None) or ()
    if _tensor(d, a, "weight") is not None and sizes and sizes[0] != 0 and 0 in sizes[1:]:
        # eager's weight gradient is sum over n of rstd[n] * (per-sample sums): samples whose
        # group is empty (0 elements, NaN statistics) make it NaN where sum(g * xhat) is 0. The
        # term (0 unless some rstd is NaN) is a second reduction, so it is built only for a
        # group profiled with such samples (one profiled full and later called empty gives 0).
        nan_of_empty = d.mul(d.op("aten::sum", rstd, list(range(rank)), False), 0.0)
        grads["weight"] = Exact(d.add(grads["weight"].value, nan_of_empty))
    return grads


# Softmax's and log-softmax's backward: eager's kernels (``_softmax_backward_data``,
# ``_log_softmax_backward_data``) accumulate the row sum in float and round only dx; a sum of
# fp16 gradients rounded to fp16 overflows where the float sum does not (fuzz seed 33252, graph
# 1190: a row of -16168s summed to -inf, and dx = g - exp(y) * sum became NaN for the row).
@derivative("softmax", "_softmax", "_safe_softmax")
@opmath(arg="self")
def _softmax(d, a, g, out):
    s = d.op("aten::sum", d.mul(g, out), [a["dim"]], True)
    return {"self": d.mul(out, d.sub(g, s))}


@derivative("log_softmax", "_log_softmax")
@opmath(arg="self")
def _log_softmax(d, a, g, out):
    s = d.op("aten::sum", g, [a["dim"]], True)
    return {"self": d.sub(g, d.mul(d.op("aten::exp", out), s))}
