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

import functools
import math
from typing import Any, Callable

import torch

ZERO = object()      # "this input's gradient is zero"

# Rows whose outputs never carry a gradient, whatever their inputs: differentiability stops there.
NON_DIFFERENTIABLE = frozenset({"detach"})

DERIVATIVES: dict[str, Callable[..., dict[str, Any]]] = {}
# rows whose node a backward graph rebuilds from the outputs the forward saved (autodiff/saved.py):
# fn(d, args, outputs, input type, output type) -> the first output, pointwise
REBUILDS: dict[str, Callable[..., Any]] = {}


class Exact:
    """A gradient already in its input's shape: the builder adds no ``sum_to_size``."""

    def __init__(self, value: Any) -> None:
        self.value = value


_REDUCED = (torch.float16, torch.bfloat16)


def _dtype(d, v) -> Any:
    """The profiled dtype of forward value ``v`` (None for a non-tensor or an unknown one)."""
    t = d.ftypes.get(v) if d.is_value(v) else None
    return getattr(t, "dtype", None)


def opmath(formula: Callable = None, *, arg: str = "input") -> Callable:
    """``formula`` computed in float32 when the input ``arg`` is fp16 / bf16, each gradient cast
    back to its argument's dtype at the end.

    Eager's normalization backward kernels (``native_batch_norm_backward``,
    ``native_layer_norm_backward``, ...) and its activation backward kernels (``gelu_backward``,
    ``silu_backward``, ``softplus_backward``, ``tanh_backward``, ``sigmoid_backward``) compute in
    float and round only their results. Where the backward graph runs op by op (its profiling
    runs, its fallback), a formula left in fp16 rounds every step: with two values per channel a
    norm's dx (the difference of nearly equal terms) keeps none of its digits, and tanh-GELU's
    x * x overflows fp16 for |x| > 256 (NaN gradients where eager's are finite: fuzz graph 940 of
    CPU seed 34111). The fused kernel computes in float either way, so the casts cost it nothing
    but the final rounding it does anyway."""
    if formula is None:
        return lambda f: opmath(f, arg=arg)

    @functools.wraps(formula)
    def wrapped(d, a, g, out):
        if _dtype(d, a.get(arg)) not in _REDUCED:
            return formula(d, a, g, out)
        wide = {k: d.to(v, torch.float32) if _dtype(d, v) in _REDUCED else v for k, v in a.items()}
        if _dtype(d, out) in _REDUCED:
            out = d.to(out, torch.float32)
        res = formula(d, wide, None if g is None else d.to(g, torch.float32), out)
        back = {}
        for name, r in res.items():
            dt = _dtype(d, a.get(name))
            if r is ZERO or dt not in _REDUCED:
                back[name] = r
            elif isinstance(r, Exact):
                back[name] = Exact(d.to(r.value, dt))
            else:
                back[name] = d.to(r, dt)
        return back
    return wrapped


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


@derivative("bias_grad")
def _bias_grad(d, a, g, out):
    """``bias``'s gradient: ``g`` summed over every dim but the last, as eager's addmm backward
    sums it; under autocast (an fp16 / bf16 product of a float32 bias) rounded to the product's
    dtype first, as eager's gradient of the cast bias is, then made the bias's dtype."""
    rank = d.rank(a["self"])
    st, bt = d.ftypes.get(a["self"]), d.ftypes.get(a["bias"])
    if bt is not None and bt.sizes is not None and len(bt.sizes) > 1:
        # past a permute the bias comes as [C, 1, ...] (passes/bias.py): summed over the dims it
        # broadcasts along, in one reduction, then viewed to its shape
        lead = rank - len(bt.sizes)
        dims = [j for j in range(rank) if j < lead or bt.sizes[j - lead] == 1]
        s = d.op("aten::sum", g, dims, True)
        s = d.op("aten::view", s, list(bt.sizes)) if lead else s
    else:
        s = d.op("aten::sum", g, list(range(rank - 1)), False) if rank > 1 else g
    if st is not None and bt is not None and st.dtype != bt.dtype:
        s = d.to(d.to(s, st.dtype), bt.dtype)
    return {"self": g, "bias": Exact(s)}


# a pointwise row whose formula sums its gradient: it gets the gradient at its output's shape
# (one constant along dims the output has, after a mean, counts each of them), as reductions do
_bias_grad.full_gradient = True


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
    # eager's -grad * self.div(other, rounding_mode="floor"): Python's floor division, which is
    # not floor(self / other) where the quotient rounds onto an integer (fuzz graph 1307 of seed
    # 6161: 2 / (2/3) = 3.0000000000000004, whose floor division is 2)
    return {"self": g, "other": d.neg(d.mul(g, d.op("aten::floor_divide", a["self"], a["other"])))}


@derivative("neg")
def _neg(d, a, g, out):
    return {"self": d.neg(g)}


@derivative("dense_copy")
def _dense_copy(d, a, g, out):
    """A broadcast copy: ``self``'s gradient summed over the dims it broadcasts along, as
    eager's ``expand`` sums it; ``like`` is read for its sizes only."""
    return {"self": g}


@derivative("flip")
def _flip(d, a, g, out):
    """A flip is its own inverse: the gradient read back to front along the same dims."""
    return {"self": d.op("aten::flip", g, list(a["dims"]))}


# at the output's shape: a gradient broadcast along a flipped dim is no longer the same there
# when its dims are numbered from another rank
_flip.full_gradient = True


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
@opmath(arg="self")
def _tanh(d, a, g, out):
    return {"self": d.mul(g, d.rsub(d.mul(out, out), 1.0))}


@derivative("sigmoid")
@opmath(arg="self")
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
    den = d.add(d.mul(x, x), d.mul(y, y))
    # eager: 1 / (x^2 + y^2) is 0 where both are 0, so the gradient at the origin is 0, not NaN
    rec = d.where(d.op("aten::eq", den, 0.0), 0.0, d.op("aten::reciprocal", den))
    return {"self": d.mul(d.mul(g, y), rec), "other": d.mul(d.mul(g, d.neg(x)), rec)}


@derivative("relu")
def _relu(d, a, g, out):
    # eager's threshold_backward: zero where out <= 0, so a NaN passes the gradient
    return {"self": d.where(d.op("aten::le", out, 0.0), 0.0, g)}


@derivative("leaky_relu")
def _leaky_relu(d, a, g, out):
    return {"self": d.where(d.op("aten::gt", a["self"], 0.0), g, d.mul(g, a.get("negative_slope", 0.01)))}


@derivative("hardtanh")
def _hardtanh(d, a, g, out):
    x = a["self"]
    # eager: zero where x <= min or x >= max, so a NaN passes the gradient
    outside = d.op("aten::logical_or", d.op("aten::le", x, a.get("min_val", -1.0)),
                   d.op("aten::ge", x, a.get("max_val", 1.0)))
    return {"self": d.where(outside, 0.0, g)}


@derivative("relu6")
def _relu6(d, a, g, out):
    x = a["self"]
    # eager's relu6 is hardtanh(0, 6): zero where x <= 0 or x >= 6, so a NaN passes the gradient
    outside = d.op("aten::logical_or", d.op("aten::le", x, 0.0), d.op("aten::ge", x, 6.0))
    return {"self": d.where(outside, 0.0, g)}


@derivative("hardsigmoid")
def _hardsigmoid(d, a, g, out):
    x = a["self"]
    # eager: g * (1/6) strictly inside (-3, 3), else 0 (a NaN gets 0)
    inside = d.op("aten::logical_and", d.op("aten::gt", x, -3.0), d.op("aten::lt", x, 3.0))
    return {"self": d.where(inside, d.mul(g, 1.0 / 6.0), 0.0)}


def _device_type(d, v) -> str:
    """The device type of ``v``'s forward value as profiled ("cuda" where unknown)."""
    t = getattr(d, "ftypes", {}).get(v) or getattr(v, "type", None)
    dev = getattr(t, "device", None)
    return dev.type if dev is not None else "cuda"


@derivative("hardswish")
def _hardswish(d, a, g, out):
    x = a["self"]
    # eager: 0 up to -3, g * (x / 3 + 1/2) between, g from 3 on. At a NaN the two devices'
    # kernels differ: the CPU's vectorized one gives NaN, CUDA's passes g
    mid = d.mul(g, d.add(d.div(x, 3.0), 0.5))
    if _device_type(d, x) == "cpu":
        inner = d.where(d.op("aten::ge", x, 3.0), g, mid)
    else:
        inner = d.where(d.op("aten::lt", x, 3.0), mid, g)
    return {"self": d.where(d.op("aten::le", x, -3.0), 0.0, inner)}


@derivative("gelu")
@opmath(arg="self")
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
@opmath(arg="self")
def _silu(d, a, g, out):
    x = a["self"]
    s = d.op("aten::sigmoid", x)
    return {"self": d.mul(d.mul(g, s), d.add(d.mul(x, d.rsub(s, 1.0)), 1.0))}


@derivative("softplus")
@opmath(arg="self")
def _softplus(d, a, g, out):
    x, beta, thr = a["self"], a.get("beta", 1), a.get("threshold", 20)
    bx = d.mul(x, beta)
    z = d.op("aten::exp", bx)
    return {"self": d.where(d.op("aten::gt", bx, thr), g, d.div(d.mul(g, z), d.add(z, 1.0)))}


@derivative("pow")
def _pow(d, a, g, out):
    x, e = a["self"], a["exponent"]
    grads = {}
    tensor_e = d.is_value(e) and e.type.is_tensor
    if d.is_value(x):
        if d.is_value(e):
            gx = d.mul(d.mul(g, e), d.op("aten::pow", x, d.sub(e, 1.0)))
            # a run-time number exponent is compared as a tensor of x's shape (where needs one)
            grads["self"] = d.where(d.op("aten::eq", e if tensor_e else d.broadcast(e, x), 0.0), 0.0, gx)
        elif e == 0:
            grads["self"] = ZERO
        else:
            grads["self"] = d.mul(d.mul(g, e), d.op("aten::pow", x, e - 1))
    if tensor_e:
        # eager: grad * where(x == 0 and e >= 0, 0, out * log(x)): the gradient multiplies after
        # the mask (an infinite or NaN grad stays NaN there), and log(0) is -inf
        log_x = d.op("aten::log", x) if d.is_value(x) else \
            math.log(x) if x > 0 else (-math.inf if x == 0 else float("nan"))
        ge = d.mul(out, log_x)
        if d.is_value(x):
            # (a run-time number base is compared as a tensor of the exponent's shape; its log
            # stays a number, computed in double as eager's Scalar::log)
            xc = x if x.type.is_tensor else d.broadcast(x, e)
            cond = d.op("aten::logical_and", d.op("aten::eq", xc, 0.0), d.op("aten::ge", e, 0.0))
            ge = d.where(cond, 0.0, ge)
        elif x == 0:
            ge = d.where(d.op("aten::ge", e, 0.0), 0.0, ge)
        grads["exponent"] = d.mul(g, ge)
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


@derivative("masked_fill")
def _masked_fill(d, a, g, out):
    # a tensor value (0-dim) gets the gradient of every filled element, summed by the builder
    m = a["mask"]
    return {"self": d.where(m, 0.0, g), "value": d.where(m, g, 0.0)}


@derivative("threshold")
def _threshold(d, a, g, out):
    return {"self": d.where(d.op("aten::le", a["self"], a["threshold"]), 0.0, g)}   # (NaN passes, as eager's)


@derivative("lerp")
def _lerp(d, a, g, out):
    x, end, w = a["self"], a["end"], a["weight"]
    grads = {"self": d.mul(g, d.rsub(w, 1.0) if d.is_value(w) else 1.0 - w), "end": d.mul(g, w)}
    if d.is_value(w):
        grads["weight"] = d.mul(g, d.sub(end, x))
    return grads


@derivative("addcmul")
def _addcmul(d, a, g, out):
    # eager's association, g * (t2 * value): (g * t2) * value overflowed where eager's does not
    # (fuzz graph 77 of seed 33691: -inf where eager's gradient is -3.2e38)
    v = a.get("value", 1)
    return {"self": g, "tensor1": d.mul(g, _scaled(d, a["tensor2"], v)),
            "tensor2": d.mul(g, _scaled(d, a["tensor1"], v))}


@derivative("addcdiv")
def _addcdiv(d, a, g, out):
    # eager's association (``g * (value / t2)``, ``-g * (value * t1 / (t2 * t2))``): (g / t2) * value
    # overflowed where eager's factor keeps a huge gradient finite (3e38 / 0.5 * 0.25), and rounded
    # otherwise than eager for value=1. value / t2 as value * (1 / t2): eager's bits for a
    # power-of-two value (1 included), within an ulp otherwise
    v = a.get("value", 1)
    t1, t2 = a["tensor1"], a["tensor2"]
    q = d.mul(g, _scaled(d, d.op("aten::reciprocal", t2), v))
    r = d.div(_scaled(d, t1, v), d.mul(t2, t2))
    return {"self": g, "tensor1": q, "tensor2": d.neg(d.mul(g, r))}


@derivative("nan_to_num")
def _nan_to_num(d, a, g, out):
    # eager's grad * isfinite(self): an inf or NaN gradient at a non-finite x stays NaN (0 * inf),
    # where a select would give 0 (fuzz graph 5480 of seed 9696: addcdiv by a zero tensor)
    return {"self": d.mul(g, d.op("aten::isfinite", a["self"]))}


@derivative("to", "autocast_to_full_precision", "autocast_to_reduced_precision")
def _to(d, a, g, out):
    x = a["self"]
    return {"self": d.op("aten::type_as", g, x) if d.is_value(x) else g}   # grad cast back to the input dtype


@derivative("dropout")
def _dropout(d, a, g, out):
    if a.get("train") and a.get("p", 0.5) != 0:
        return {}
    return {"input": g}        # identity: eval mode, or p = 0 in training (timm's default drop rates)


# -- random rows (ops/random.py) -----------------------------------------------------------------
# dropout's backward is dropout of the gradient with the forward's (seed, offset): the backward
# graph regenerates the keep mask inside its own kernel; no mask is stored.
@derivative("philox_dropout")
def _philox_dropout(d, a, g, out):
    if a.get("train", True) is False:
        return {"input": g}
    return {"input": d.op("graphfuser::dropout", g, a["p"], a["seed"], a["offset"])}


@derivative("philox_rand_like", "philox_bernoulli", "philox_bernoulli_p")
def _philox_sample(d, a, g, out):
    return {"self": ZERO}      # samples do not depend on the input's values (eager: zero gradient)


# The reduction, moment, prod and normalization formulas live next door; importing them
# registers them.
from . import derivatives_norms  # noqa: E402,F401
