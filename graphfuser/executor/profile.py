"""Profile records: what every tensor value looked like on the profiling runs, merged.

A dim that changed between runs becomes symbolic (-1); a dim that stayed 1 stays a broadcast dim;
contiguity and stride order keep only what held on every run (see ``TensorType.merge``).
"""
from __future__ import annotations

from typing import Any, Optional

import torch

from ..ir.graph import Value
from ..ir.types import TensorType


class ProfileRecord:
    """Per-slot merged TensorTypes; ``record`` is the ``_P`` hook of a profiling host program."""

    def __init__(self, slots: list[Value]) -> None:
        self.slots = slots
        self.types: list[Optional[TensorType]] = [None] * len(slots)
        self.seen: list[bool] = [False] * len(slots)
        self.runs = 0

    def record(self, slot: int, value: Any) -> None:
        if not isinstance(value, torch.Tensor):
            return
        t = TensorType.of(value)
        if not self.seen[slot]:
            self.types[slot], self.seen[slot] = t, True
        elif self.types[slot] is not None:
            self.types[slot] = self.types[slot].merge(t)

    def apply(self) -> None:
        """Write the merged types onto the graph's values (unseen values keep their type)."""
        for v, t in zip(self.slots, self.types):
            if t is not None:
                v.type = t
