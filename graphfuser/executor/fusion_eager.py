"""The eager runner: a subgraph executed op by op through aten (fallbacks and unfused paths)."""
from __future__ import annotations

from typing import Callable

from ..ir.graph import Graph
from .hostgen import build_program


def eager_runner(subgraph: Graph, name: str) -> Callable[..., tuple]:
    """Run a group's subgraph node by node through eager aten ops (the fallback path)."""
    return build_program(subgraph, name=name, tuple_return=True).fn
