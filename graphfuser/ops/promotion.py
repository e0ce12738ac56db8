"""Type promotion, exactly as torch's TensorIterator does it.

Participants come in three priorities: tensors with dims, zero-dim tensors, and wrapped Python
scalars. Within a priority dtypes promote normally; a lower priority only matters when it is of
a higher category (bool < integer < floating < complex). A wrapped ``float`` counts as the
default dtype, a wrapped ``int`` as int64.

Example::

    >>> result_type([Participant(torch.int32, "dim"), Participant(torch.float64, "wrapped")])
    torch.float32
    >>> result_type([Participant(torch.float16, "dim"), Participant(torch.float32, "zero")])
    torch.float16
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

PRIORITIES = ("dim", "zero", "wrapped")


@dataclass(frozen=True)
class Participant:
    dtype: torch.dtype
    priority: str   # "dim" | "zero" | "wrapped"


def _category(dt: Optional[torch.dtype]) -> int:
    if dt is None:
        return -1
    if dt == torch.bool:
        return 0
    if dt.is_complex:
        return 3
    if dt.is_floating_point:
        return 2
    return 1


def _to_complex(dt: torch.dtype) -> torch.dtype:
    return {torch.float64: torch.complex128}.get(dt, torch.complex64)


def _combine(higher: Optional[torch.dtype], lower: Optional[torch.dtype]) -> Optional[torch.dtype]:
    if higher is None:
        return lower
    if lower is None:
        return higher
    if _category(higher) == 3:
        return higher
    if _category(lower) == 3:
        return _to_complex(higher) if _category(higher) == 2 else lower
    if _category(higher) == 2:
        return higher
    if higher == torch.bool or _category(lower) == 2:
        return torch.promote_types(higher, lower)
    return higher


def result_type(parts: list[Participant]) -> torch.dtype:
    by_prio: dict[str, Optional[torch.dtype]] = {p: None for p in PRIORITIES}
    for part in parts:
        dt = part.dtype
        if part.priority == "wrapped":
            dt = {torch.float64: torch.get_default_dtype(), torch.float32: torch.get_default_dtype(),
                  torch.complex128: torch.complex64}.get(dt, dt)
        cur = by_prio[part.priority]
        by_prio[part.priority] = dt if cur is None else torch.promote_types(cur, dt)
    out = _combine(by_prio["dim"], _combine(by_prio["zero"], by_prio["wrapped"]))
    if out is None:
        raise ValueError("type promotion needs at least one participant")
    return out


def participant_of(type_, value=None) -> Optional[Participant]:
    """Participant for an IR value type (TensorType or a scalar type name), or a Python scalar."""
    from ..ir.types import TensorType

    if isinstance(type_, TensorType):
        if type_.dtype is None or type_.rank is None:
            return None
        return Participant(type_.dtype, "zero" if type_.rank == 0 else "dim")
    name = getattr(type_, "name", None)
    if value is not None and name is None:
        name = type(value).__name__
    scalar = {"int": torch.int64, "float": torch.float64, "bool": torch.bool, "complex": torch.complex128}
    if name in scalar:
        return Participant(scalar[name], "wrapped")
    return None
