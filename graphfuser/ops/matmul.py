"""Host-program products that passes write out (``passes/sdpa_math.py``)."""
from __future__ import annotations

import torch


def exact_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``graphfuser::exact_matmul``: ``a @ b`` in the operands' own dtype with autocast off, as
    the math backend of ``scaled_dot_product_attention`` multiplies below autocast (a host-program
    ``matmul`` under ``torch.autocast`` would be cast to the autocast dtype)."""
    with torch.autocast(a.device.type, enabled=False):
        return torch.matmul(a, b)


def check_mask(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``graphfuser::sdpa_mask_check``: ``mask`` itself, or the error eager's math backend raises
    when its in-place ``scores.add_(mask)`` would need a wider result (a mask with a larger batch
    than the queries'), where a written out add would broadcast."""
    shape = torch.broadcast_shapes(scores.shape, mask.shape)
    if shape != scores.shape:
        raise RuntimeError(f"output with shape {list(scores.shape)} doesn't match the broadcast shape {list(shape)}")
    return mask
