"""How the host program executes each node kind that is not a fusion group.

``resolve_aten`` maps an aten node (with its TorchScript schema) to either a Python expression
template (scalar and list ops such as ``aten::size`` or ``aten::__getitem__``) or a torch
``OpOverload`` plus the names of its keyword-only arguments. ``PRIM_TEMPLATES`` covers the prim
ops the host program spells inline; control flow is emitted by ``hostgen``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch


@dataclass(frozen=True)
class AtenCall:
    """A resolved aten node: a Python template, or an OpOverload with kwarg-only argument names."""

    template: Optional[str] = None           # "{0} + {1}"
    op: Any = None                            # torch OpOverload
    kwarg_names: tuple[Optional[str], ...] = ()  # per input: name when keyword-only, else None
    schema: str = ""


def _is_scalar_type(t: str) -> bool:
    return t in ("int", "float", "bool", "number", "Scalar", "complex", "str")


# Scalar / list ops with their Python spelling, keyed by "name.overload" or "name" (any overload
# whose arguments are all non-tensors).
PY_TEMPLATES: dict[str, str] = {
    "size.int": "{0}.size({1})", "size": "list({0}.shape)", "sym_size.int": "{0}.size({1})",
    "dim": "{0}.dim()", "numel": "{0}.numel()", "len": "len({0})", "__getitem__": "{0}[{1}]",
    "__is__": "({0} is {1})", "__isnot__": "({0} is not {1})", "__not__": "(not {0})",
    "Int": "int({0})", "Float": "float({0})", "Bool": "bool({0})", "ScalarImplicit": "{0}.item()",
    "item": "{0}.item()", "is_contiguous": "{0}.is_contiguous()", "__contains__": "({1} in {0})",
    "append": "{0}.append({1})", "list": "list({0})", "str": "str({0})", "format": "_fmt({0}, {args})",
    "__range_length": "_range_length({0}, {1}, {2})", "__derive_index": "({1} + {0} * {2})",
    "warn": "_warn({0})", "__and__": "({0} and {1})", "__or__": "({0} or {1})", "__xor__": "({0} != {1})",
    "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})",
    "floordiv": "({0} // {1})", "remainder": "({0} % {1})", "__mod__": "({0} % {1})", "pow": "({0} ** {1})",
    "neg": "(-{0})", "eq": "({0} == {1})", "ne": "({0} != {1})", "lt": "({0} < {1})", "le": "({0} <= {1})",
    "gt": "({0} > {1})", "ge": "({0} >= {1})", "abs": "abs({0})", "max": "max({args})", "min": "min({args})",
    "floor": "_math.floor({0})", "ceil": "_math.ceil({0})", "sqrt": "_math.sqrt({0})",
    "device": "{0}.device", "dtype": "_DTYPE_CODE[{0}.dtype]", "values": "list({0}.values())",
    "keys": "list({0}.keys())", "__isinstance": "isinstance({0}, {1})", "slice.t": "{0}[{1}:{2}:{3}]",
}

PRIM_TEMPLATES: dict[str, str] = {
    "prim::ListConstruct": "[{args}]", "prim::TupleConstruct": "({args},)", "prim::TupleIndex": "{0}[{1}]",
    "prim::dtype": "_DTYPE_CODE[{0}.dtype]", "prim::device": "{0}.device", "prim::NumToTensor": "_torch.scalar_tensor({0})",
    "prim::Uninitialized": "None", "prim::unchecked_cast": "{0}", "prim::min": "min({args})",
    "prim::max": "max({args})", "prim::abs": "abs({0})", "prim::requires_grad": "{0}.requires_grad",
    "prim::is_cuda": "{0}.is_cuda", "prim::layout": "0", "prim::shape": "list({0}.shape)",
    "prim::data": "{0}.detach()", "prim::Print": "print({args})", "prim::DictConstruct": "_dict_of({args})",
    "prim::StringIndex": "{0}[{1}]", "prim::RaiseException": "_raise({args})",
    "prim::TupleUnpack": "", "prim::ListUnpack": "", "prim::GetAttr": "", "prim::SetAttr": "",
    "prim::Constant": "", "prim::If": "", "prim::Loop": "",
}
SUPPORTED_PRIMS = frozenset(PRIM_TEMPLATES) | {
    "prim::CudaFusionGroup", "prim::CpuFusionGroup", "prim::FallbackGraph", "prim::CudaFusionGuard",
    "prim::CpuFusionGuard",
}


def _split_schema(schema: Optional[str]) -> tuple[str, str, list]:
    parsed = torch._C.parse_schema(schema)
    name, _, overload = parsed.name.partition("::")[2].partition(".")
    return parsed.name.split("::")[1], parsed.overload_name or "default", parsed.arguments


# Templates that are right for tensor arguments too; any other template is for scalars only
# (``aten::floor(Tensor)`` must not become ``math.floor``).
TENSOR_TEMPLATES = frozenset((
    "size", "dim", "numel", "len", "__getitem__", "__is__", "__isnot__", "Int", "Float", "Bool", "item",
    "ScalarImplicit", "is_contiguous", "append", "list", "format", "warn", "__contains__", "str", "keys", "values",
))


def resolve_aten(kind: str, schema: Optional[str], tensor_args: Optional[bool] = None) -> Optional[AtenCall]:
    """How to execute ``kind`` with ``schema``; None if graphfuser cannot.

    Without a schema (graphs parsed from text), ``tensor_args`` says whether any input is a
    tensor: tensor ops then run through the op table's eager reference or the aten packet.
    """
    name = kind.split("::", 1)[1]
    if schema is None:
        if name in PY_TEMPLATES and (not tensor_args or name in TENSOR_TEMPLATES):
            return AtenCall(template=PY_TEMPLATES[name])
        if tensor_args:
            from ..ops import lookup

            row = lookup(kind)
            if row is not None and row.eager is not None:
                return AtenCall(op=row.eager)      # called with schema-order positional args
        packet = getattr(torch.ops.aten, name, None)
        return AtenCall(op=packet) if packet is not None else None
    parsed = torch._C.parse_schema(schema)
    overload = parsed.overload_name
    arg_types = [str(a.type) for a in parsed.arguments]
    tensor_free = not any("Tensor" in t for t in arg_types)
    if overload and f"{name}.{overload}" in PY_TEMPLATES:
        return AtenCall(template=PY_TEMPLATES[f"{name}.{overload}"], schema=schema)
    if name in PY_TEMPLATES and (tensor_free or name in TENSOR_TEMPLATES):
        return AtenCall(template=PY_TEMPLATES[name], schema=schema)
    if "..." in schema[:schema.rindex("->")]:
        return None  # a vararg schema (e.g. aten::percentFormat): its OpOverload takes no extra args
    packet = getattr(torch.ops.aten, name, None)
    if packet is None:
        return None
    try:
        op = getattr(packet, overload or "default")
    except AttributeError:
        return None
    kw = tuple(a.name if a.kwarg_only else None for a in parsed.arguments)
    return AtenCall(op=op, kwarg_names=kw, schema=schema)


def describe(call: AtenCall) -> str:
    return call.template or str(call.op)
