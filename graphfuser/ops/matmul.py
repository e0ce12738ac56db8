"""Host-program products that passes write out (``passes/sdpa_math.py``)."""
from __future__ import annotations

import torch


def exact_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``graphfuser::exact_matmul``: ``a @ b`` in the operands' own dtype with autocast off, as
    the math backend of ``scaled_dot_product_attention`` multiplies below autocast (a host-program
    ``matmul`` under ``torch.autocast`` would be cast to the autocast dtype)."""
    with torch.autocast(a.device.type, enabled=False):
        return torch.matmul(a, b)
