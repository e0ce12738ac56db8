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
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import torch

from ..ir.graph import Block, Graph, Node, Value
from .builtins import DTYPE_CODES, PRIM_TEMPLATES, RUNTIME, AtenCall, resolve_aten

_DTYPE_CODE = DTYPE_CODES  # re-exported: the frontend maps dtypes to TorchScript's codes with it


def _raise(msg: Any = "", cls: Optional[str] = None, where: str = "") -> None:
    """``prim::RaiseException``: what the scripted function raises, ``torch.jit.Error`` whose
    message ends with the Python exception's qualified name and message."""
    name = cls or "builtins.Exception"
    raise torch.jit.Error("The following operation failed in the TorchScript interpreter.\n"
                          + (f"Traceback of TorchScript (most recent call last):\n  {where}\n" if where else "")
                          + f"{name}: {msg}\n")


ScriptError = torch.jit.Error
_PY_TYPES = {"Tensor": (torch.Tensor,), "int": (int,), "float": (float,), "bool": (bool,), "str": (str,),
             "complex": (complex,), "NoneType": (type(None),), "Device": (torch.device,)}
_GENERIC_TYPES = {"List": (list,), "Tuple": (tuple,), "Dict": (dict,)}


def _isinstance_check(types: Sequence[str]) -> Callable[[Any], bool]:
    """``prim::isinstance[types=...]``: the predicate for TorchScript's type names. TorchScript's
    ``int`` does not include ``bool``, unlike Python's."""
    classes: list[type] = []
    for t in types:
        m = re.match(r"^Optional\[(.*)\]$", t)
        if m:
            classes.append(type(None))
            t = m.group(1)
        base = t.split("[", 1)[0]
        found = _PY_TYPES.get(t) or _GENERIC_TYPES.get(base)
        if found is None:
            raise NotImplementedError(f"isinstance check against {t}")
        classes.extend(found)
    exact_int = int in classes and bool not in classes
    allowed = tuple(classes)

    def check(x: Any) -> bool:
        return isinstance(x, allowed) and not (exact_int and isinstance(x, bool))
    return check


BASE_NAMESPACE = dict(RUNTIME, _raise=_raise)
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
        if not node.outputs:
            self.emit(indent, expr)
        elif len(node.outputs) == 1:
            self.emit(indent, f"{self.outs(node)} = {expr}")
        else:
            self.emit(indent, f"{self.outs(node)} = {expr}")

    @staticmethod
    def fill(template: str, a: list[str]) -> str:
        return template.replace("{args}", ", ".join(a)).format(*a) if "{args}" in template else template.format(*a)


# -- the table: node kind -> how the host program emits it --------------------------------------
# Every handler is ``(gen, node, argument names, indent) -> None``. aten ops (and other operator
# namespaces) resolve through ``builtins.resolve_aten``; prim ops spelled as one expression are
# ``builtins.PRIM_TEMPLATES``; the structural kinds are below.
Handler = Callable[[_Gen, Node, list[str], int], None]


def _constant(gen: _Gen, node: Node, a: list[str], indent: int) -> None:
    gen.emit(indent, f"{gen.outs(node)} = {gen.literal(node.attrs.get('value'))}")


def _get_attr(gen: _Gen, node: Node, a: list[str], indent: int) -> None:
    # getattr, never ``a.name``: attribute names need not be identifiers (nn.Sequential's "0")
    gen.emit(indent, f"{gen.outs(node)} = getattr({a[0]}, {node.attrs['name']!r})")


def _set_attr(gen: _Gen, node: Node, a: list[str], indent: int) -> None:
    gen.emit(indent, f"setattr({a[0]}, {node.attrs['name']!r}, {a[1]})")


def _unpack(gen: _Gen, node: Node, a: list[str], indent: int) -> None:
    if not node.outputs:
        gen.emit(indent, f"() = {a[0]}")
    else:
        gen.emit(indent, f"{gen.outs(node)}, = {a[0]}")


def _tuple(gen: _Gen, node: Node, a: list[str], indent: int) -> None:
    gen.emit(indent, f"{gen.outs(node)} = ({', '.join(a)},)" if a else f"{gen.outs(node)} = ()")


def _if(gen: _Gen, node: Node, a: list[str], indent: int) -> None:
    gen.emit(indent, f"if {a[0]}:")
    for i, b in enumerate(node.blocks):
        if i == 1:
            gen.emit(indent, "else:")
        gen.block(b, indent + 1)
        if node.outputs:
            gen.emit(indent + 1, f"{gen.outs(node)}, = {', '.join(gen.var(r) for r in b.returns)},")


def _loop(gen: _Gen, node: Node, a: list[str], indent: int) -> None:
    body = node.blocks[0]
    trip, cond, init = a[0], a[1], a[2:]
    it = gen.var(body.params[0])
    carried = [gen.var(p) for p in body.params[1:]]
    cv = f"c{len(gen.names)}"
    gen.emit(indent, f"{it} = 0")
    gen.emit(indent, f"{cv} = {cond}")
    if carried:
        gen.emit(indent, f"{', '.join(carried)}, = {', '.join(init)},")
    bounded = not (node.inputs[0].is_constant and node.inputs[0].constant() == _MAX_TRIP)
    gen.emit(indent, f"while {cv}" + (f" and {it} < {trip}:" if bounded else ":"))
    gen.block(body, indent + 1)
    rets = [gen.var(r) for r in body.returns]
    gen.emit(indent + 1, f"{', '.join([cv] + carried)}, = {', '.join(rets)},")
    gen.emit(indent + 1, f"{it} += 1")
    if node.outputs:
        gen.emit(indent, f"{gen.outs(node)}, = {', '.join(carried)},")


def _raise_exception(gen: _Gen, node: Node, a: list[str], indent: int) -> None:
    where = gen.literal(node.source or "")
    gen.emit(indent, f"_raise({', '.join(a + ([] if len(a) > 1 else ['None']))}, {where})")


def _isinstance(gen: _Gen, node: Node, a: list[str], indent: int) -> None:
    check = gen.bind(_isinstance_check(node.attrs["types"]), "isinstance")
    gen.emit(indent, f"{gen.outs(node)} = {check}({a[0]})")


def _python_class(qualified: str) -> type:
    """The Python class a TorchScript class type was compiled from (``__torch__.a.b.C`` -> a.b.C)."""
    import importlib

    parts = qualified.removeprefix("__torch__.").split(".")
    for i in range(len(parts) - 1, 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for p in parts[i:]:
            obj = getattr(obj, p)
        return obj
    raise NotImplementedError(f"no Python class for {qualified}")


def _create_object(gen: _Gen, node: Node, a: list[str], indent: int) -> None:
    # an instance without __init__: the inlined __init__ follows as prim::SetAttr nodes
    cls = gen.bind(_python_class(node.outputs[0].type.name), "cls")
    gen.emit(indent, f"{gen.outs(node)} = {cls}.__new__({cls})")


def _enter(gen: _Gen, node: Node, a: list[str], indent: int) -> None:
    gen.assign(node, indent, f"{a[0]}.__enter__()")


def _exit(gen: _Gen, node: Node, a: list[str], indent: int) -> None:
    gen.assign(node, indent, f"{a[0]}.__exit__(None, None, None)")


def _call_method(gen: _Gen, node: Node, a: list[str], indent: int) -> None:
    # a method that was not inlined (an interface call): the object's own method, as eager runs it
    gen.assign(node, indent, f"getattr({a[0]}, {node.attrs['name']!r})({', '.join(a[1:])})")


def _call_function(gen: _Gen, node: Node, a: list[str], indent: int) -> None:
    gen.assign(node, indent, f"{a[0]}({', '.join(a[1:])})")


def _aten(gen: _Gen, node: Node, a: list[str], indent: int) -> None:
    call = node.schema if isinstance(node.schema, AtenCall) else \
        resolve_aten(node.kind, None, any(v.type.is_tensor for v in node.inputs))
    if call is None:
        raise RuntimeError(f"cannot execute {node.where()}")
    if call.template is not None:
        expr = gen.fill(call.template, a)
    else:
        op = gen.bind(call.op, "op")
        pos, kw = [], []
        for i, s in enumerate(a):
            name = call.kwarg_names[i] if i < len(call.kwarg_names) else None
            (kw.append(f"{name}={s}") if name else pos.append(s))
        expr = f"{op}({', '.join(pos + kw)})"
    if len(node.outputs) > 1 and call.template is None:
        gen.emit(indent, f"{gen.outs(node)}, = {expr}")
    else:
        gen.assign(node, indent, expr)


def _template(template: str) -> Handler:
    def emit(gen: _Gen, node: Node, a: list[str], indent: int) -> None:
        gen.assign(node, indent, gen.fill(template, a))
    return emit


HANDLERS: dict[str, Handler] = {
    "prim::Constant": _constant, "prim::GetAttr": _get_attr, "prim::SetAttr": _set_attr,
    "prim::TupleUnpack": _unpack, "prim::ListUnpack": _unpack, "prim::TupleConstruct": _tuple,
    "prim::If": _if, "prim::Loop": _loop, "prim::RaiseException": _raise_exception,
    "prim::isinstance": _isinstance, "prim::CallMethod": _call_method, "prim::CallFunction": _call_function,
    "prim::CreateObject": _create_object, "prim::Enter": _enter, "prim::Exit": _exit,
    **{kind: _template(t) for kind, t in PRIM_TEMPLATES.items()},
}
_OPERATOR_NAMESPACES = ("aten::", "torchvision::", "quantized::", "prims::")


def handler_for(kind: str) -> Optional[Handler]:
    """The table's handler for ``kind``; operator namespaces share the aten handler."""
    handler = HANDLERS.get(kind)
    if handler is None and kind.startswith(_OPERATOR_NAMESPACES):
        return _aten
    return handler


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
