"""The host program's handler table: node kind -> how the host program emits it.

This is to node kinds what the op table is to aten ops: one entry per kind that scripted models
emit (collected from the torch.jit.script graphs of torchvision, timm and torch.nn, see
tests/models/zoo_node_kinds.json), each a function ``(gen, node, argument names, indent)`` that
emits Python lines through the generator. aten ops (and other operator namespaces) share one
handler that resolves through ``builtins.resolve_aten``; prim ops spelled as one expression come
from ``builtins.PRIM_TEMPLATES``; the structural kinds (attributes, unpacking, control flow,
calls, exceptions, objects) are written out below. A kind with no entry makes the capture raise
``UnsupportedError``, and the graph runs through torch.jit.script instead.
"""
from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

import torch

from ..ir.graph import Node, Value
from ..ir.implicit import reads_implicit_tensor
from ..ops.aten import DTYPE_CODES, PRIM_TEMPLATES, AtenCall, implicit_number, op_packet, resolve_aten
from ..runtime.max_pool import max_pool2d

if TYPE_CHECKING:
    from .hostgen import _Gen

_MAX_TRIP = 2 ** 63 - 1
_CODE_DTYPES = {code: dt for dt, code in DTYPE_CODES.items()}


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
_GENERIC_TYPES = {"List": (list,), "Tuple": (tuple,), "Dict": (dict,),
                  "list": (list,), "tuple": (tuple,), "dict": (dict,)}   # a bare isinstance(x, list)


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


Handler = Callable[["_Gen", Node, list[str], int], None]


def _constant(gen: "_Gen", node: Node, a: list[str], indent: int) -> None:
    gen.emit(indent, f"{gen.outs(node)} = {gen.literal(node.attrs.get('value'))}")


_MODULE_DICTS = ("_modules", "_parameters", "_buffers")


def module_dict(obj: Any, name: str) -> Optional[str]:
    """Which of ``obj``'s dicts (``_modules``, ``_parameters``, ``_buffers``) ``getattr(obj,
    name)`` reads through ``nn.Module.__getattr__``; None when ``obj`` is not a module or normal
    attribute lookup finds ``name`` first (instance dict, class attribute, property)."""
    if not isinstance(obj, torch.nn.Module) or name in obj.__dict__ or hasattr(type(obj), name):
        return None
    for d in _MODULE_DICTS:
        if name in obj.__dict__.get(d, ()):
            return d
    return None


def _get_attr(gen: "_Gen", node: Node, a: list[str], indent: int) -> None:
    # getattr, never ``a.name``: attribute names need not be identifiers (nn.Sequential's "0").
    # On a live module, read the dict that holds the attribute: the same object as getattr
    # (nn.Module.__setattr__ keeps each name in one place) at a tenth of the cost. An attribute
    # that later moves raises KeyError, and the executor rebuilds the program (see _recover).
    name = node.attrs["name"]
    obj = gen.live.get(node.inputs[0])
    where = module_dict(obj, name) if obj is not None else None
    if where is None:
        gen.emit(indent, f"{gen.outs(node)} = getattr({a[0]}, {name!r})")
        return
    gen.emit(indent, f"{gen.outs(node)} = {a[0]}.{where}[{name!r}]")
    if where == "_modules":
        gen.live[node.outputs[0]] = obj.__dict__["_modules"][name]


def _set_attr(gen: "_Gen", node: Node, a: list[str], indent: int) -> None:
    gen.emit(indent, f"setattr({a[0]}, {node.attrs['name']!r}, {a[1]})")


def _unpack(gen: "_Gen", node: Node, a: list[str], indent: int) -> None:
    if not node.outputs:
        gen.emit(indent, f"() = {a[0]}")
    else:
        gen.emit(indent, f"{gen.outs(node)}, = {a[0]}")


def _tuple(gen: "_Gen", node: Node, a: list[str], indent: int) -> None:
    gen.emit(indent, f"{gen.outs(node)} = ({', '.join(a)},)" if a else f"{gen.outs(node)} = ()")


def _if(gen: "_Gen", node: Node, a: list[str], indent: int) -> None:
    gen.emit(indent, f"if {a[0]}:")
    for i, b in enumerate(node.blocks):
        if i == 1:
            gen.emit(indent, "else:")
        gen.block(b, indent + 1)
        if node.outputs:
            gen.emit(indent + 1, f"{gen.outs(node)}, = {', '.join(gen.var(r) for r in b.returns)},")


def _loop(gen: "_Gen", node: Node, a: list[str], indent: int) -> None:
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


def _raise_exception(gen: "_Gen", node: Node, a: list[str], indent: int) -> None:
    where = gen.literal(node.source or "")
    gen.ns["_raise"] = _raise
    gen.emit(indent, f"_raise({', '.join(a + ([] if len(a) > 1 else ['None']))}, {where})")


def _isinstance(gen: "_Gen", node: Node, a: list[str], indent: int) -> None:
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


def _create_object(gen: "_Gen", node: Node, a: list[str], indent: int) -> None:
    # an instance without __init__: the inlined __init__ follows as prim::SetAttr nodes
    cls = gen.bind(_python_class(node.outputs[0].type.name), "cls")
    gen.emit(indent, f"{gen.outs(node)} = {cls}.__new__({cls})")


def _is_autocast(node: Node) -> bool:
    return bool(node.inputs) and getattr(node.inputs[0].type, "name", "").endswith("autocast_mode.autocast")


def _autocast_enter(obj: Any) -> Any:
    """A scripted ``with torch.autocast(...)``: TorchScript's inlined ``__init__`` set only
    ``device``, ``fast_dtype`` and ``_enabled`` on the object; eager's context manager is built
    from them (its ``__enter__`` reads more) and kept on the object for the exit."""
    dtype = obj.fast_dtype
    ctx = torch.autocast(obj.device, dtype=_CODE_DTYPES.get(dtype, dtype) if isinstance(dtype, int) else dtype,
                         enabled=obj._enabled)
    obj._graphfuser_context = ctx
    ctx.__enter__()
    return obj


def _autocast_exit(obj: Any) -> None:
    obj._graphfuser_context.__exit__(None, None, None)


def _enter(gen: "_Gen", node: Node, a: list[str], indent: int) -> None:
    if _is_autocast(node):
        gen.assign(node, indent, f"{gen.bind(_autocast_enter, 'ac')}({a[0]})")
        return
    gen.assign(node, indent, f"{a[0]}.__enter__()")


def _exit(gen: "_Gen", node: Node, a: list[str], indent: int) -> None:
    if _is_autocast(node):
        gen.assign(node, indent, f"{gen.bind(_autocast_exit, 'ac')}({a[0]})")
        return
    gen.assign(node, indent, f"{a[0]}.__exit__(None, None, None)")


def _call_method(gen: "_Gen", node: Node, a: list[str], indent: int) -> None:
    # a method that was not inlined (an interface call): the object's own method, as eager runs it
    gen.assign(node, indent, f"getattr({a[0]}, {node.attrs['name']!r})({', '.join(a[1:])})")


def _call_function(gen: "_Gen", node: Node, a: list[str], indent: int) -> None:
    gen.assign(node, indent, f"{a[0]}({', '.join(a[1:])})")


@dataclass(frozen=True)
class PyArg:
    """Input ``index`` of a ``prim::PythonOp`` node, where it sits in the call's arguments."""

    index: int


@dataclass(eq=False)
class PyCall:
    """What a ``prim::PythonOp`` node calls: ``fn(*args, **kwargs)``, or the method ``method`` of
    its first argument. ``args`` / ``kwargs`` are the call's arguments as written, nested lists,
    tuples, dicts and slices included, with ``PyArg(i)`` where the node's input ``i`` goes.
    ``effects``: the call may write a tensor or change global state (grad mode, autocast):
    nothing moves across it. Printed as ``name``."""

    name: str
    fn: Optional[Callable] = None
    method: Optional[str] = None
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    effects: bool = False

    def __str__(self) -> str:
        return self.name


def _python_op(gen: "_Gen", node: Node, a: list[str], indent: int) -> None:
    """``prim::PythonOp[call=...]``: a Python call the host program makes as written (what a
    frontend hands over that maps to no aten op: graph breaks aside, eager runs exactly this)."""
    call: PyCall = node.attrs["call"]

    def render(x: Any) -> str:
        if isinstance(x, PyArg):
            return a[x.index]
        if type(x) is list:
            return "[" + ", ".join(map(render, x)) + "]"
        if type(x) is tuple:
            return "(" + "".join(render(i) + ", " for i in x) + ")"
        if type(x) is dict:
            return "{" + ", ".join(f"{render(k)}: {render(v)}" for k, v in x.items()) + "}"
        if type(x) is slice:
            return f"slice({render(x.start)}, {render(x.stop)}, {render(x.step)})"
        return gen.literal(x)

    args = [render(x) for x in call.args] + [f"{k}={render(v)}" for k, v in call.kwargs.items()]
    if call.method is not None:
        expr = f"{args[0]}.{call.method}({', '.join(args[1:])})"
    else:
        expr = f"{gen.bind(call.fn, 'py')}({', '.join(args)})"
    gen.assign(node, indent, expr)


def _implicit_call(node: Node, call: AtenCall, a: list[str], gen: "_Gen") -> tuple[AtenCall, list[str]]:
    """A node that reads a number that may be a tensor an implicit conversion handed on
    (``ir/implicit.py``). An overload with one result runs through the op's packet, which picks
    the overload by the run-time types, as the Python program's call does (``mul.Scalar`` becomes
    ``mul.Tensor``, ``sin.int`` ``sin``); arguments with a default go by name (``add.Scalar``'s
    ``alpha`` is ``add.Tensor``'s keyword). An overload with several results is another op than
    the Python call's (``torch.max(t, s)`` typed ``max.dim``, ``s`` the dim): there the tensor
    becomes the number TorchScript's conversion makes of it, or raises as it does."""
    op = call.op
    if not isinstance(op, torch._ops.OpOverload) or op_packet(node.kind) is None:
        return call, a
    args = op._schema.arguments
    if len(op._schema.returns) == 1:
        names = tuple(x.name if x.kwarg_only or x.has_default_value() else None for x in args)
        return AtenCall(op=op_packet(node.kind), kwarg_names=names), a
    conv = gen.bind(implicit_number, "num")
    a = [f"{conv}({s}, {str(args[i].type)!r})" if i < len(args) and v in gen.implicit else s
         for i, (s, v) in enumerate(zip(a, node.inputs))]
    return call, a


def _aten(gen: "_Gen", node: Node, a: list[str], indent: int) -> None:
    call = node.schema if isinstance(node.schema, AtenCall) else \
        resolve_aten(node.kind, None, any(v.type.is_tensor for v in node.inputs))
    if call is None:
        raise RuntimeError(f"cannot execute {node.where()}")
    if call.template is None and reads_implicit_tensor(node, gen.implicit):
        call, a = _implicit_call(node, call, a, gen)
    if node.kind == "aten::batch_norm" and len(a) > 5 and _maybe_cpu(node.inputs[0]):
        stats = gen.bind(eval_stats, "eval_stats")      # (a CUDA batch norm's call stays as it is)
        a = a[:3] + [f"{stats}({a[3]}, {a[5]})", f"{stats}({a[4]}, {a[5]})"] + a[5:]
    if call.template is not None:
        expr = gen.fill(call.template, a)
    elif node.kind == "aten::max_pool2d" and _maybe_cuda(node.inputs[0]) and len(a) == len(node.inputs) \
            and not any(call.kwarg_names):
        # a max pool not profiled on the CPU (its input's type may carry no profile, after an
        # If): the channel-vector kernel where it applies at run time (runtime/max_pool.py)
        expr = f"{gen.bind(max_pool2d, 'max_pool2d')}({', '.join(a)})"
    else:
        # an OpOverload's __call__ is one Python frame around its C++ ``_op``: call that directly
        op = gen.bind(call.op._op if isinstance(call.op, torch._ops.OpOverload) else call.op, "op")
        pos, kw = [], []
        for i, s in enumerate(a):
            name = call.kwarg_names[i] if i < len(call.kwarg_names) else None
            (kw.append(f"{name}={s}") if name else pos.append(s))
        expr = f"{op}({', '.join(pos + kw)})"
    if len(node.outputs) > 1 and call.template is None:
        gen.emit(indent, f"{gen.outs(node)}, = {expr}")
    else:
        gen.assign(node, indent, expr)


def _maybe_cuda(v: Value) -> bool:
    """Whether ``v`` may live on a CUDA device: not profiled on another device."""
    device = getattr(v.type, "device", None)
    return device is None or device.type == "cuda"


def _maybe_cpu(v: Value) -> bool:
    """Whether ``v`` may live on the CPU: not profiled on another device."""
    device = getattr(v.type, "device", None)
    return device is None or device.type == "cpu"


def eval_stats(t: Any, training: Any) -> Any:
    """A running statistic as eager's batch norm in eval mode is handed it: contiguous on the CPU.
    Eager's CPU backward of an eval-mode batch norm reads a strided running mean or variance as if
    it were dense: its weight gradient came out as 1.8e32 where float64 gives 57, and changed
    between runs (fuzz graph 1740 of CPU seed 33711, ``running_mean`` a stepped slice). In eval
    mode the statistics are only read, so a dense copy changes no value and loses no update; in
    training they are written in place and stay as they are."""
    if training or not isinstance(t, torch.Tensor) or t.device.type != "cpu" or t.is_contiguous():
        return t
    return t.contiguous()


def _copy(gen: "_Gen", node: Node, a: list[str], indent: int) -> None:
    """``aten::copy_``. A batch norm's running-statistics copy (``running_stats``) whose source is
    the buffer itself (its group wrote the buffer: ``passes/in_place.py``) does nothing: no call,
    and no version bump, as eager's batch norm bumps none (a copy through ``HostOps.copy_`` cost
    8.5 us of host time per buffer on an H100 host, two per batch norm)."""
    if not node.attrs.get("running_stats"):
        _aten(gen, node, a, indent)
        return
    gen.emit(indent, f"if {a[1]} is {a[0]} and not {a[0]}.requires_grad:")
    gen.emit(indent + 1, f"{gen.outs(node)} = {a[0]}" if node.outputs else "pass")
    gen.emit(indent, "else:")
    _aten(gen, node, a, indent + 1)


def _philox_state(gen: "_Gen", node: Node, a: list[str], indent: int) -> None:
    """``graphfuser::philox_state(x)``: (seed, offset) from torch's generator for x.numel() values."""
    from ..ops.philox import philox_state

    gen.emit(indent, f"{gen.outs(node)} = {gen.bind(philox_state, 'philox')}({a[0]}, {a[0]}.numel())")


def _ops_call(module: str, name: str) -> Handler:
    """A node that calls ``ops.<module>.<name>`` with its inputs, where a pass rewrote an op and
    eager's checks or layout went with it. Where group_norm was decomposed
    (``passes/decompose.py``), ``graphfuser::group_norm_check(x, num_groups, weight, bias)`` raises
    eager group_norm's errors and ``graphfuser::group_norm_layout(y, x)`` gives the result eager's
    memory format; where a view moved above a pointwise op (``passes/sink_views.py``),
    ``graphfuser::view_check(x, sizes, dtype)`` raises eager's view error."""
    def emit(gen: "_Gen", node: Node, a: list[str], indent: int) -> None:
        fn = getattr(importlib.import_module(f"graphfuser.ops.{module}"), name)
        gen.assign(node, indent, f"{gen.bind(fn, name)}({', '.join(a)})")
    return emit


def _template(template: str) -> Handler:
    def emit(gen: "_Gen", node: Node, a: list[str], indent: int) -> None:
        gen.assign(node, indent, gen.fill(template, a))
    return emit


HANDLERS: dict[str, Handler] = {
    "prim::Constant": _constant, "prim::GetAttr": _get_attr, "prim::SetAttr": _set_attr,
    "prim::TupleUnpack": _unpack, "prim::ListUnpack": _unpack, "prim::TupleConstruct": _tuple,
    "prim::If": _if, "prim::Loop": _loop, "prim::RaiseException": _raise_exception,
    "prim::isinstance": _isinstance, "prim::CallMethod": _call_method, "prim::CallFunction": _call_function,
    "prim::CreateObject": _create_object, "prim::PythonOp": _python_op, "prim::Enter": _enter, "prim::Exit": _exit,
    "graphfuser::philox_state": _philox_state, "aten::copy_": _copy,
    "graphfuser::group_norm_check": _ops_call("norms", "check_group_norm"),
    "graphfuser::group_norm_layout": _ops_call("norms", "group_norm_layout"),
    "graphfuser::view_check": _ops_call("views", "check_view_of_result"),
    "graphfuser::exact_matmul": _ops_call("matmul", "exact_matmul"),
    "graphfuser::sdpa_mask_check": _ops_call("matmul", "check_mask"),
    "graphfuser::sdpa_bias_check": _ops_call("matmul", "check_bias"),
    "graphfuser::pad_rows": _ops_call("matmul", "pad_rows"),
    "graphfuser::dense_unbind": _ops_call("views", "dense_unbind"),
    **{kind: _template(t) for kind, t in PRIM_TEMPLATES.items()},
}
_OPERATOR_NAMESPACES = ("aten::", "torchvision::", "quantized::", "prims::", "graphfuser::")


def handler_for(kind: str) -> Optional[Handler]:
    """The table's handler for ``kind``; operator namespaces share the aten handler."""
    handler = HANDLERS.get(kind)
    if handler is None and kind.startswith(_OPERATOR_NAMESPACES):
        return _aten
    return handler
