"""Random rows of the op table: dropout in training, native_dropout, rand_like, bernoulli.

The ``random`` pass (``passes/random.py``) rewrites the aten ops into these ``graphfuser::``
kinds, whose last two arguments are the run-time ``seed`` and ``offset`` that a
``graphfuser::philox_state`` node takes from torch's generator per call. Each element's uniform
number is ``philox_uniform(seed, offset + linear index)``: a pure function of the element, so
results do not depend on the schedule, and the fallback (``philox.py``) draws the same numbers.
"""
from __future__ import annotations

from typing import Optional

import torch

from .philox import philox_uniform
from .table import OpCall, OpRow, register

# fp16 / bf16 uniforms keep as many bits as the format holds below 1.0, so that rounding the
# fp32 draw to the output dtype can never give 1.0
_UNIFORM_BITS = {torch.float16: 11, torch.bfloat16: 8}


def _uniform(call: OpCall, dtype: torch.dtype = torch.float32):
    b = call.b
    prim = "philox_uniform_f64" if dtype == torch.float64 else "philox_uniform_f32"
    return b.call(prim, b.cast(call["seed"], torch.int64), b.cast(call["offset"], torch.int64),
                  b.linear_index(), dtype=torch.int64)


def _keep_scale(p: float) -> float:
    return 0.0 if p >= 1 else 1.0 / (1.0 - p)


def _dropout_mask(call: OpCall):
    """keep = uniform >= p (probability 1 - p), compared in fp32"""
    return call.b.call("ge", _uniform(call), call.const(float(call["p"]), torch.float32))


def _dropout(call: OpCall):
    """input * (keep ? 1 / (1 - p) : 0); the input itself where ``train`` (a run-time flag
    profiled as a constant, which the group's guard checks) is False"""
    b = call.b
    if call.args.get("train") is False:
        return b.cast(call["input"], call.out_dtype)
    factor = b.where(_dropout_mask(call), call.const(_keep_scale(call["p"])), call.const(0.0))
    return b.mul(call.x("input"), factor)


def _native_dropout(call: OpCall):
    """(input * (keep ? 1 / (1 - p) : 0), keep)"""
    return _dropout(call), _dropout_mask(call)


def _rand_like(call: OpCall):
    """uniform in [0, 1) in self's dtype"""
    b = call.b
    u = _uniform(call, torch.float64 if call.out_dtype == torch.float64 else torch.float32)
    bits = _UNIFORM_BITS.get(call.out_dtype)
    if bits is not None:
        u = b.mul(b.call("floor", b.mul(u, call.const(2.0 ** bits, torch.float32))),
                  call.const(2.0 ** -bits, torch.float32))
    return u


def _bernoulli(call: OpCall):
    """uniform < p (p a tensor of probabilities), in p's dtype"""
    return call.b.call("lt", _uniform(call), call.b.cast(call["self"], torch.float32))


def _bernoulli_p(call: OpCall):
    """uniform < p (p a number), in self's dtype"""
    return call.b.call("lt", _uniform(call), call.const(float(call["p"]), torch.float32))


# -- eager references: the same numbers through torch ops ------------------------------------
def _u(x: torch.Tensor, seed: int, offset: int, dtype=torch.float32) -> torch.Tensor:
    return philox_uniform(seed, offset, x.shape, x.device, dtype)


def dropout_mask(x: torch.Tensor, p: float, seed: int, offset: int) -> torch.Tensor:
    """The keep mask (bool, x's shape) graphfuser's dropout draws for (seed, offset)."""
    return _u(x, seed, offset) >= torch.tensor(p, dtype=torch.float32)


def _eager_dropout(input, p, seed, offset, train=True):
    if not train:
        return input        # eager's dropout outside training returns its input itself
    ct = torch.float64 if input.dtype == torch.float64 else torch.float32
    keep = dropout_mask(input, p, seed, offset)
    # (torch.full, not torch.tensor: a host-to-device copy synchronizes, which a CUDA graph
    # capture's warm-up refuses)
    factor = torch.where(keep, torch.full((), _keep_scale(p), dtype=ct, device=input.device),
                         torch.zeros((), dtype=ct, device=input.device))
    return (input.to(ct) * factor).to(input.dtype)


def _eager_native_dropout(input, p, seed, offset):
    return _eager_dropout(input, p, seed, offset), dropout_mask(input, p, seed, offset)


def _eager_rand_like(self, seed, offset):
    u = _u(self, seed, offset, torch.float64 if self.dtype == torch.float64 else torch.float32)
    bits = _UNIFORM_BITS.get(self.dtype)
    if bits is not None:
        u = torch.floor(u * 2.0 ** bits) * 2.0 ** -bits
    return u.to(self.dtype)


def _eager_bernoulli(self, seed, offset):
    return (_u(self, seed, offset) < self.to(torch.float32)).to(self.dtype)


def _eager_bernoulli_p(self, p, seed, offset):
    return (_u(self, seed, offset) < torch.tensor(p, dtype=torch.float32)).to(self.dtype)


def _p_check(consts, parts) -> Optional[str]:
    p = consts.get("p")
    if not isinstance(p, (int, float)) or isinstance(p, bool) or not 0 <= p <= 1:
        return "the probability must be a constant in [0, 1]"
    return None


# ``train``: a dropout whose flag is a run-time bool (``F.dropout(x, p, training)`` in a function
# taking ``training``) keeps it as a fifth argument (passes/random.py); profiled as a constant it
# specializes the group, whose guard sends a call with the other value to the fallback
register(OpRow("philox_dropout", ("graphfuser::dropout",), "pointwise", ("input", "p", "seed", "offset", "train=True"),
               "none", ("input",), consts=("p", "train"), decomp=_dropout, eager=_eager_dropout, check=_p_check,
               float_only=True, doc="dropout in training: input * keep / (1 - p), keep = philox uniform >= p"))
register(OpRow("philox_native_dropout", ("graphfuser::native_dropout",), "pointwise",
               ("input", "p", "seed", "offset"), "none", ("input",), consts=("p",), decomp=_native_dropout,
               eager=_eager_native_dropout, check=_p_check, float_only=True, n_outputs=2,
               doc="native_dropout in training: (dropout(input), keep mask)"))
register(OpRow("philox_rand_like", ("graphfuser::rand_like",), "pointwise", ("self", "seed", "offset"),
               "none", ("self",), decomp=_rand_like, eager=_eager_rand_like, float_only=True,
               doc="uniform numbers in [0, 1) of self's shape and dtype"))
register(OpRow("philox_bernoulli", ("graphfuser::bernoulli",), "pointwise", ("self", "seed", "offset"),
               "none", ("self",), decomp=_bernoulli, eager=_eager_bernoulli, float_only=True,
               doc="bernoulli(p): 1 where philox uniform < p, p a tensor of probabilities"))
register(OpRow("philox_bernoulli_p", ("graphfuser::bernoulli_p",), "pointwise", ("self", "p", "seed", "offset"),
               "none", ("self",), consts=("p",), decomp=_bernoulli_p, eager=_eager_bernoulli_p, check=_p_check,
               float_only=True, doc="bernoulli(self, p): 1 where philox uniform < p, p a number"))
RANDOM_ROWS = ("philox_dropout", "philox_native_dropout", "philox_rand_like", "philox_bernoulli",
               "philox_bernoulli_p")
