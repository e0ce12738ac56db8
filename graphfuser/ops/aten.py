"""How the host program executes the nodes that are not fusion groups: the aten half of the table.

``resolve_aten`` maps an aten (or other operator-namespace) node with its TorchScript schema to
either a Python expression template (scalar, string, list and dict ops such as ``aten::size``,
``aten::_set_item.str`` or ``aten::format``) or a torch ``OpOverload`` plus the names of its
keyword-only arguments. Templates are keyed by ``name.overload`` (most specific) or ``name`` (any
overload whose arguments are all non-tensors, unless the name is in ``TENSOR_TEMPLATES``).

Templates follow TorchScript's semantics, not Python's where they differ: ``aten::pow.int``
returns a float, ``aten::round.float`` returns a float (half to even), ``aten::__and__.int`` is
bitwise, list and dict ops mutate the object they are given (TorchScript lists and dicts alias).
The runtime helpers the templates name live in ``RUNTIME`` (the host program's namespace).
``PRIM_TEMPLATES`` covers the prim ops spelled as one expression; structural kinds (attributes,
unpacking, control flow, calls, exceptions) have handlers in ``hostgen``.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch.autograd.graph import increment_version

from .reduction import scalar_type

DTYPE_CODES: dict[torch.dtype, int] = {dt: i for i, dt in enumerate([
    torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.float32,
    torch.float64, torch.complex32, torch.complex64, torch.complex128, torch.bool, torch.qint8,
    torch.quint8, torch.qint32, torch.bfloat16])}
_CODE_DTYPES = {c: dt for dt, c in DTYPE_CODES.items()}
_LAYOUT_CODES = {torch.strided: 0, torch.sparse_coo: 1, torch._mkldnn: 2}  # type: ignore[attr-defined]


@dataclass(frozen=True)
class AtenCall:
    """A resolved aten node: a Python template, or an OpOverload with kwarg-only argument names."""

    template: Optional[str] = None           # "{0} + {1}"
    op: Any = None                            # torch OpOverload
    kwarg_names: tuple[Optional[str], ...] = ()  # per input: name when keyword-only, else None
    schema: str = ""


# -- runtime helpers named by templates -----------------------------------------------------
def _fmt(fmt: str, *args: Any) -> str:
    return fmt.format(*args)


def _range_length(lo: int, hi: int, step: int) -> int:
    if step == 0:
        raise RuntimeError("range() arg 3 must not be zero")
    if step > 0:
        return max(0, (hi - lo + step - 1) // step)
    return max(0, (lo - hi - step - 1) // -step)


def _dict_of(*kv: Any) -> dict:
    return {kv[i]: kv[i + 1] for i in range(0, len(kv), 2)}


def _warn(msg: Any, stacklevel: int = 2) -> None:
    warnings.warn(str(msg), stacklevel=2)


def _setitem(container: Any, key: Any, value: Any) -> Any:
    container[key] = value
    return container


def _dtype(code: Any) -> Optional[torch.dtype]:
    """TorchScript passes ScalarType as an int code; torch's Python API wants a dtype."""
    return _CODE_DTYPES[code] if isinstance(code, int) else code


def _num_to_tensor(x: Any) -> torch.Tensor:
    """``prim::NumToTensor``: a 0-dim tensor of the scalar's own type (int64, float64, bool)."""
    if isinstance(x, torch.Tensor):
        return x
    dtype = torch.bool if isinstance(x, bool) else torch.int64 if isinstance(x, int) else \
        torch.complex128 if isinstance(x, complex) else torch.float64
    return torch.tensor(x, dtype=dtype)


def _implicit(x: Any, kind: str) -> Any:
    """``aten::IntImplicit`` / ``FloatImplicit`` / ``ScalarImplicit``: TorchScript's conversion of
    a tensor passed where its schema matching chose a number overload. TorchScript matches
    ``True / t`` (a bool or int literal and a tensor) to ``div(int, int)`` through
    ``IntImplicit(t)``; its conversion raises for any tensor but a 0-dim one of a fitting type, and
    makes that one a Python number (``1 / t0`` a float). Python keeps the tensor, and the arithmetic
    that follows is the tensor's: eager returns ``t.__rtruediv__(True)``, a tensor, for either. So
    the tensor is handed on as it is, and the host program's Python arithmetic gives eager's
    answer (torch takes a 0-dim integer tensor wherever an int goes). A profiled scalar slot
    holding a tensor is never a constant (``executor/profile.py``). (TorchScript typed a bool
    literal or argument meeting the tensor as an int: ``True + b`` of a bool ``b`` arrives as
    ``1 + b``, int64 where eager's is bool; the fuzzer's ``torchscript_bool_scalar``.)"""
    return x


def implicit_number(x: Any, type_name: str) -> Any:
    """TorchScript's own implicit conversion of a tensor to the number a schema argument of type
    ``type_name`` (``int``, ``float``, ``Scalar``) takes: a 0-dim tensor's value, else its error."""
    if not isinstance(x, torch.Tensor):
        return x
    if x.requires_grad:
        raise RuntimeError("Cannot input a tensor that requires grad as a scalar argument")
    if x.dim() != 0:
        raise RuntimeError("Cannot input a tensor of dimension other than 0 as a scalar argument")
    if type_name == "int" and (x.is_floating_point() or x.is_complex()):
        raise RuntimeError(f"Cannot input a tensor of type {_SCALAR_TYPE_NAMES.get(x.dtype, x.dtype)} "
                           "as an integral argument")
    return x.item()


_SCALAR_TYPE_NAMES = {torch.float16: "Half", torch.bfloat16: "BFloat16", torch.float32: "Float",
                      torch.float64: "Double", torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble"}


def _autocast_dtype(device: str) -> torch.dtype:
    """``aten::get_autocast_dtype``: a torch.dtype (TorchScript's int code would reach
    ``torch.set_autocast_dtype`` through a scripted autocast object's ``__enter__``)."""
    return torch.get_autocast_dtype(device)


def _number(x: Any, kind: type) -> Any:
    """``aten::Int`` / ``Float`` / ``Bool`` of a number-typed value: a tensor that an implicit
    conversion handed on (``_implicit``) stays the tensor, as in the Python program, where
    TorchScript's ``int(True > t)`` was only its typing of ``True > t``."""
    return x if isinstance(x, torch.Tensor) else kind(x)


def _math(name: str, x: Any) -> Any:
    """A scalar ``aten::sqrt`` / ``log`` / ``floor`` ... : ``math``'s for numbers, torch's for a
    tensor an implicit conversion handed on. Outside their domain TorchScript's (C's) ``log`` and
    ``sqrt`` give -inf / NaN where ``math`` raises."""
    if isinstance(x, torch.Tensor):
        return getattr(torch, name)(x)
    if name == "log" and not x > 0:
        return -math.inf if x == 0 else math.nan
    if name == "sqrt" and x < 0:
        return math.nan
    return getattr(math, name)(x)


def _rounded(x: Any) -> Any:
    """Scalar ``aten::round`` (half to even, as a float); torch's for a tensor kept by ``_implicit``."""
    return torch.round(x) if isinstance(x, torch.Tensor) else float(round(x))


_NUMBERS = (bool, int, float, complex)


def _scalar_tensor(value: Any, code: Any, device: Any, requires_grad: bool) -> torch.Tensor:
    """``aten::tensor(t, dtype, device, requires_grad)``. A number for a CUDA device is filled in
    place on the device (``torch.full``, a kernel queued on the stream): ``torch.tensor`` would
    copy it from pageable host memory, and that copy waits for everything queued before it (in
    a scripted model, slice assignments of numbers such as torchvision's Swin attention mask made
    every call wait for the GPU 45 times)."""
    dtype = _dtype(code)
    if type(value) in _NUMBERS and device is not None and torch.device(device).type == "cuda":
        if dtype is None:
            dtype = torch.bool if type(value) is bool else torch.int64 if type(value) is int else \
                torch.get_default_dtype() if type(value) is float else \
                (torch.complex128 if torch.get_default_dtype() == torch.float64 else torch.complex64)
        return torch.full((), value, dtype=dtype, device=device, requires_grad=requires_grad)
    return torch.tensor(value, dtype=dtype, device=device, requires_grad=requires_grad)


def _pow(a: Any, b: Any) -> Any:
    """Scalar ``aten::pow``: C's pow where Python's differs (a negative base to a fractional
    power is nan, not complex; zero to a negative power is inf, not ZeroDivisionError)."""
    try:
        r = a ** b
    except ZeroDivisionError:
        return math.inf
    return math.nan if isinstance(r, complex) else r


def _list_sort(lst: list, reverse: bool = False) -> None:
    lst.sort(reverse=reverse)


def _pop(container: Any, *args: Any) -> Any:
    return container.pop(*args)


def _dict_get(d: dict, key: Any, default: Any = None) -> Any:
    return d.get(key, default)


RUNTIME: dict[str, Any] = {
    "_torch": torch, "_math": math, "_DTYPE_CODE": DTYPE_CODES, "_LAYOUT_CODE": _LAYOUT_CODES,
    "_fmt": _fmt, "_range_length": _range_length, "_dict_of": _dict_of, "_warn": _warn,
    "_setitem": _setitem, "_dtype": _dtype, "_num_to_tensor": _num_to_tensor, "_scalar_tensor": _scalar_tensor,
    "_pow": _pow, "_list_sort": _list_sort, "_pop": _pop, "_dict_get": _dict_get,
    "_implicit": _implicit, "_number": _number, "_math_of": _math, "_rounded": _rounded,
    "_autocast_dtype": _autocast_dtype,
}

# Scalar / string / list / dict ops with their Python spelling, keyed by "name.overload" or
# "name" (any overload whose arguments are all non-tensors). "{args}" is every argument.
PY_TEMPLATES: dict[str, str] = {
    # tensor metadata
    "size.int": "{0}.size({1})", "size": "list({0}.shape)", "sym_size.int": "{0}.size({1})",
    "dim": "{0}.dim()", "numel": "{0}.numel()", "is_contiguous": "{0}.is_contiguous()",
    "is_floating_point": "{0}.is_floating_point()",
    # conversions
    "Int": "int({0})", "Float": "float({0})", "Bool": "bool({0})", "IntImplicit": "_implicit({0}, 'int')",
    "FloatImplicit": "_implicit({0}, 'float')", "ScalarImplicit": "_implicit({0}, 'scalar')", "item": "{0}.item()",
    "tensor": "_scalar_tensor({0}, {1}, {2}, {3})",
    "as_tensor.list": "_torch.as_tensor({0}, dtype=_dtype({1}), device={2})",
    "device": "_torch.device({args})",
    # scalar arithmetic (TorchScript's int / float semantics are Python's, except where noted)
    "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})",
    "floordiv": "({0} // {1})", "remainder": "({0} % {1})", "__mod__": "({0} % {1})",
    "pow": "_pow({0}, {1})", "pow.int": "_number(_pow({0}, {1}), float)", "neg": "(-{0})", "abs": "abs({0})",
    "max": "max({args})", "min": "min({args})", "floor": "_math_of('floor', {0})", "ceil": "_math_of('ceil', {0})",
    "sqrt": "_math_of('sqrt', {0})", "log": "_math_of('log', {0})", "exp": "_math_of('exp', {0})",
    "round": "_rounded({0})",
    "get_autocast_dtype": "_autocast_dtype({0})",
    "round.int": "_rounded({0})", "isnan": "_math_of('isnan', {0})", "isinf": "_math_of('isinf', {0})",
    # number conversions of number-typed values (a tensor an implicit conversion kept stays one)
    "Int.bool": "_number({0}, int)", "Int.float": "_number({0}, int)", "Int.Scalar": "_number({0}, int)",
    "Float.int": "_number({0}, float)", "Float.bool": "_number({0}, float)", "Float.Scalar": "_number({0}, float)",
    "Bool.int": "_number({0}, bool)", "Bool.float": "_number({0}, bool)",
    "eq": "({0} == {1})", "ne": "({0} != {1})", "lt": "({0} < {1})", "le": "({0} <= {1})",
    "gt": "({0} > {1})", "ge": "({0} >= {1})", "__is__": "({0} is {1})", "__isnot__": "({0} is not {1})",
    "__not__": "(not {0})", "__and__": "({0} & {1})", "__or__": "({0} | {1})", "__xor__": "({0} ^ {1})",
    "sum": "sum({0})", "all": "all({0})", "any": "any({0})",
    "__range_length": "_range_length({0}, {1}, {2})", "__derive_index": "({1} + {0} * {2})",
    # strings
    "str": "str({0})", "format": "_fmt({args})", "percentFormat": "({0} % {1})", "len": "len({0})", "__getitem__": "{0}[{1}]",
    "slice.t": "{0}[{1}:{2}:{3}]", "slice.str": "{0}[{1}:{2}:{3}]", "join": "{0}.join({1})",
    "startswith": "{0}.startswith({1})", "endswith": "{0}.endswith({1})", "lower": "{0}.lower()",
    "upper": "{0}.upper()", "strip": "{0}.strip({1})", "replace": "{0}.replace({1}, {2}, {3})",
    "warn": "_warn({0})",
    # lists (mutating ops change the list they are given: TorchScript lists alias)
    "list": "list({0})", "append": "{0}.append({1})", "_set_item": "_setitem({0}, {1}, {2})",
    "insert": "{0}.insert({1}, {2})", "pop": "_pop({args})", "extend": "{0}.extend({1})",
    "clear": "{0}.clear()", "reverse": "{0}.reverse()", "remove": "{0}.remove({1})",
    "count": "{0}.count({1})", "index": "{0}.index({1})", "copy": "{0}.copy()", "sort": "_list_sort({args})",
    "sorted": "sorted({0})", "__contains__": "({1} in {0})",
    # dicts
    "dict": "dict({args})", "keys": "list({0}.keys())", "values": "list({0}.values())",
    "items": "list({0}.items())", "update": "{0}.update({1})", "get": "_dict_get({args})",
    "setdefault": "{0}.setdefault({1}, {2})", "popitem": "{0}.popitem()",
    # global state
    "is_grad_enabled": "_torch.is_grad_enabled()", "is_autocast_enabled": "_torch.is_autocast_enabled()",
    "is_scripting": "True",
}

# Templates that are right for tensor arguments too; any other template is for scalars only
# (``aten::floor(Tensor)`` must not become ``math.floor``).
TENSOR_TEMPLATES = frozenset((
    "size", "dim", "numel", "len", "__getitem__", "__is__", "__isnot__", "Int", "Float", "Bool", "item",
    "ScalarImplicit", "IntImplicit", "FloatImplicit", "is_contiguous", "is_floating_point", "append",
    "list", "format", "warn", "__contains__", "str", "keys", "values", "items", "_set_item", "insert",
    "pop", "extend", "clear", "reverse", "copy", "dict", "update", "get", "setdefault", "index.list",
))

PRIM_TEMPLATES: dict[str, str] = {
    "prim::ListConstruct": "[{args}]", "prim::TupleIndex": "{0}[{1}]", "prim::DictIndex": "{0}[{1}]",
    "prim::dtype": "_DTYPE_CODE[{0}.dtype]", "prim::device": "{0}.device", "prim::type": "{0}.type",
    "prim::layout": "_LAYOUT_CODE[{0}.layout]", "prim::is_nested": "{0}.is_nested",
    "prim::NumToTensor": "_num_to_tensor({0})", "prim::Uninitialized": "None", "prim::unchecked_cast": "{0}",
    "prim::min": "min({args})", "prim::max": "max({args})", "prim::abs": "abs({0})",
    "prim::requires_grad": "{0}.requires_grad", "prim::is_cuda": "{0}.is_cuda", "prim::is_cpu": "{0}.is_cpu",
    "prim::shape": "list({0}.shape)", "prim::data": "{0}.detach()", "prim::grad": "{0}.grad",
    "prim::Print": "print({args})", "prim::DictConstruct": "_dict_of({args})", "prim::StringIndex": "{0}[{1}]",
    "prim::tolist": "{0}.tolist()", "prim::name": "{0}.name", "prim::index": "{0}.index",
}


def _template_key(name: str, overload: str, arg_types: list[str]) -> Optional[str]:
    tensor_free = not any("Tensor" in t for t in arg_types)
    for key in (f"{name}.{overload}", f"{name}.{overload.split('_')[0]}") if overload else ():
        if key in PY_TEMPLATES and (tensor_free or key in TENSOR_TEMPLATES or name in TENSOR_TEMPLATES):
            return key
    if name in PY_TEMPLATES and (tensor_free or name in TENSOR_TEMPLATES):
        return name
    return None


def op_packet(kind: str) -> Any:
    ns, _, name = kind.partition("::")
    try:
        return getattr(getattr(torch.ops, ns), name)
    except (AttributeError, RuntimeError):
        return None


def resolve_aten(kind: str, schema: Optional[str], tensor_args: Optional[bool] = None) -> Optional[AtenCall]:
    """How to execute ``kind`` (``aten::`` or another operator namespace) with ``schema``; None if
    graphfuser cannot.

    Without a schema (graphs parsed from text), ``tensor_args`` says whether any input is a
    tensor: tensor ops then run through the op table's eager reference or the aten packet.
    """
    name = kind.split("::", 1)[1]
    if schema is None:
        if name in PY_TEMPLATES and (not tensor_args or name in TENSOR_TEMPLATES):
            return AtenCall(template=PY_TEMPLATES[name])
        if tensor_args:
            from . import lookup

            row = lookup(kind)
            if row is not None and row.eager is not None:
                return AtenCall(op=row.eager)      # called with schema-order positional args
        packet = op_packet(kind)
        if packet is None:
            return None
        # (backward graphs' view ops: unsqueeze through its binding, not the packet, which
        # resolves the overload on every call: 0.8 against 3.5 us on the CPU)
        binding = python_binding(name, "") if kind.startswith("aten::") and tensor_args else None
        return AtenCall(op=binding or packet)
    parsed = torch._C.parse_schema(schema)
    overload = parsed.overload_name
    arg_types = [str(a.type) for a in parsed.arguments]
    key = _template_key(name, overload, arg_types) if kind.startswith("aten::") else None
    if key is not None:
        return AtenCall(template=PY_TEMPLATES[key], schema=schema)
    if "..." in schema[:schema.rindex("->")]:
        return None  # a vararg schema (e.g. aten::percentFormat): its OpOverload takes no extra args
    packet = op_packet(kind)
    if packet is None:
        return None
    try:
        op = getattr(packet, overload or "default")
    except (AttributeError, RuntimeError):
        return None
    kw = tuple(a.name if a.kwarg_only else None for a in parsed.arguments)
    if kind.startswith("aten::"):
        op = python_binding(name, overload) or op
    return AtenCall(op=op, kwarg_names=kw, schema=schema)


# Hot tensor ops whose torch Python binding takes the schema's arguments as the host program
# passes them (positional, keyword-only ones by name) and resolves to the same overload: called
# through it, an op costs a third less host time than through the OpOverload's ``_op``, which
# builds a stack from the schema (conv2d 4.1 against 5.8 us, unsqueeze 0.8 against 1.2 us).
# Ops with ScalarType / MemoryFormat / Layout / Device arguments are left out: TorchScript
# passes those as int codes, which the bindings refuse.
_BINDINGS: dict[tuple[str, str], tuple[Any, str]] = {
    **{(n, o): (torch._C._VariableFunctions, n) for n, o in (
        ("conv1d", ""), ("conv2d", ""), ("conv3d", ""), ("conv1d", "padding"), ("conv2d", "padding"),
        ("conv3d", "padding"), ("matmul", ""), ("mm", ""), ("bmm", ""), ("addmm", ""), ("baddbmm", ""),
        ("unsqueeze", ""), ("flatten", "using_ints"), ("transpose", "int"), ("permute", ""), ("reshape", ""),
        ("cat", ""), ("roll", ""), ("layer_norm", ""), ("max_pool2d", ""), ("select", "int"),
        ("batch_norm", ""), ("dropout", ""),
        # binary arithmetic of two tensors (``alpha`` keyword-only in these overloads): a residual
        # add outside a group, 9 against 3 us on the CPU
        ("add", "Tensor"), ("sub", "Tensor"), ("mul", "Tensor"), ("div", "Tensor"))},
    ("linear", ""): (torch._C._nn, "linear"), ("gelu", ""): (torch._C._nn, "gelu"),
    # (CPU, min of 3 x 5000 calls: batch_norm in eval 26.2 -> 15.8 us, attention 44.3 -> 33.0,
    # adaptive_avg_pool2d 10.4 -> 4.3)
    ("scaled_dot_product_attention", ""): (torch._C._nn, "scaled_dot_product_attention"),
    ("adaptive_avg_pool2d", ""): (torch._C._nn, "adaptive_avg_pool2d"),
    ("view", ""): (torch._C.TensorBase, "view"),
    # (a batch norm's running statistics written back after its group: HostOps.copy_)
    ("copy_", ""): (None, "copy_"),
    # a BatchNorm's ``num_batches_tracked.add_(1)``: 8.7 us against 19 us through the op packet
    # on an H100 host, and what eager's ``x.add_(number)`` runs (add_.Tensor of a wrapped number)
    ("add_", "Scalar"): (None, "add_"), ("add_", "Tensor"): (None, "add_"),
    # eager's ``x.mul_(number)`` is mul_.Tensor of a wrapped number, computed in float; the
    # schema's mul_.Scalar first rounds the number to an fp16 / bf16 self's dtype (1e-6 becomes
    # a subnormal), a different result in half of the elements
    ("mul_", "Scalar"): (torch._C.TensorBase, "mul_"),
    # the casts the autocast pass makes explicit (``passes/autocast.py``) between a group and the
    # op that casts its input: 2.8 us through the op packet against 0.3 us through the method on
    # a CPU host, and one runs per autocast op the host program calls (a no-op where the value
    # is already in the reduced type, as a GELU's output before the next linear is)
    ("_autocast_to_reduced_precision", ""): (None, "_autocast_to_reduced_precision"),
    ("_autocast_to_full_precision", ""): (torch._C.TensorBase, "_autocast_to_full_precision"),
}


class HostOps:
    """Host-program versions of ops that skip work eager would do for nothing."""

    @staticmethod
    def copy_(dst: Any, src: Any, non_blocking: bool = False) -> Any:
        """``dst.copy_(src)``, except that a ``src`` over exactly ``dst``'s elements (a group that
        wrote a batch norm's running statistics into the buffer itself, returned as it or as a
        view of it: ``passes/in_place.py``) only counts as a write (its version): a DtoD copy onto
        the same memory cost 12 us of host time per call on an H100 host."""
        # (tensors requiring grad take torch's copy_: its autograd record and its checks, e.g.
        # the error for an in-place write into a leaf that requires grad)
        if isinstance(src, torch.Tensor) and isinstance(dst, torch.Tensor) and not dst.requires_grad \
                and not src.requires_grad and src.data_ptr() == dst.data_ptr() and src.data_ptr() != 0 \
                and src.dtype == dst.dtype and src.shape == dst.shape and src.stride() == dst.stride() \
                and src.device == dst.device:
            increment_version(dst)
            return dst
        return dst.copy_(src, non_blocking)


    @staticmethod
    def _autocast_to_reduced_precision(self: Any, cuda_enabled: bool, cpu_enabled: bool, cuda_dtype: Any,
                                       cpu_dtype: Any) -> Any:
        """The method, with the dtypes TorchScript passes as ScalarType codes made dtypes."""
        return self._autocast_to_reduced_precision(cuda_enabled, cpu_enabled, scalar_type(cuda_dtype), scalar_type(cpu_dtype))

    @staticmethod
    def add_(self: Any, other: Any, alpha: Any = 1) -> Any:
        """``self.add_(other, alpha=alpha)``: the binding takes ``alpha`` by keyword only."""
        return self.add_(other) if alpha == 1 else self.add_(other, alpha=alpha)


def python_binding(name: str, overload: str) -> Any:
    """The torch Python binding that runs ``aten::name.overload`` (``_BINDINGS``), or None."""
    where = _BINDINGS.get((name, overload))
    if where is None:
        return None
    return getattr(HostOps if where[0] is None else where[0], where[1], None)


def describe(call: AtenCall) -> str:
    return call.template or str(call.op)
