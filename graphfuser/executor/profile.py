"""Profile records: what every tensor value looked like on the profiling runs, merged.

A dim that changed between runs becomes symbolic (-1); a dim that stayed 1 stays a broadcast dim;
contiguity and stride order keep only what held on every run (see ``TensorType.merge``).

Non-tensor values that feed a row's constant-only arguments (a reduction's dims / keepdim /
dtype / correction / eps, add's alpha, gelu's approximate: ``ops.profiled_args``) are recorded
too: an int, bool, float, str, None, dtype or list of numbers
that was the same on every run becomes the value's ``profiled`` constant; anything else (a value
that changed, or one of another kind) is ``VARIED``.
"""
from __future__ import annotations

from typing import Any, Optional

import torch

from ..ir.graph import VARIED, Value
from ..ir.types import TensorType

_SCALARS = (bool, int, float, str, type(None), torch.dtype)
_NUMBERS = (bool, int, float)


def snapshot(value: Any) -> Any:
    """The recorded form of a scalar: a private copy of it, or ``VARIED`` if it cannot be a constant."""
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(x, _NUMBERS) for x in value):
        return type(value)(value)
    return VARIED


def same_value(a: Any, b: Any) -> bool:
    """Equal and of the same kind (``1`` and ``True``, ``[1]`` and ``(1,)`` differ)."""
    if type(a) is not type(b) or a != b:
        return False
    if isinstance(a, (list, tuple)):
        return all(type(x) is type(y) for x, y in zip(a, b))
    return True


class ProfileRecord:
    """Per-slot merged TensorTypes and scalar values; ``record`` is the ``_P`` hook of a
    profiling host program."""

    def __init__(self, slots: list[Value]) -> None:
        self.slots = slots
        self.types: list[Optional[TensorType]] = [None] * len(slots)
        self.seen: list[bool] = [False] * len(slots)
        self.values: dict[int, Any] = {}       # scalar slot -> value seen on every run, or VARIED
        self.runs = 0

    def record(self, slot: int, value: Any) -> None:
        if not self.slots[slot].type.is_tensor:
            self.record_scalar(slot, value)
            return
        if not isinstance(value, torch.Tensor):
            return
        t = TensorType.of(value)
        if not self.seen[slot]:
            self.types[slot], self.seen[slot] = t, True
        elif self.types[slot] is not None:
            self.types[slot] = self.types[slot].merge(t)

    def record_scalar(self, slot: int, value: Any) -> None:
        if slot not in self.values:
            self.values[slot] = snapshot(value)
        elif self.values[slot] is not VARIED and not same_value(self.values[slot], value):
            self.values[slot] = VARIED

    def apply(self) -> None:
        """Write the merged types onto the graph's values (unseen values keep their type), and
        the recorded scalars onto their values' ``profiled``."""
        for v, t in zip(self.slots, self.types):
            if t is not None:
                v.type = t
        for slot, value in self.values.items():
            self.slots[slot].profiled = value


def pad_returns(out: Any, pads: dict[int, int]) -> Any:
    """A profiling call's results with the layouts the optimized program will give them
    (``passes/gemm_pad.py`` ``returned_pads``: position -> columns): each such result becomes the
    leading columns of a zero-padded copy, the strided view the padded linear returns."""
    if not pads:
        return out
    single = not isinstance(out, tuple)
    items = [out] if single else list(out)
    for i, pad in pads.items():
        t = items[i] if i < len(items) else None
        if isinstance(t, torch.Tensor) and t.dim() and t.is_contiguous():
            items[i] = torch.nn.functional.pad(t, (0, pad))[..., :t.shape[-1]]
    return items[0] if single else tuple(items)
