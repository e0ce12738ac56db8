"""Eager's checks for views that a graph rewrite moved onto another tensor.

``passes/sink_views.py`` turns ``view(f(x), sizes)`` (``f`` a one-input pointwise op or a cast)
into ``f(reshape(x, sizes))``. The values are the same, but whether eager's ``view`` raises
depends on the strides of ``f(x)``, not of ``x``: ``x * s`` of a transposed ``x`` keeps the
transposed strides and ``.view(-1)`` of it raises, while ``x.float()`` of a padded ``x`` is dense
and views freely. ``check_view_of_result`` raises eager's error where eager's view would.
"""
from __future__ import annotations

from typing import Optional, Sequence, Union

import torch

from .aten import DTYPE_CODES

_DTYPES = {code: dt for dt, code in DTYPE_CODES.items()}

_CHECKED: dict = {}     # layouts whose view passed: the check is a dict lookup after the first call


def result_meta(x: torch.Tensor, dtype: Optional[torch.dtype]) -> torch.Tensor:
    """A meta tensor with the strides eager gives ``f(x)``: ``x.to(dtype)`` for a cast (``dtype``
    given: a tensor of another dtype, or ``x`` itself), else a one-input pointwise op, whose
    result TensorIterator lays out after ``x``'s strides (``eq(x, x)`` is one for every dtype)."""
    m = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
    return m.to(dtype) if dtype is not None else torch.eq(m, m)


def check_view_of_result(x: torch.Tensor, sizes: Sequence[int], dtype: Union[None, int, torch.dtype]) -> None:
    """Raise the error ``f(x).view(sizes)`` raises in eager (``result_meta`` for ``f``; ``dtype``
    also as TorchScript's ScalarType code), if any.

        >>> padded = torch.zeros(3, 4)[:, :3]                     # x.view(-1) raises
        >>> check_view_of_result(padded, [-1], torch.float64)     # x.double() is contiguous
        >>> check_view_of_result(padded.t(), [-1], None)          # x * 2 has strides (1, 3)
        Traceback (most recent call last):
        RuntimeError: view size is not compatible with input tensor's size and stride ...
    """
    if x.is_contiguous():
        return      # f(x) is contiguous as well: every view of its numel works
    key = (tuple(x.shape), x.stride(), x.dtype, tuple(sizes), dtype)
    if key in _CHECKED:
        return
    result_meta(x, _DTYPES.get(dtype, dtype) if isinstance(dtype, int) else dtype).view(sizes)
    if len(_CHECKED) < 1024:
        _CHECKED[key] = True


class _DenseUnbind(torch.autograd.Function):
    """``x.unbind(dim)`` whose backward writes the gradient of ``x`` in ``x``'s own layout (the
    pieces' gradients copied into it) instead of stacking them contiguously: see
    ``passes/unbind_grad.py``."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, dim: int):
        ctx.set_materialize_grads(False)
        # x's strides where they are dense and non-overlapping (a permuted view of a contiguous
        # tensor: empty_like keeps them), else contiguous
        like = torch.empty_like(x, device="meta")
        ctx.layout = (tuple(like.shape), like.stride(), x.dtype, x.device)
        ctx.dim = dim
        return tuple(x.unbind(dim))

    @staticmethod
    def backward(ctx, *grads):
        if all(g is None for g in grads):
            return None, None
        shape, stride, dtype, device = ctx.layout
        grad = torch.empty_strided(shape, stride, dtype=dtype, device=device)
        for i, g in enumerate(grads):
            piece = grad.select(ctx.dim, i)
            if g is None:
                piece.zero_()       # an unused piece: eager's stack has its zeros too
            else:
                piece.copy_(g)
        return grad, None


def dense_unbind(x: torch.Tensor, dim: int) -> list[torch.Tensor]:
    """``graphfuser::dense_unbind``: ``x.unbind(dim)``; under grad (``x`` requiring it), the
    gradient of ``x`` is written in ``x``'s layout, one copy per piece, where eager's
    ``unbind`` backward stacks the pieces' gradients contiguously and a permuted ``x`` (a
    fused qkv projection's heads) then copies the stack again to undo the permute.

        >>> x = torch.randn(2, 5, 3, 4).permute(2, 0, 1, 3).requires_grad_()
        >>> [t.shape for t in dense_unbind(x, 0)] == [t.shape for t in x.unbind(0)]
        True
    """
    dim = dim + x.dim() if dim < 0 else dim
    if torch.is_grad_enabled() and x.requires_grad and 0 <= dim < x.dim():
        return list(_DenseUnbind.apply(x, dim))
    return list(x.unbind(dim))
