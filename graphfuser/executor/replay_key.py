"""The parts of a CUDA graph replay key that describe arguments and module state
(``cuda_graphs.GraphReplayer._key``): module attributes' values by kind, and the static
arguments (a Dynamo graph's parameters and buffers) confirmed per call by one C++ check."""
from __future__ import annotations

import operator
from typing import Any, Callable, Optional

import torch

from .lent import _dense

try:     # Dynamo's C++ check of tensors' dtype, device, sizes, strides, requires_grad (StaticKey)
    from torch._C._dynamo.guards import TensorGuards as _TensorGuards
except ImportError:  # pragma: no cover - torch builds without Dynamo
    _TensorGuards = None

# torch's C++ comparison of tensors' addresses with recorded ones (CUDA builds)
_PTRS_EQUAL = getattr(torch._C, "_tensors_data_ptrs_at_indices_equal", None)


def _container_state(obj: Any) -> Optional[tuple]:
    """The key part of a list, tuple or dict module attribute: its items (tensors by identity,
    address and layout, nested containers alike), or None where an item is of another kind."""
    if isinstance(obj, dict):
        items = []
        for k, v in obj.items():
            if not isinstance(k, (bool, int, float, str)) and k is not None:
                return None
            s = _value_state(v)
            if s is None:
                return None
            items.append((k, s))
        return (dict, tuple(items))
    if isinstance(obj, (list, tuple)):
        items = []
        for v in obj:
            s = _value_state(v)
            if s is None:
                return None
            items.append(s)
        return (type(obj), tuple(items))
    return None


def _value_state(v: Any) -> Optional[tuple]:
    if isinstance(v, torch.Tensor):
        if not v.is_cuda:
            return None
        return (id(v), v.data_ptr(), v.shape, v.stride(), v.dtype)
    if v is None or isinstance(v, (bool, int, float, str)):
        return (type(v), v)
    return _container_state(v)


class _Memo:
    """A built static part and what confirms it on the next call: the argument count, the
    positions of its tensors (one C-level ``itemgetter``), their ``TensorGuards``, their
    addresses, and the static positions that held no tensor with what they held."""
    __slots__ = ("nargs", "get", "others", "values", "guards", "ptrs", "same_addresses", "part")


def _values(args: tuple, positions: list) -> tuple:
    """The key of static positions that hold no tensor (None, a number, a string): each one's
    type and value; ``object`` for the type of any other value, which has no key."""
    return tuple((type(a), a) if a is None or isinstance(a, (bool, int, float, str)) else (object, None)
                 for a in (args[i] for i in positions))


def _getter(positions: list) -> Callable[[tuple], tuple]:
    if not positions:
        return lambda args: ()
    if len(positions) == 1:
        i = positions[0]
        return lambda args: (args[i],)
    return operator.itemgetter(*positions)


def _address_check(tensors: tuple, ptrs: list) -> Callable[[tuple], bool]:
    """A check that ``tensors``' addresses are still ``ptrs``: torch's C++ comparison where this
    build has it (CUDA builds; what Inductor's CUDA graph trees confirm their static inputs
    with), else one ``data_ptr`` call per tensor."""
    if _PTRS_EQUAL is not None and tensors:
        idx = list(range(len(tensors)))
        try:
            if _PTRS_EQUAL(list(tensors), ptrs, idx):
                return lambda ts: _PTRS_EQUAL(list(ts), ptrs, idx)
        except Exception:  # noqa: BLE001 - (CPU tensors, another signature): the Python check
            pass
    return lambda ts: list(map(torch.Tensor.data_ptr, ts)) == ptrs


class StaticKey:
    """The replay key's part for the static arguments (a Dynamo graph's parameters and buffers:
    hundreds of tensors, the same ones on every call): each one's layout, identity and address,
    or None where one is not ``accept``-able (a dense CUDA tensor). Built in Python once, then
    confirmed per call without a Python loop over the tensors: one ``itemgetter`` picks them,
    one C++ check compares every tensor's dtype, device, sizes, strides and requires_grad
    (``TensorGuards``, what Dynamo's guards are made of) and one compares their addresses; a
    call that fails it builds the part anew. mobilenet_v3_large's 266 static tensors took 370 us
    a call to key in Python, ~90 us with the C++ layout check and a Python list of addresses
    (CPU tensors, one core), ~50 us with the getter and the address check in C++ as well."""

    def __init__(self, positions: frozenset, accept: Callable[[torch.Tensor], bool] = lambda t: t.is_cuda and _dense(t)):
        self.order = sorted(positions)
        self.accept = accept
        self.memo: Optional[_Memo] = None
        self.built = 0                          # parts built in Python (tests)

    def __call__(self, args: tuple) -> Optional[tuple]:
        memo = self.memo
        if memo is not None and len(args) == memo.nargs:
            try:
                tensors = memo.get(args)
                if (memo.guards.check(*tensors) and memo.same_addresses(tensors)
                        and (not memo.others or _values(args, memo.others) == memo.values)):
                    return memo.part
            except Exception:  # noqa: BLE001 - the Python key below decides
                pass
        self.memo = None
        self.built += 1
        positions = [i for i in self.order if i < len(args)]
        held = [i for i in positions if isinstance(args[i], torch.Tensor)]
        tensors = tuple(args[i] for i in held)
        out = []
        for t in tensors:
            if not self.accept(t):
                return None
            out.append((t.shape, t.stride(), t.dtype, t.get_device(), t.requires_grad, id(t), t.data_ptr()))
        tensor_positions = set(held)
        others = [i for i in positions if i not in tensor_positions]
        values = _values(args, others)
        if any(t is object for t, _ in values):
            return None
        part = (tuple(out), values)
        if _TensorGuards is not None:
            try:
                memo = _Memo()
                memo.nargs, memo.get, memo.part = len(args), _getter(held), part
                memo.others, memo.values = others, values
                memo.guards = _TensorGuards(*tensors, dynamic_dims_sizes=[list(t.shape) for t in tensors],
                                            dynamic_dims_strides=[list(t.stride()) for t in tensors])
                memo.ptrs = [t.data_ptr() for t in tensors]
                memo.same_addresses = _address_check(tensors, memo.ptrs)
                self.memo = memo
            except Exception:  # noqa: BLE001 - (a torch without it: the Python key on every call)
                pass
        return part
