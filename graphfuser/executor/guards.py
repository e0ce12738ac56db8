"""Guard functions: generated Python that checks exactly what a kernel was specialized on.

For each tensor input: dtype, no lazy negation or conjugation bit, device, rank, broadcast
(size-1) dims, contiguity along the profiled stride order and the order itself, and
requires_grad (or grad mode). Across inputs: the non-broadcast sizes
that must agree for the group's broadcast to be valid (eager would raise on a mismatch; the
fallback then raises the same error). Never concrete sizes. Scalars the kernel was specialized
on (a reduction's dims, keepdim, dtype, correction, eps: the guard node's ``values``) follow the
tensors as arguments ``y0, y1 ...`` and must equal their profiled values; they are checked first.

A backward graph's guard knows more about some of its inputs (``known``, see
``autodiff/function.py``): a tensor the forward saved ("saved") is the very tensor the forward
group's guard accepted, specialized as the backward's profile saw it, so only its sizes are read
(for the relations); an incoming gradient ("grad") has its output's shape, dtype and device
(autograd's engine casts and checks each gradient against the node's input metadata), so only
its layout is checked.

Example (a contiguous 2-D float input)::

    def guard(x0):
        return (x0.dtype is _dt0 and not x0.is_neg() and x0.is_cpu and len(s0 := x0.shape) == 2
                and 1 not in s0 and x0.is_contiguous() and not (_g and x0.requires_grad))
"""
from __future__ import annotations

import math
from typing import Any, Callable, Optional, Sequence

import torch

from ..ir.types import TensorType
from ..runtime.cuda_driver import single_device
from ..runtime.pycode import define


def _layout_checks(i: int, t: TensorType) -> list[str]:
    """Contiguity along the profiled stride order, and the order itself where a dim is not
    contiguous with the next: outputs are allocated in the stride order eager gave them
    (TensorIterator derives it from the inputs' stride orders), so an input whose order changed
    must miss the guard even when the kernel could read it."""
    rank = t.rank
    order, contig = t.stride_order, t.contiguity
    default_order = tuple(d for d in range(rank) if t.sizes[d] != 1)
    if order == default_order and all(contig):
        return [f"x{i}.is_contiguous()"]
    # a strided input in the default order (a sliced or expanded one) stays strided: a contiguous
    # one would pass the order checks below, but eager may compute it another way (the CPU batch
    # norm's fast path folds its terms: x * (invstd * w) + ..., where the general path's
    # (x - mean) * invstd overflows first: fuzz graph 397 of CPU seed 33917), and its own variant
    # gets the vectorized kernel
    # (an empty tensor is contiguous whatever its strides)
    checks = [f"not x{i}.is_contiguous()"] if order == default_order and 0 not in t.sizes else []
    for k, d in enumerate(order):
        if not contig[k] and t.strides is not None and t.strides[d] >= 0:
            # TensorIterator skips an operand's stride-0 (expanded) dims when it orders the
            # output's dims, so which dims are expanded is part of the layout
            checks.append(f"st{i}[{d}] {'==' if t.strides[d] == 0 else '!='} 0")
        if k + 1 < len(order):
            n = order[k + 1]
            if contig[k]:
                checks.append(f"st{i}[{d}] == st{i}[{n}] * s{i}[{n}]")
            else:
                # layout_of orders by decreasing stride, ties by increasing dim
                checks.append(f"st{i}[{d}] {'>=' if d < n else '>'} st{i}[{n}]")
        elif contig[k]:
            checks.append(f"st{i}[{d}] == 1")
    return checks


def _value_check(k: int, value: Any, ns: dict) -> str:
    if value is None:
        return f"y{k} is None"
    if isinstance(value, bool):
        return f"y{k} is {value!r}"          # (1 == True: an int must not pass for a bool)
    if isinstance(value, int):
        return f"(y{k} == {value!r} and y{k}.__class__ is int)"
    if isinstance(value, float) and value == 0.0:
        # 0.0 == -0.0: the sign of a zero the kernel holds as a constant is checked too
        ns["_copysign"] = math.copysign
        return f"(y{k} == 0.0 and _copysign(1.0, y{k}) == {math.copysign(1.0, value)!r})"
    if isinstance(value, float) and math.isfinite(value):
        return f"y{k} == {value!r}"
    ns[f"_v{k}"] = value     # lists, dtypes, non-finite floats: compared with a bound copy
    return f"y{k} == _v{k}"


def guard_source(types: Sequence[TensorType], out_rank: int, name: str = "guard",
                 axes: Optional[Sequence[Sequence[Optional[int]]]] = None,
                 values: Sequence[Any] = (), check_tensors: bool = True,
                 known: Optional[Sequence[Optional[str]]] = None) -> tuple[str, dict]:
    """Python source of a guard over ``types`` (tensor inputs of a group) and its namespace.

    ``axes`` (groups with reductions / normalizations: ``ops.axes.input_axes``) names the loop
    axis of each input dim; dims sharing an axis must agree. Without it, broadcasting is
    right-aligned to ``out_rank``. ``values``: the profiled scalars the kernel holds as
    constants, passed after the tensors. ``check_tensors=False`` (guard mode off) checks the
    values only. ``known``: per tensor, None, "saved" or "grad" (module docstring)."""
    ns: dict = {"_grad_enabled": torch.is_grad_enabled}
    conds: list[str] = [_value_check(k, v, ns) for k, v in enumerate(values)]
    known = list(known or ()) + [None] * (len(types) - len(known or ()))
    if check_tensors and not all(known):
        conds.append("((_g := _grad_enabled()) or True)")    # grad mode, read once per call
    for i, t in enumerate(types if check_tensors else ()):
        if known[i] is not None:
            conds.append(f"((s{i} := x{i}.shape) or True)")
            if known[i] == "grad":
                if any(c.startswith("st") for c in _layout_checks(i, t)):
                    conds.append(f"((st{i} := x{i}.stride()) or True)")
                conds += ([f"0 in s{i}"] if 0 in t.sizes else []) + _layout_checks(i, t)
            continue
        ns[f"_dt{i}"] = t.dtype
        conds.append(f"x{i}.dtype is _dt{i}")
        # a lazy negation or conjugation (``z.conj().imag``, ``torch._neg_view``; ``z.conj()``):
        # the kernel would read the memory as it is, without the sign (eager resolves it)
        if t.dtype is not torch.bool:
            conds.append(f"not x{i}.is_neg()")
        if t.dtype.is_complex:
            conds.append(f"not x{i}.is_conj()")
        if t.device.type == "cpu":
            conds.append(f"x{i}.is_cpu")
        elif single_device():
            conds.append(f"x{i}.is_cuda")     # the only device: no get_device() call
        else:
            conds.append(f"x{i}.is_cuda and x{i}.get_device() == {t.device.index or 0}")
        conds.append(f"len(s{i} := x{i}.shape) == {t.rank}")     # the rank, and the sizes bound once
        needs_strides = any(c.startswith("st") for c in _layout_checks(i, t))
        if needs_strides:
            conds.append(f"((st{i} := x{i}.stride()) or True)")
        # which dims are size 1 (broadcast): those named, and no other (one C-level scan)
        ones = [d for d, s in enumerate(t.sizes) if s == 1]
        conds += [f"s{i}[{d}] == 1" for d in ones]
        if len(ones) < t.rank:
            conds.append(f"s{i}.count(1) == {len(ones)}" if ones else f"1 not in s{i}")
        if 0 in t.sizes:
            # profiled empty: the layout eager gave an empty result says nothing of a full one
            conds.append(f"0 in s{i}")
        conds += _layout_checks(i, t)
        # a group specialized for inputs requiring grad runs as an autograd node (graphfuser.autodiff)
        # (requires_grad under the grad mode, as profiled: see TensorType.of). A group made
        # for inputs requiring grad also runs under no_grad (its autograd node records nothing).
        conds.append(f"x{i}.requires_grad" if t.requires_grad else f"not (_g and x{i}.requires_grad)")
    # Non-broadcast dims aligned to the same output dim (loop axis) must agree.
    owners: dict[int, tuple[int, int]] = {}
    for i, t in enumerate(types if check_tensors else ()):
        for d, s in enumerate(t.sizes):
            od = out_rank - t.rank + d if axes is None else axes[i][d]
            if s == 1 or od is None:
                continue
            if od in owners:
                j, e = owners[od]
                conds.append(f"s{i}[{d}] == s{j}[{e}]")
            else:
                owners[od] = (i, d)
    args = ", ".join([f"x{i}" for i in range(len(types))] + [f"y{k}" for k in range(len(values))])
    body = " and\n            ".join(conds) if conds else "True"
    return f"def {name}({args}):\n    return ({body})\n", ns


def make_guard(types: Sequence[TensorType], out_rank: int,
               axes: Optional[Sequence[Sequence[Optional[int]]]] = None,
               values: Sequence[Any] = (), check_tensors: bool = True,
               known: Optional[Sequence[Optional[str]]] = None) -> Callable[..., bool]:
    src, ns = guard_source(types, out_rank, axes=axes, values=values, check_tensors=check_tensors, known=known)
    define(src, "<graphfuser guard>", ns)
    fn = ns["guard"]
    fn.source = src
    return fn


def always_true(*args) -> bool:
    return True
