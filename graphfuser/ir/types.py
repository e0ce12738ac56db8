"""Value types of the IR: plain named types (``int``, ``float``, ``Tensor[]`` ...) and TensorType.

A ``TensorType`` is what profiling learns about a tensor value and what a guard checks::

    Float(2, *, 512, strides=[*, 512, 1], requires_grad=0, device=cuda:0)

- ``sizes``: one int per dim; ``-1`` (printed ``*``) is symbolic, ``1`` is a broadcast dim.
- ``strides``: one int per dim, ``-1`` where runs disagreed.
- ``stride_order``: the non-broadcast dims from outermost (largest stride) to innermost.
- ``contiguity``: aligned with ``stride_order``; True where the dim is dense with respect to the
  next inner dim of the order (innermost: stride 1).

When sizes and strides are fully known the last two follow from them and are not printed; when
they are not, they are printed as extra fields so the printer/parser round trip is exact.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch

DTYPE_NAMES: dict[torch.dtype, str] = {
    torch.float32: "Float", torch.float16: "Half", torch.bfloat16: "BFloat16", torch.float64: "Double",
    torch.int32: "Int", torch.int64: "Long", torch.int16: "Short", torch.int8: "Char",
    torch.uint8: "Byte", torch.bool: "Bool", torch.complex64: "ComplexFloat",
    torch.complex128: "ComplexDouble",
}
NAME_DTYPES = {v: k for k, v in DTYPE_NAMES.items()}


@dataclass(frozen=True)
class Type:
    """A non-tensor type, named as TorchScript prints it: int, float, bool, str, NoneType, int[] ..."""

    name: str

    def __str__(self) -> str:
        return self.name

    @property
    def is_tensor(self) -> bool:
        return self.name == "Tensor"


INT, FLOAT, BOOL, STR, NONE = Type("int"), Type("float"), Type("bool"), Type("str"), Type("NoneType")


def layout_of(sizes: Sequence[int], strides: Sequence[int]) -> tuple[tuple[int, ...], tuple[bool, ...]]:
    """Stride order (outer -> inner, non-broadcast dims only) and contiguity of a concrete layout."""
    dims = [d for d in range(len(sizes)) if sizes[d] != 1]
    order = tuple(sorted(dims, key=lambda d: (-strides[d], d)))
    contig = []
    for k, d in enumerate(order):
        expected = strides[order[k + 1]] * sizes[order[k + 1]] if k + 1 < len(order) else 1
        contig.append(strides[d] == expected)
    return order, tuple(contig)


def full_stride_order(order: Sequence[int], rank: int) -> list[int]:
    """All dims outer -> inner: a stride order (non-broadcast dims) with the size-1 dims slotted
    in by position, as outputs are allocated."""
    full = list(order)
    for d in range(rank):
        if d in full:
            continue
        later = [i for i, e in enumerate(full) if e > d]
        full.insert(later[0] if later else len(full), d)
    return full


@dataclass(frozen=True)
class TensorType(Type):
    name: str = "Tensor"
    dtype: Optional[torch.dtype] = None
    sizes: Optional[tuple[int, ...]] = None
    strides: Optional[tuple[int, ...]] = None
    stride_order: Optional[tuple[int, ...]] = None
    contiguity: Optional[tuple[bool, ...]] = None
    device: Optional[torch.device] = None
    requires_grad: Optional[bool] = None

    @staticmethod
    def of(t: torch.Tensor) -> "TensorType":
        """The complete type of a concrete tensor. ``requires_grad`` is the tensor's flag under
        the current grad mode, as TorchScript's profiling records it: a parameter read under
        ``torch.no_grad()`` does not require grad, so eval code fuses as plain groups."""
        sizes, strides = tuple(t.shape), tuple(t.stride())
        order, contig = layout_of(sizes, strides)
        return TensorType(dtype=t.dtype, sizes=sizes, strides=strides, stride_order=order,
                          contiguity=contig, device=t.device,
                          requires_grad=t.requires_grad and torch.is_grad_enabled())

    @property
    def rank(self) -> Optional[int]:
        return None if self.sizes is None else len(self.sizes)

    @property
    def complete(self) -> bool:
        """Everything a kernel specializes on is known."""
        return (self.dtype is not None and self.sizes is not None and self.device is not None
                and self.stride_order is not None and self.contiguity is not None)

    @property
    def broadcast_dims(self) -> tuple[int, ...]:
        return tuple(i for i, s in enumerate(self.sizes or ()) if s == 1)

    def with_dtype(self, dtype: torch.dtype) -> "TensorType":
        return _replace(self, dtype=dtype)

    def specialization(self) -> tuple:
        """What kernels specialize on and guards check (never concrete sizes)."""
        return (self.dtype, self.device, self.rank, self.broadcast_dims, self.stride_order,
                self.contiguity, bool(self.requires_grad))

    def merge(self, other: "TensorType") -> "TensorType":
        """Combine two profiles of one value: changed dims become symbolic, layout must hold on both."""
        if self.dtype != other.dtype or self.device != other.device or self.rank != other.rank:
            return TensorType(dtype=self.dtype if self.dtype == other.dtype else None,
                              device=self.device if self.device == other.device else None)
        sizes = tuple(a if a == b else -1 for a, b in zip(self.sizes, other.sizes))
        strides = tuple(a if a == b else -1 for a, b in zip(self.strides, other.strides))
        order = contig = None
        non_broadcast = {i for i, s in enumerate(sizes) if s != 1}
        if (self.stride_order is not None and self.stride_order == other.stride_order
                and set(self.stride_order) == non_broadcast):
            order = self.stride_order
            contig = tuple(a and b for a, b in zip(self.contiguity, other.contiguity))
        return TensorType(dtype=self.dtype, sizes=sizes, strides=strides, stride_order=order,
                          contiguity=contig, device=self.device,
                          requires_grad=self.requires_grad if self.requires_grad == other.requires_grad else None)

    def __str__(self) -> str:
        if self.dtype is None and self.sizes is None:
            return "Tensor"
        head = DTYPE_NAMES.get(self.dtype, "Tensor")
        parts = []
        if self.sizes is not None:
            parts += ["*" if s == -1 else str(s) for s in self.sizes]
            if self.strides is not None:
                parts.append("strides=[" + ", ".join("*" if s == -1 else str(s) for s in self.strides) + "]")
            derived = None
            if self.strides is not None and -1 not in self.strides and -1 not in self.sizes:
                derived = layout_of(self.sizes, self.strides)
            if derived != (self.stride_order, self.contiguity) and self.stride_order is not None:
                parts.append("stride_order=[" + ", ".join(map(str, self.stride_order)) + "]")
                parts.append("contiguity=[" + ", ".join(str(int(c)) for c in self.contiguity) + "]")
        if self.requires_grad is not None:
            parts.append(f"requires_grad={int(self.requires_grad)}")
        if self.device is not None:
            parts.append(f"device={self.device}")
        return f"{head}({', '.join(parts)})"


def _replace(t: TensorType, **kw) -> TensorType:
    from dataclasses import replace

    return replace(t, **kw)


TENSOR = TensorType()
