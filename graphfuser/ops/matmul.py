"""Host-program products, checks and copies that passes write out (``passes/sdpa_math.py``,
``passes/sdpa_bias.py``, ``passes/gemm_pad.py``)."""
from __future__ import annotations

import torch

from .aten import _dtype


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


def check_bias(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, bias: torch.Tensor, dropout_p: float,
               is_causal: bool, scale, enable_gqa: bool, choice: int) -> torch.Tensor:
    """``graphfuser::sdpa_bias_check``: ``bias``, the additive bias made once from a boolean
    mask for SDPA backend ``choice`` (``passes/sdpa_bias.py``), where SDPA still chooses that
    backend for this call's tensors; else the boolean mask back (``bias == 0``, exact: the bias
    holds 0 where the mask held True and -65504 or -inf elsewhere), which eager's backend then
    converts itself."""
    if torch._fused_sdp_choice(query, key, value, bias, dropout_p, is_causal, scale=scale,
                               enable_gqa=enable_gqa) == choice:
        return bias
    return bias == 0


def pad_rows(self: torch.Tensor, dtype, pad: int) -> torch.Tensor:
    """``graphfuser::pad_rows``: ``self`` with ``pad`` rows of zeros after its own along dim 0,
    cast to ``dtype`` (a ScalarType code; None keeps ``self``'s) by the same copy: the padded
    weight of a padded GEMM (``passes/gemm_pad.py``), where ``constant_pad_nd`` of autocast's
    cast was the cast's kernel and then two more copies of the cast weight. Differentiable in
    ``self`` (the gradient is the first rows', cast back)."""
    dt = self.dtype if dtype is None else _dtype(dtype)
    n = self.shape[0]
    out = torch.empty((n + pad,) + tuple(self.shape[1:]), dtype=dt, device=self.device)
    out[n:].zero_()
    out[:n].copy_(self)
    return out
