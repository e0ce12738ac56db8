"""``DataType``: nvFuser's names for element types, and their torch / IR / ScalarType equivalents.

Example::

    >>> DataType.Half.torch
    torch.float16
    >>> DataType.of(torch.float32)
    DataType.Float
    >>> DataType.Double.scalar_type
    'float'
"""
from __future__ import annotations

import enum
from typing import Any, Union

import torch

from .aten import DTYPE_CODES as _DTYPE_CODE


class DataType(enum.Enum):
    """Element types, spelled as nvFuser's Python frontend spells them.

    ``Int`` is 64-bit and ``Int32`` 32-bit, as in nvFuser; ``Short``, ``Char`` and ``Byte`` are
    graphfuser additions so that every dtype a scripted group can fuse prints and round-trips.
    """

    Double = "Double"
    Float = "Float"
    Half = "Half"
    BFloat16 = "BFloat16"
    Int = "Int"
    Int32 = "Int32"
    Short = "Short"
    Char = "Char"
    Byte = "Byte"
    Bool = "Bool"
    ComplexFloat = "ComplexFloat"
    ComplexDouble = "ComplexDouble"
    Null = "Null"

    def __repr__(self) -> str:
        return f"DataType.{self.value}"

    __str__ = __repr__

    @property
    def torch(self) -> torch.dtype:
        """The torch dtype (``Null`` has none)."""
        if self is DataType.Null:
            raise ValueError("DataType.Null has no torch dtype")
        return _TO_TORCH[self]

    @property
    def scalar_type(self) -> str:
        """The IR type name of a scalar of this type: ``int``, ``float``, ``bool`` or ``complex``."""
        dt = self.torch
        if dt == torch.bool:
            return "bool"
        if dt.is_complex:
            return "complex"
        return "float" if dt.is_floating_point else "int"

    @property
    def code(self) -> int:
        """TorchScript's ScalarType number (what ``aten::to`` and ``dtype=`` arguments carry)."""
        return _DTYPE_CODE[self.torch]

    @staticmethod
    def of(dtype: Union["DataType", torch.dtype]) -> "DataType":
        """The DataType of a torch dtype (a DataType is returned unchanged)."""
        if isinstance(dtype, DataType):
            return dtype
        if dtype not in _FROM_TORCH:
            raise ValueError(f"no DataType for {dtype}")
        return _FROM_TORCH[dtype]

    @staticmethod
    def of_code(code: int) -> "DataType":
        """The DataType of a TorchScript ScalarType number."""
        for dt, c in _DTYPE_CODE.items():
            if c == code and dt in _FROM_TORCH:
                return _FROM_TORCH[dt]
        raise ValueError(f"no DataType for ScalarType {code}")

    @staticmethod
    def of_scalar(value: Any) -> "DataType":
        """The DataType a Python constant is inferred to have (Bool / Int / Double / ComplexDouble)."""
        if isinstance(value, bool):
            return DataType.Bool
        if isinstance(value, int):
            return DataType.Int
        if isinstance(value, float):
            return DataType.Double
        if isinstance(value, complex):
            return DataType.ComplexDouble
        raise TypeError(f"a constant is a bool, int, float or complex, got {type(value).__name__}")


_TO_TORCH = {
    DataType.Double: torch.float64, DataType.Float: torch.float32, DataType.Half: torch.float16,
    DataType.BFloat16: torch.bfloat16, DataType.Int: torch.int64, DataType.Int32: torch.int32,
    DataType.Short: torch.int16, DataType.Char: torch.int8, DataType.Byte: torch.uint8, DataType.Bool: torch.bool,
    DataType.ComplexFloat: torch.complex64, DataType.ComplexDouble: torch.complex128,
}
_FROM_TORCH = {v: k for k, v in _TO_TORCH.items()}

# IR scalar type name -> the DataType a python_definition prints for it
SCALAR_DATATYPES = {"float": DataType.Double, "int": DataType.Int, "bool": DataType.Bool,
                    "complex": DataType.ComplexDouble}
