"""Host programs: a Graph turned into straight-line Python source, compiled once with ``exec``.

Every call after profiling runs such a program: guards, fusion-group launches, fallbacks and the
unfused aten ops, with no per-node interpreter. Profiling runs use the same generator with a
``_P(slot, value)`` call after every tensor-producing node.

Example: the optimized graph of ``(x + 1).relu()`` becomes::

    def forward(v0):
        v1 = _guard0(v0)
        if v1:
            (v2,) = _group0(v0)
        else:
            (v2,) = _fallback0(v0)
        return v2
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import torch

from ..ir.graph import Block, Graph, Node, Value
from ..ir.implicit import implicit_tensors
from ..ops.aten import DTYPE_CODES, RUNTIME
from ..runtime.pycode import define
from .handlers import handler_for

_DTYPE_CODE = DTYPE_CODES  # re-exported: the frontend maps dtypes to TorchScript's codes with it
ScriptError = torch.jit.Error   # what prim::RaiseException raises, as TorchScript does


BASE_NAMESPACE = dict(RUNTIME)
_SIMPLE = (int, bool, str, type(None))


@dataclass
class HostProgram:
    fn: Callable
    source: str
    slots: list[Value] = field(default_factory=list)   # profiling slot -> value


class _Gen:
    """Emits one host program: names values, binds constants and callables into the program's
    namespace, and asks the handler table (``handlers.HANDLERS``) how to emit each node."""

    def __init__(self, special: Callable[[Node], Optional[Callable]], profile: bool,
                 scalars: Optional[Callable[[Node], Sequence[Value]]] = None) -> None:
        self.lines: list[str] = []
        self.ns: dict[str, Any] = dict(BASE_NAMESPACE)
        self.names: dict[Value, str] = {}
        self.special = special
        self.profile = profile
        self.scalars = scalars if profile else None
        self.scalar_slots: dict[Value, int] = {}
        self.slots: list[Value] = []
        self.counter = 0
        # the live nn.Module behind a value (the root module and its GetAttr chains): tells the
        # GetAttr handler which of the module's dicts holds an attribute
        self.live: dict[Value, Any] = {}
        # number-typed values that may hold a tensor an implicit conversion handed on
        self.implicit: frozenset[Value] = frozenset()

    def var(self, v: Value) -> str:
        if v not in self.names:
            self.names[v] = f"v{len(self.names)}"
        return self.names[v]

    def bind(self, obj: Any, prefix: str) -> str:
        self.counter += 1
        name = f"_{prefix}{self.counter}"
        self.ns[name] = obj
        return name

    def literal(self, value: Any) -> str:
        # exact types only: a str or int subclass (timm's ``Format(str, Enum)``) has a repr that
        # is not Python source, so it is bound like any other object
        if type(value) in _SIMPLE or (type(value) is float and math.isfinite(value)):
            return repr(value)
        return self.bind(value, "k")

    def emit(self, indent: int, text: str) -> None:
        self.lines.append("    " * indent + text)

    def outs(self, node: Node) -> str:
        return ", ".join(self.var(o) for o in node.outputs)

    def args(self, node: Node) -> list[str]:
        return [self.var(v) for v in node.inputs]

    def block(self, block: Block, indent: int) -> None:
        start = len(self.lines)
        if self.profile:
            # Loop-carried values are block parameters: profile them each iteration, or
            # nothing in a loop body that reads them could ever fuse.
            for p in block.params:
                if p.type.is_tensor:
                    self.slots.append(p)
                    self.emit(indent, f"_P({len(self.slots) - 1}, {self.var(p)})")
        for node in block.nodes:
            self.node(node, indent)
        if len(self.lines) == start:
            self.emit(indent, "pass")

    def record(self, node: Node, indent: int) -> None:
        if not self.profile:
            return
        for o in node.outputs:
            if o.type.is_tensor:
                self.slots.append(o)
                self.emit(indent, f"_P({len(self.slots) - 1}, {self.var(o)})")

    def record_scalars(self, node: Node, indent: int) -> None:
        """``_P`` for the profiled scalar arguments of ``node``, one slot per value."""
        for v in self.scalars(node):
            slot = self.scalar_slots.get(v)
            if slot is None:
                self.slots.append(v)
                slot = self.scalar_slots[v] = len(self.slots) - 1
            self.emit(indent, f"_P({slot}, {self.var(v)})")

    def node(self, node: Node, indent: int) -> None:
        if self.scalars is not None:
            self.record_scalars(node, indent)
        a = self.args(node)
        fn = self.special(node)
        if fn is not None:
            self.call_special(node, fn, a, indent)
        else:
            handler = handler_for(node.kind)
            if handler is None:
                raise RuntimeError(f"the host program cannot execute {node.where()}")
            handler(self, node, a, indent)
        self.record(node, indent)

    def call_special(self, node: Node, fn: Callable, a: list[str], indent: int) -> None:
        name = self.bind(fn, "f")
        if node.outputs:
            kind = node.kind
            lhs = f"({self.outs(node)},)" if len(node.outputs) > 1 or kind.endswith("Group") or \
                kind == "prim::FallbackGraph" else self.outs(node)
            self.emit(indent, f"{lhs} = {name}({', '.join(a)})")
        else:
            self.emit(indent, f"{name}({', '.join(a)})")

    def assign(self, node: Node, indent: int, expr: str) -> None:
        """``outs = expr``, or the bare expression for a node without outputs."""
        self.emit(indent, f"{self.outs(node)} = {expr}" if node.outputs else expr)

    @staticmethod
    def fill(template: str, a: list[str]) -> str:
        return template.replace("{args}", ", ".join(a)).format(*a) if "{args}" in template else template.format(*a)


def build_program(graph: Graph, name: str = "forward",
                  special: Callable[[Node], Optional[Callable]] = lambda n: None,
                  profiler: Optional[Callable[[int, Any], None]] = None, tuple_return: bool = False,
                  scalars: Optional[Callable[[Node], Sequence[Value]]] = None,
                  module: Optional[torch.nn.Module] = None) -> HostProgram:
    """Compile ``graph`` to a Python function taking the graph inputs positionally.

    ``special(node)`` supplies callables for fusion groups, guards and fallbacks; ``profiler``
    (when given) receives ``(slot, value)`` for every tensor value, inputs included, and, just
    before each node, for the non-tensor values ``scalars(node)`` names. ``module``: the module
    every call passes as the first input (``self``); its submodules, parameters and buffers are
    then read from the dict that holds them, not through ``nn.Module.__getattr__`` (0.5 us each).
    """
    gen = _Gen(special, profiler is not None, scalars)
    gen.implicit = implicit_tensors(graph)
    if module is not None and graph.inputs:
        gen.live[graph.inputs[0]] = module
    params = [gen.var(v) for v in graph.inputs]
    gen.emit(0, f"def {name}({', '.join(params)}):")
    if profiler is not None:
        gen.ns["_P"] = profiler
        for v in graph.inputs:
            if v.type.is_tensor:
                gen.slots.append(v)
                gen.emit(1, f"_P({len(gen.slots) - 1}, {gen.var(v)})")
    gen.block(graph.block, 1)
    outs = [gen.var(r) for r in graph.outputs]
    if not outs:
        gen.emit(1, "return ()" if tuple_return else "return None")
    elif tuple_return:
        gen.emit(1, f"return ({', '.join(outs)},)")
    else:
        gen.emit(1, f"return {outs[0]}" if len(outs) == 1 else f"return ({', '.join(outs)})")
    source = "\n".join(gen.lines) + "\n"
    define(source, f"<graphfuser host program {name}>", gen.ns)
    return HostProgram(gen.ns[name], source, gen.slots)
