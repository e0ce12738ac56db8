"""Frontends: TorchScript capture (``torchscript``) and nvFuser's Python frontend.

    >>> from graphfuser.frontend import Fusion, FusionDefinition, DataType, ParallelType, ComputeAtMode

The Python frontend's names load on first use: ``import graphfuser`` does not load them.
"""
from __future__ import annotations

from typing import Any

_EXPORTS = {
    "Fusion": ".fusion", "FusionDefinition": ".fusion_definition", "DataType": "..ops.datatype",
    "ParallelType": "..codegen.schedule", "ComputeAtMode": ".scheduling", "ScheduleError": "..codegen.schedule",
    "DefinitionError": ".opcall", "Tensor": ".fusion_definition", "Scalar": ".fusion_definition",
    "python_definition": "..ops.python_definition", "reset_fusion_cache": ".fusion",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'graphfuser.frontend' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_EXPORTS[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
