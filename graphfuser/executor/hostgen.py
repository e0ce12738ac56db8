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
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import torch

from ..ir.graph import Block, Graph, Node, Value
from .builtins import PRIM_TEMPLATES, AtenCall, resolve_aten

_DTYPE_CODE = {dt: i for i, dt in enumerate([
    torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.float32,
    torch.float64, torch.complex32, torch.complex64, torch.complex128, torch.bool, torch.qint8,
    torch.quint8, torch.qint32, torch.bfloat16])}


class ScriptError(RuntimeError):
    """Raised by ``prim::RaiseException`` in a scripted function."""


def _raise(msg="", *args):
    raise ScriptError(str(msg))


def _fmt(fmt, *args):
    return fmt.replace("{}", "{}").format(*args)


def _range_length(lo, hi, step):
    if step > 0:
        return max(0, (hi - lo + step - 1) // step)
    return max(0, (lo - hi - step - 1) // -step)


def _dict_of(*kv):
    return {kv[i]: kv[i + 1] for i in range(0, len(kv), 2)}


def _warn(msg, *args):
    warnings.warn(str(msg))


BASE_NAMESPACE = {
    "_torch": torch, "_math": math, "_DTYPE_CODE": _DTYPE_CODE, "_raise": _raise, "_fmt": _fmt,
    "_range_length": _range_length, "_dict_of": _dict_of, "_warn": _warn,
}
_SIMPLE = (int, bool, str, type(None))
_MAX_TRIP = 2 ** 63 - 1


@dataclass
class HostProgram:
    fn: Callable
    source: str
    slots: list[Value] = field(default_factory=list)   # profiling slot -> value


class _Gen:
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
        if isinstance(value, _SIMPLE) or (isinstance(value, float) and math.isfinite(value)):
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
        kind = node.kind
        if self.scalars is not None:
            self.record_scalars(node, indent)
        a = self.args(node)
        fn = self.special(node)
        if fn is not None:
            name = self.bind(fn, "f")
            if node.outputs:
                lhs = f"({self.outs(node)},)" if len(node.outputs) > 1 or kind.endswith("Group") or \
                    kind == "prim::FallbackGraph" else self.outs(node)
                self.emit(indent, f"{lhs} = {name}({', '.join(a)})")
            else:
                self.emit(indent, f"{name}({', '.join(a)})")
            self.record(node, indent)
            return
        if kind == "prim::Constant":
            self.emit(indent, f"{self.outs(node)} = {self.literal(node.attrs.get('value'))}")
        elif kind == "prim::GetAttr":
            self.emit(indent, f"{self.outs(node)} = {a[0]}.{node.attrs['name']}")
        elif kind == "prim::SetAttr":
            self.emit(indent, f"setattr({a[0]}, {node.attrs['name']!r}, {a[1]})")
        elif kind in ("prim::TupleUnpack", "prim::ListUnpack"):
            self.emit(indent, f"{self.outs(node)}, = {a[0]}" if len(node.outputs) == 1 else f"{self.outs(node)} = {a[0]}")
        elif kind == "prim::If":
            self.emit(indent, f"if {a[0]}:")
            for i, b in enumerate(node.blocks):
                if i == 1:
                    self.emit(indent, "else:")
                self.block(b, indent + 1)
                if node.outputs:
                    self.emit(indent + 1, f"{self.outs(node)} = {', '.join(self.var(r) for r in b.returns)}")
        elif kind == "prim::Loop":
            self.loop(node, a, indent)
        elif kind.startswith("aten::"):
            call = node.schema if isinstance(node.schema, AtenCall) else \
                resolve_aten(kind, None, any(v.type.is_tensor for v in node.inputs))
            if call is None:
                raise RuntimeError(f"cannot execute {node.where()}")
            self.emit(indent, self.aten(node, call, a))
        elif kind in PRIM_TEMPLATES and PRIM_TEMPLATES[kind]:
            text = self.fill(PRIM_TEMPLATES[kind], a)
            self.emit(indent, f"{self.outs(node)} = {text}" if node.outputs else text)
        else:
            raise RuntimeError(f"the host program cannot execute {node.where()}")
        self.record(node, indent)

    @staticmethod
    def fill(template: str, a: list[str]) -> str:
        return template.replace("{args}", ", ".join(a)).format(*a) if "{args}" in template else template.format(*a)

    def aten(self, node: Node, call: AtenCall, a: list[str]) -> str:
        lhs = f"{self.outs(node)} = " if node.outputs else ""
        if call.template is not None:
            if "{args}" in call.template:
                rest = ", ".join(a[1:]) if call.template.startswith("_fmt") else ", ".join(a)
                return lhs + call.template.replace("{args}", rest).format(*a)
            return lhs + call.template.format(*a)
        op = self.bind(call.op, "op")
        pos, kw = [], []
        for i, s in enumerate(a):
            name = call.kwarg_names[i] if i < len(call.kwarg_names) else None
            (kw.append(f"{name}={s}") if name else pos.append(s))
        return f"{lhs}{op}({', '.join(pos + kw)})"

    def loop(self, node: Node, a: list[str], indent: int) -> None:
        body = node.blocks[0]
        trip, cond, init = a[0], a[1], a[2:]
        it = self.var(body.params[0])
        carried = [self.var(p) for p in body.params[1:]]
        cv = f"c{len(self.names)}"
        self.emit(indent, f"{it} = 0")
        self.emit(indent, f"{cv} = {cond}")
        if carried:
            self.emit(indent, f"{', '.join(carried)}, = {', '.join(init)},")
        bounded = not (node.inputs[0].is_constant and node.inputs[0].constant() == _MAX_TRIP)
        self.emit(indent, f"while {cv}" + (f" and {it} < {trip}:" if bounded else ":"))
        self.block(body, indent + 1)
        rets = [self.var(r) for r in body.returns]
        self.emit(indent + 1, f"{', '.join([cv] + carried)}, = {', '.join(rets)},")
        self.emit(indent + 1, f"{it} += 1")
        if node.outputs:
            self.emit(indent, f"{self.outs(node)}, = {', '.join(carried)},")


def build_program(graph: Graph, name: str = "forward",
                  special: Callable[[Node], Optional[Callable]] = lambda n: None,
                  profiler: Optional[Callable[[int, Any], None]] = None, tuple_return: bool = False,
                  scalars: Optional[Callable[[Node], Sequence[Value]]] = None) -> HostProgram:
    """Compile ``graph`` to a Python function taking the graph inputs positionally.

    ``special(node)`` supplies callables for fusion groups, guards and fallbacks; ``profiler``
    (when given) receives ``(slot, value)`` for every tensor value, inputs included, and, just
    before each node, for the non-tensor values ``scalars(node)`` names.
    """
    gen = _Gen(special, profiler is not None, scalars)
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
    if tuple_return:
        gen.emit(1, f"return ({', '.join(outs)},)")
    else:
        gen.emit(1, f"return {outs[0]}" if len(outs) == 1 else f"return ({', '.join(outs)})")
    source = "\n".join(gen.lines) + "\n"
    code = compile(source, f"<graphfuser host program {name}>", "exec")
    exec(code, gen.ns)
    return HostProgram(gen.ns[name], source, gen.slots)
