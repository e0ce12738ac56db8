"""``F.cross_entropy`` of a Dynamo graph as ops the partition fuses.

Eager's ``cross_entropy`` is ``nll_loss_nd(log_softmax(x, 1), t)``: the log-softmax writes a
float32 tensor of the logits' size (a language model's ``[tokens, vocab]``), the loss reads one
element per row of it, and the backward fills a zero tensor of that size, scatters the loss's
gradient into it and reads it back with the saved log-softmax. For a 2-d input of class indices
(what a language model's loss flattens to) the same values come from per-row ops::

    m = amax(x, 1, keepdim).detach()          the shift; no gradient (the loss does not depend on it)
    sh = x - m                                eager's log-softmax computes the same difference
    s = sum(exp(sh), 1, keepdim)
    hit = arange(C, int32) == t[:, None]      the target's column
    lsm_t = (sum(where(hit, x, 0), 1, keepdim) - m) - log(s)     eager's log_softmax(x)[n, t[n]], bit for bit
    nll = where(t[:, None] != ignore_index, -lsm_t, 0)
    loss = nll.squeeze(1) | nll.sum() | nll.sum() / (t != ignore_index).sum()     none | sum | mean

The partition makes one group of the rows, the ``.float()`` before it included. Its kernel reads
the logits once: the target's column is picked from ``x`` (``x[t] - m`` after the sum, the same
subtraction as eager's), so the pick is no second-phase reduction after the max, and the max and
the sum of exponentials share one online pass (``codegen/reduction/pairs.py``). The column
indices are int32: an int64 index would halve the kernel's vector width. Autodiff makes one
backward group, ``g * (exp(sh) / s - hit)`` from the logits and the forward's ``m`` and ``s``
(saved: a vocabulary's rows are long, ``autodiff/saved.py``), one pass: no float32 copy, no zero
fill, no scatter. The sum over rows is a small group of its own.

Eager raises for a target outside ``[0, C)`` that is not ``ignore_index``; here the targets are
checked by ``aten::_assert_async``, which raises on the CPU and, as eager's kernel does, fails a
device-side assertion on CUDA, without waiting for the device.

Other forms (class probabilities, weights, label smoothing, inputs of another rank, targets not
int64) keep eager's ``nll_loss_nd(log_softmax(x, c), ...)``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import torch

from ..ir.graph import Value
from ..ir.types import INT, TENSOR, Type
from ..ops.aten import DTYPE_CODES, resolve_aten

if TYPE_CHECKING:
    from .fx import _Converter

_S = {
    "amax": "aten::amax(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor",
    "detach": "aten::detach(Tensor(a) self) -> Tensor(a)",
    "sub": "aten::sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
    "exp": "aten::exp(Tensor self) -> Tensor",
    "log": "aten::log(Tensor self) -> Tensor",
    "neg": "aten::neg(Tensor self) -> Tensor",
    "sum_dim": "aten::sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) "
               "-> Tensor",
    "sum": "aten::sum(Tensor self, *, ScalarType? dtype=None) -> Tensor",
    "size": "aten::size.int(Tensor self, int dim) -> int",
    "arange": "aten::arange(Scalar end, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, "
              "bool? pin_memory=None) -> Tensor",
    "unsqueeze": "aten::unsqueeze(Tensor(a) self, int dim) -> Tensor(a)",
    "squeeze": "aten::squeeze.dim(Tensor(a) self, int dim) -> Tensor(a)",
    "eq": "aten::eq.Tensor(Tensor self, Tensor other) -> Tensor",
    "eq_s": "aten::eq.Scalar(Tensor self, Scalar other) -> Tensor",
    "ne_s": "aten::ne.Scalar(Tensor self, Scalar other) -> Tensor",
    "ge_s": "aten::ge.Scalar(Tensor self, Scalar other) -> Tensor",
    "lt_s": "aten::lt.Scalar(Tensor self, Scalar other) -> Tensor",
    "and": "aten::logical_and(Tensor self, Tensor other) -> Tensor",
    "or": "aten::logical_or(Tensor self, Tensor other) -> Tensor",
    "all": "aten::all(Tensor self) -> Tensor",
    "where": "aten::where.ScalarOther(Tensor condition, Tensor self, Scalar other) -> Tensor",
    "div": "aten::div.Tensor(Tensor self, Tensor other) -> Tensor",
    "assert": "aten::_assert_async.msg(Tensor self, str assert_msg) -> ()",
}
TARGET_MESSAGE = "cross_entropy: a target is outside [0, n_classes) and is not ignore_index"


def takes_rows(x: Any, t: Any) -> bool:
    """The form this module builds: a 2-d float input and a 1-d int64 target of the same batch
    size (equal ints, or the same symbolic size)."""
    return (isinstance(x, torch.Tensor) and isinstance(t, torch.Tensor) and x.dim() == 2 and t.dim() == 1
            and t.dtype == torch.int64 and str(x.shape[0]) == str(t.shape[0]))


def cross_entropy_rows(fx: "_Converter", n: torch.fx.Node, source: Optional[str], x: Value, t: Value,
                       reduction: str, ignore_index: int, device: torch.device) -> Value:
    """The loss's value, the nodes above appended to ``fx``'s graph (each with ``source``)."""
    def op(name: str, *inputs: Any, out: Type = TENSOR) -> Value:
        schema = _S[name]
        kind = schema.split("(", 1)[0].split(".")[0]
        ins = [i if isinstance(i, Value) else fx.constant(i) for i in inputs]
        node = fx.g.create(kind, ins, [out] if out is not None else [], {}, source, [n.name])
        node.schema = resolve_aten(kind, schema)
        fx.g.block.append(node)
        return node.output if out is not None else None

    none = fx.constant(None)
    one = fx.constant([1])
    keep = fx.constant(True)
    m = op("detach", op("amax", x, one, keep))
    sh = op("sub", x, m, 1)
    s = op("sum_dim", op("exp", sh), one, keep, none)
    c = op("size", x, 1, out=INT)
    columns = op("arange", c, fx.constant(DTYPE_CODES[torch.int32]), none, fx.constant(device, Type("Device")), none)
    t1 = op("unsqueeze", t, 1)
    hit = op("eq", columns, t1)
    picked = op("sub", op("sum_dim", op("where", hit, x, 0.0), one, keep, none), m, 1)
    lsm_t = op("sub", picked, op("log", s), 1)
    valid = op("ne_s", t1, ignore_index)
    nll = op("where", valid, op("neg", lsm_t), 0.0)
    in_range = op("and", op("ge_s", t, 0), op("lt_s", t, c))
    op("assert", op("all", op("or", in_range, op("eq_s", t, ignore_index))), TARGET_MESSAGE, out=None)
    if reduction == "none":
        return op("squeeze", nll, 1)
    total = op("sum", nll, none)
    return total if reduction == "sum" else op("div", total, op("sum", valid, none))
