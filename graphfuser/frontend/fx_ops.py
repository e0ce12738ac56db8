"""The FX half of the vocabulary: which aten op a torch-level FX call is, and its schema.

Dynamo hands over calls of torch functions (``torch._C._nn.linear``, ``torch.rsqrt``),
``torch.nn.functional`` wrappers (``F.layer_norm``, ``F.dropout``), Python operators
(``operator.add`` on tensors) and tensor methods (``x.view(b, t, 4, 16)``, ``x.masked_fill_``).
``aten_call`` turns one into ``(aten qualified name, args, kwargs)`` the way TorchScript would
have spelled it, and ``match_schema`` picks the overload and binds the arguments in schema order,
as TorchScript's overload resolution does (a Tensor parameter takes only tensors, a Scalar takes
numbers, an ``int[1]`` takes one int, a ScalarType takes a dtype). What neither can map stays a
Python call (``frontend/fx.py``): every call still runs.

Example::

    >>> import operator, torch
    >>> aten_call("call_function", operator.mul, (torch.ones(2), 2.0), {})[0]
    'aten::mul'
"""
from __future__ import annotations

import functools
import inspect
import operator
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F
from torch.jit._builtins import _find_builtin

Call = tuple[str, tuple, dict]

# Python operators on tensors -> aten names (TorchScript's spelling of the same operators)
OPERATORS: dict[Callable, str] = {
    operator.add: "aten::add", operator.sub: "aten::sub", operator.mul: "aten::mul",
    operator.truediv: "aten::div", operator.floordiv: "aten::floor_divide", operator.mod: "aten::remainder",
    operator.pow: "aten::pow", operator.matmul: "aten::matmul", operator.neg: "aten::neg",
    operator.abs: "aten::abs", operator.invert: "aten::bitwise_not", operator.and_: "aten::__and__",
    operator.or_: "aten::__or__", operator.xor: "aten::__xor__", operator.lt: "aten::lt",
    operator.le: "aten::le", operator.gt: "aten::gt", operator.ge: "aten::ge", operator.eq: "aten::eq",
    operator.ne: "aten::ne",
    operator.iadd: "aten::add_", operator.isub: "aten::sub_", operator.imul: "aten::mul_",
    operator.itruediv: "aten::div_",
}
# ``number op tensor``: the same op with the operands swapped, where that is eager's result too
_SWAPPED: dict[Callable, str] = {operator.add: "aten::add", operator.mul: "aten::mul", operator.sub: "aten::rsub",
                                 operator.eq: "aten::eq", operator.ne: "aten::ne", operator.lt: "aten::gt",
                                 operator.gt: "aten::lt", operator.le: "aten::ge", operator.ge: "aten::le"}


class _F:
    """How one ``torch.nn.functional`` wrapper calls its aten op: the wrapper's arguments bound by
    name, renamed, with ``inplace`` choosing the in-place op; ``fixed``: arguments that must have
    that value (otherwise the call stays a Python call)."""

    def __init__(self, aten: str, rename: Optional[dict[str, str]] = None, drop: tuple[str, ...] = (),
                 fixed: Optional[dict[str, Any]] = None, inplace: Optional[str] = None,
                 extra: Optional[Callable[[], dict[str, Any]]] = None, bind: Optional[Callable] = None) -> None:
        self.aten, self.rename, self.drop = aten, rename or {}, drop
        self.fixed, self.inplace = fixed or {}, inplace
        self.extra = extra      # arguments the wrapper adds itself (batch norm's cudnn_enabled)
        self.bind = bind        # whose signature binds the call (a ``boolean_dispatch`` wrapper's branch)


_ACT = {"input": "self"}
FUNCTIONAL: dict[Callable, _F] = {
    F.relu: _F("aten::relu", _ACT, inplace="aten::relu_"),
    F.silu: _F("aten::silu", _ACT, inplace="aten::silu_"),
    F.mish: _F("aten::mish", _ACT, inplace="aten::mish_"),
    F.hardswish: _F("aten::hardswish", _ACT, inplace="aten::hardswish_"),
    F.hardsigmoid: _F("aten::hardsigmoid", _ACT, inplace="aten::hardsigmoid_"),
    F.leaky_relu: _F("aten::leaky_relu", _ACT, inplace="aten::leaky_relu_"),
    F.elu: _F("aten::elu", _ACT, inplace="aten::elu_"),
    F.hardtanh: _F("aten::hardtanh", _ACT, inplace="aten::hardtanh_"),
    F.tanh: _F("aten::tanh", _ACT), F.sigmoid: _F("aten::sigmoid", _ACT),
    F.softmax: _F("aten::softmax", _ACT, drop=("_stacklevel",)),
    F.log_softmax: _F("aten::log_softmax", _ACT, drop=("_stacklevel",)),
    F.layer_norm: _F("aten::layer_norm"),
    F.group_norm: _F("aten::group_norm", extra=lambda: {"cudnn_enabled": torch.backends.cudnn.enabled}),
    F.batch_norm: _F("aten::batch_norm", extra=lambda: {"cudnn_enabled": torch.backends.cudnn.enabled}),
    F.dropout: _F("aten::dropout", {"training": "train"}, inplace="aten::dropout_"),
    F.embedding: _F("aten::embedding", {"input": "indices"},
                    fixed={"max_norm": None, "norm_type": 2.0}),
}
if hasattr(F, "rms_norm"):
    FUNCTIONAL[F.rms_norm] = _F("aten::rms_norm")
# the adaptive average pools (torchvision's and timm's classifier heads): the wrapper's size
# argument resolved as ``_list_with_default`` does for a plain int or sequence of ints; a None
# entry (keep the input's size) stays a Python call
_POOL_RANK = {"aten::adaptive_avg_pool1d": 1, "aten::adaptive_avg_pool2d": 2, "aten::adaptive_avg_pool3d": 3}
FUNCTIONAL[F.adaptive_avg_pool2d] = _F("aten::adaptive_avg_pool2d", _ACT)
FUNCTIONAL[F.adaptive_avg_pool3d] = _F("aten::adaptive_avg_pool3d", _ACT)
# the max pools without indices (torchvision's ResNet stem): ``F.max_pool2d`` is a
# ``boolean_dispatch`` on ``return_indices`` whose own signature is ``(*args, **kwargs)``, so the
# call binds to its False branch's; a stride of None (the kernel size) is aten's ``[]``. As a
# Python call it was an op that may read strides: no channels-last plan for the whole graph.
_MAX_POOLS = frozenset(f"aten::max_pool{k}d" for k in (1, 2, 3) if hasattr(F, f"_max_pool{k}d"))
for _name in _MAX_POOLS:
    _k = _name[-2]
    FUNCTIONAL[getattr(F, f"max_pool{_k}d")] = _F(_name, _ACT, fixed={"return_indices": False},
                                                 bind=getattr(F, f"_max_pool{_k}d"))

# methods taking a size as separate ints (``x.view(2, 3)``) as well as one sequence
VARARG_METHODS = frozenset({"view", "reshape", "permute", "expand", "repeat", "tile", "new_zeros", "new_ones",
                            "new_empty", "flip"})
# ``x.float()`` and friends: TorchScript's aten::to(self, dtype, non_blocking, copy, memory_format)
DTYPE_METHODS: dict[str, torch.dtype] = {
    "float": torch.float32, "half": torch.float16, "bfloat16": torch.bfloat16, "double": torch.float64,
    "int": torch.int32, "long": torch.int64, "bool": torch.bool, "short": torch.int16, "char": torch.int8,
    "byte": torch.uint8,
}


def _is_tensor(x: Any) -> bool:
    return isinstance(x, torch.Tensor)


def aten_call(op: str, target: Any, args: tuple, kwargs: dict,
              example: Callable[[Any], Any] = lambda x: x) -> Optional[Call]:
    """``(aten qualified name, args, kwargs)`` for an FX ``call_function`` / ``call_method``, or
    None where there is no aten spelling. ``example(arg)``: what an argument holds (an FX node's
    example value; a constant itself)."""
    if op == "call_method":
        return _method_call(target, args, kwargs, example)
    if op != "call_function":
        return None
    if isinstance(target, torch._ops.OpOverload):
        return (target._schema.name, args, kwargs) if target.namespace == "aten" else None
    if target in OPERATORS:
        tensors = [_is_tensor(example(a)) for a in args]
        if not any(tensors) or kwargs:
            return None
        if len(args) == 2 and not tensors[0]:
            swapped = _SWAPPED.get(target)
            return (swapped, (args[1], args[0]), {}) if swapped else None
        return OPERATORS[target], args, {}
    spec = FUNCTIONAL.get(target)
    if spec is not None:
        return _functional_call(target, spec, args, kwargs)
    name = _find_builtin(target) if callable(target) else None
    if name and name.startswith("aten::"):
        return name, args, kwargs
    return None


def _functional_call(fn: Callable, spec: _F, args: tuple, kwargs: dict) -> Optional[Call]:
    signed = spec.bind or fn
    try:
        bound = _signature(signed).bind(*args, **kwargs)
    except TypeError:
        return None
    bound.apply_defaults()
    named = dict(bound.arguments)
    for k, v in spec.fixed.items():
        if named.pop(k, v) != v:
            return None
    aten = spec.aten
    if named.pop("inplace", False):
        if spec.inplace is None:
            return None
        aten = spec.inplace
    for k in spec.drop:
        named.pop(k, None)
    if aten in ("aten::softmax", "aten::log_softmax") and named.get("dim") is None:
        return None      # the implicit dim of the legacy call: eager's own rule
    if aten == "aten::embedding":
        pad = named.get("padding_idx")
        if pad is not None and not (isinstance(pad, int) and pad >= 0):
            return None     # eager's wrapper resolves a negative index against the weight first
        named["padding_idx"] = -1 if pad is None else pad
    if aten in _POOL_RANK:
        size = named.get("output_size")
        if isinstance(size, int):
            named["output_size"] = [size] * _POOL_RANK[aten]
        elif not (isinstance(size, (list, tuple)) and len(size) == _POOL_RANK[aten]
                  and all(isinstance(k, int) for k in size)):
            return None
        else:
            named["output_size"] = list(size)
    if aten in _MAX_POOLS and named.get("stride") is None:
        named["stride"] = []
    if spec.extra is not None:
        named.update(spec.extra())
    out = {spec.rename.get(k, k): v for k, v in named.items()}
    overloads = schemas(aten)
    first = next(iter(_signature(signed).parameters))
    if overloads and first in out and overloads[0].arguments[0].name != first:
        out[overloads[0].arguments[0].name] = out.pop(first)     # dropout's input is dropout_'s self
    return aten, (), out


@functools.lru_cache(maxsize=None)
def _signature(fn: Callable) -> inspect.Signature:
    return inspect.signature(fn)


def _method_call(name: str, args: tuple, kwargs: dict, example: Callable[[Any], Any]) -> Optional[Call]:
    if not args or not _is_tensor(example(args[0])):
        return None
    self, rest = args[0], tuple(args[1:])
    if name in DTYPE_METHODS and not rest and set(kwargs) <= {"memory_format"}:
        return "aten::to", (self, DTYPE_METHODS[name]), dict(kwargs)
    if name in VARARG_METHODS and rest and isinstance(example(rest[0]), (int, torch.SymInt)):
        rest = (list(rest),)
    if name.startswith("__") or not name.replace("_", "").isalnum():
        return None
    return f"aten::{name}", (self,) + rest, dict(kwargs)


# -- overload resolution ------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def schemas(qualname: str) -> tuple:
    """The overloads of ``qualname`` a call can resolve to (``out=`` variants left out)."""
    try:
        found = torch._C._jit_get_schemas_for_operator(qualname)
    except RuntimeError:
        return ()
    return tuple(s for s in found if not any(a.name == "out" for a in s.arguments) and "out" not in s.overload_name)


_SYM = (torch.SymInt, torch.SymFloat, torch.SymBool)


def _fits(t: Any, x: Any, codes: bool = True) -> bool:
    """Does Python value ``x`` (an example value) fit JIT type ``t``? ``codes``: an int parameter
    takes a dtype, layout or memory format (TorchScript's ScalarType / Layout / MemoryFormat are
    ints), never inside a list (``x.view(torch.half)`` is no size)."""
    kind = t.kind()
    if kind == "OptionalType":
        return x is None or _fits(t.getElementType(), x)
    if x is None:
        return False
    if kind == "TensorType":
        return _is_tensor(x)
    if _is_tensor(x):
        return False
    if kind == "NumberType":
        return isinstance(x, (int, float, complex, torch.SymInt, torch.SymFloat, torch.SymBool))
    if kind == "IntType":
        return (isinstance(x, (int, torch.SymInt)) and not isinstance(x, bool)) or \
            codes and isinstance(x, (torch.dtype, torch.layout, torch.memory_format))
    if kind == "FloatType":
        return isinstance(x, (float, int, torch.SymFloat, torch.SymInt)) and not isinstance(x, bool)
    if kind == "BoolType":
        return isinstance(x, (bool, torch.SymBool))
    if kind == "StringType":
        return isinstance(x, str)
    if kind == "DeviceObjType":
        return isinstance(x, (torch.device, str))
    if kind == "ListType":
        if isinstance(x, (list, tuple, torch.Size)):
            return all(_fits(t.getElementType(), i, False) for i in x)
        return False
    return False


def _fits_arg(arg: Any, x: Any) -> bool:
    """Like ``_fits``, and an ``int[N]`` parameter takes one int, as TorchScript's does."""
    if _fits(arg.type, x):
        return True
    t = arg.type
    if t.kind() == "OptionalType":
        t = t.getElementType()
    return t.kind() == "ListType" and arg.N is not None and _fits(t.getElementType(), x, False)


def match_schema(qualname: str, args: tuple, kwargs: dict, example: Callable[[Any], Any] = lambda x: x,
                 only: Any = None) -> Optional[tuple[Any, list[tuple[Any, Any]]]]:
    """The first overload of ``qualname`` the call fits, with its arguments in schema order as
    ``(argument, value or DEFAULT)`` pairs; None when none fits. ``only``: the one schema to try
    (a call of an ``OpOverload`` names its overload)."""
    overloads = (only,) if only is not None else schemas(qualname)
    for schema in overloads:
        bound = _bind(schema, args, kwargs, example)
        if bound is not None:
            return schema, bound
    return None


class _Default:
    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT = _Default()


def _bind(schema: Any, args: tuple, kwargs: dict, example: Callable[[Any], Any]) -> Optional[list]:
    params = list(schema.arguments)
    positional = [a for a in params if not a.kwarg_only]
    if len(args) > len(positional) or any(k not in {a.name for a in params} for k in kwargs):
        return None
    out = []
    for i, a in enumerate(params):
        if i < len(args) and not a.kwarg_only:
            value = args[i]
        elif a.name in kwargs:
            value = kwargs[a.name]
        elif a.has_default_value():
            out.append((a, DEFAULT))
            continue
        else:
            return None
        if not _fits_arg(a, example(value)):
            return None
        out.append((a, value))
    return out


def mutates(qualname: str) -> bool:
    """An in-place aten op (its name ends in ``_``)."""
    base = qualname.split("::", 1)[1]
    return base.endswith("_") and not base.endswith("__")
