"""How ``fd.ops.<name>(...)`` becomes an aten node: overload selection and output typing.

A call is bound to its op-table row (arguments in aten schema order), then matched against the
aten overloads of the row's first aten name exactly as TorchScript would have written the node:
trailing arguments at their default may be dropped to find an overload (``aten::add.float`` for
two scalars), and the chosen overload's remaining defaults are filled in, so ``fd.ops.cast(t,
DataType.Half)`` is ``aten::to(%t, 5, False, False, None)`` like a scripted ``t.half()``.

Output types are inferred at definition time by running the overload on tiny stand-in tensors
(ones; symbolic dims get one placeholder size, broadcast dims size 1; CPU tensors rather than
meta ones, whose first use imports torch's decompositions for seconds): dtype, rank and
broadcast dims of every intermediate are known before any input is seen. Execution re-derives complete types from the
actual inputs by profiling.
"""
from __future__ import annotations

from typing import Any, Optional

import torch

from ..ops.aten import AtenCall, resolve_aten
from ..ir.graph import Node, Value
from ..ir.types import BOOL, FLOAT, INT, TensorType, Type
from ..ops.promotion import participant_of, result_type

PLACEHOLDER = 2           # the stand-in size of a symbolic dim
_SAMPLES = {"int": PLACEHOLDER, "float": 1.0, "bool": True, "complex": 1j}   # an int may be a size
SCALAR_TYPES = {"int": INT, "float": FLOAT, "bool": BOOL, "complex": Type("complex")}


class DefinitionError(ValueError):
    """A FusionDefinition or its inputs are wrong; raised before any kernel runs."""


def _kind(v: Value) -> Any:
    """What a node input is, for overload matching: "Tensor", a scalar type name, or a constant value."""
    if v.type.is_tensor:
        return "Tensor"
    if v.is_constant:
        return ("const", v.constant())
    return v.type.name


def _accepts(t: str, kind: Any, lenient: bool) -> bool:
    """Does a schema argument of type ``t`` take an input of ``kind``? ``lenient``: an int also
    fills a float argument, an int or float a complex one (tried only when nothing matches)."""
    if t.startswith("Optional["):
        if isinstance(kind, tuple) and kind[1] is None:
            return True
        t = t[len("Optional["):-1]
    if kind == "Tensor":
        return t == "Tensor"
    if isinstance(kind, str) and kind.endswith("[]"):          # a ListConstruct of scalars
        return t == f"List[{kind[:-2]}]" or (lenient and kind == "int[]" and t == "List[float]")
    if isinstance(kind, tuple):
        value = kind[1]
        if isinstance(value, (list, tuple)):
            inner = {"List[int]": int, "List[float]": (int, float)}.get(t)
            return inner is not None and all(isinstance(x, inner) and not isinstance(x, bool) for x in value)
        if value is None:
            return False
        kind = "str" if isinstance(value, str) else type(value).__name__
    scalar = {"number": ("int", "float", "bool", "complex"), "int": ("int",), "float": ("float",),
              "bool": ("bool",), "complex": ("complex",), "str": ("str",)}
    if lenient:
        scalar.update({"float": ("int", "float"), "complex": ("int", "float", "complex")})
    return kind in scalar.get(t, ())


def _matches(schema, kinds: list[Any], lenient: bool) -> bool:
    args = schema.arguments
    if len(kinds) > len(args):
        return False
    if any(not a.has_default_value() for a in args[len(kinds):]):
        return False
    return all(_accepts(str(a.type), k, lenient) for a, k in zip(args, kinds))


def _schemas(kind: str) -> list:
    return [s for s in torch._C._jit_get_schemas_for_operator(kind)
            if not s.is_mutable and len(s.returns) == 1 and all(a.name != "out" for a in s.arguments)]


def select_overload(kind: str, inputs: list[Value], droppable: list[bool]) -> tuple[Any, int]:
    """The first overload of ``kind`` taking ``inputs``; returns (schema, number of inputs kept).

    Trailing inputs with ``droppable`` set (at their default) are left off first, as a script
    would not spell them: ``to(t, 6)`` is ``aten::to.dtype``, not an overload whose later
    keyword arguments happen to accept ``None``. They are added back one by one until an
    overload matches.
    """
    kinds = [_kind(v) for v in inputs]
    schemas = _schemas(kind)
    least = len(inputs)
    while least > 0 and droppable[least - 1]:
        least -= 1
    for lenient in (False, True):
        for n in range(least, len(inputs) + 1):
            for s in schemas:
                if _matches(s, kinds[:n], lenient):
                    return s, n
    shown = ", ".join("Tensor" if k == "Tensor" else (repr(k[1]) if isinstance(k, tuple) else k) for k in kinds)
    raise DefinitionError(f"no overload of {kind} takes ({shown})")


def call_op(call: AtenCall, args: list[Any]) -> Any:
    """Call a resolved aten overload the way the host program does (kwarg-only by name)."""
    pos, kw = [], {}
    for i, a in enumerate(args):
        name = call.kwarg_names[i] if i < len(call.kwarg_names) else None
        if name:
            kw[name] = a
        else:
            pos.append(a)
    return call.op(*pos, **kw)


def stand_in(v: Value) -> Any:
    """A stand-in for ``v`` at definition time: a small tensor of ones, a sample scalar, or the constant."""
    t = v.type
    if isinstance(t, TensorType):
        sizes = [1 if s == 1 else PLACEHOLDER for s in t.sizes]
        return torch.ones(sizes, dtype=t.dtype)
    if v.is_constant:
        return v.constant()
    if v.node is not None and v.node.kind == "prim::ListConstruct":
        return [stand_in(x) for x in v.node.inputs]
    return _SAMPLES.get(t.name, 1)


def infer_output_type(node: Node, schema) -> Type:
    """The output type of ``node``: a TensorType with dtype and symbolic sizes, or a scalar type."""
    if any(v.type.is_tensor for v in node.inputs):
        out = call_op(node.schema, [stand_in(v) for v in node.inputs])
        if not isinstance(out, torch.Tensor):
            raise DefinitionError(f"{node.kind} returned {type(out).__name__}, not a tensor")
        return TensorType(dtype=out.dtype, sizes=tuple(1 if s == 1 else -1 for s in out.shape))
    ret = str(schema.returns[0].type)
    if ret in SCALAR_TYPES:
        return SCALAR_TYPES[ret]
    parts = [participant_of(v.type, v.constant() if v.is_constant else None) for v in node.inputs]
    dt = result_type([p for p in parts if p is not None])
    if dt == torch.bool:
        return BOOL
    if dt.is_complex:
        return SCALAR_TYPES["complex"]
    return FLOAT if dt.is_floating_point else INT


def resolve(kind: str, schema) -> AtenCall:
    call = resolve_aten(kind, str(schema))
    if call is None:
        raise DefinitionError(f"{schema} cannot be executed")
    return call


def default_of(schema, index: int) -> Optional[Any]:
    return schema.arguments[index].default_value
