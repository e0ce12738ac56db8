"""The eager programs of the normalization rows that also return their statistics
(``graphfuser::batch_norm_train``, ``graphfuser::layer_norm_train``: fallbacks, unfused groups,
double backward), computed as their fused kernels are: the segment's first element as the shift,
the moments of the deviations from it, the mean split into shift and offset (``split_mean``)."""
from __future__ import annotations

from typing import Optional, Sequence

import torch


def split_mean_tensors(k: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``split_mean`` on tensors (the host programs of fallbacks and unfused groups)."""
    hi = k + c
    kb = hi - k
    return hi, (k - (hi - kb)) + (c - kb)


def shifted_statistics(input: torch.Tensor, dims: Sequence[int], eps: float, weight: Optional[torch.Tensor],
                       bias: Optional[torch.Tensor]
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, shift, offset, rstd) of ``input`` normalized over ``dims`` (weight and bias already
    shaped to broadcast), in float32 for fp16 / bf16 input, ``y`` in the input's dtype."""
    ct = torch.float32 if input.dtype in (torch.float16, torch.bfloat16) else input.dtype
    x = input.to(ct)
    shift = x
    for dim in dims:
        shift = shift.narrow(dim, 0, 1) if x.shape[dim] else x.new_zeros(()).expand(*shift.shape[:dim], 1,
                                                                               *shift.shape[dim + 1:])
    d = x - shift
    offset = d.mean(list(dims), keepdim=True)
    rstd = torch.rsqrt(((d - offset) ** 2).mean(list(dims), keepdim=True) + eps)
    shift, offset = split_mean_tensors(shift, offset)        # as the fused kernel (split_mean)
    y = ((x - shift) - offset) * rstd
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y.to(input.dtype), shift.contiguous(), offset, rstd


def batch_norm_train_eager(input: torch.Tensor, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor],
                           eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``graphfuser::batch_norm_train``: statistics over every dim but the channels (dim 1)."""
    shape = [1, -1] + [1] * (input.dim() - 2)
    return shifted_statistics(input, [0] + list(range(2, input.dim())), eps,
                              None if weight is None else weight.reshape(shape),
                              None if bias is None else bias.reshape(shape))


def layer_norm_train_eager(input: torch.Tensor, normalized_shape, weight: Optional[torch.Tensor],
                           bias: Optional[torch.Tensor], eps: float
                           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``graphfuser::layer_norm_train``: statistics over the last ``len(normalized_shape)`` dims.
    Shapes eager's layer norm rejects (trailing dims other than ``normalized_shape``, a weight or
    bias of another shape) raise eager's own error: this is the group's fallback, which runs
    exactly when a kernel's size checks fail."""
    shape = list(normalized_shape) if isinstance(normalized_shape, (list, tuple, torch.Size)) else [normalized_shape]
    k = len(shape)
    if list(input.shape[input.dim() - k:]) != shape or input.dim() < k \
            or any(t is not None and list(t.shape) != shape for t in (weight, bias)):
        torch.layer_norm(input, shape, weight, bias, eps)       # raises eager's error
        raise RuntimeError(f"layer_norm: input of size {list(input.shape)} does not end in normalized_shape {shape}")
    return shifted_statistics(input, list(range(input.dim() - k, input.dim())), eps, weight, bias)
