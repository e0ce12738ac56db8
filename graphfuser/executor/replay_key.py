"""The parts of a CUDA graph replay key that describe arguments and module state
(``cuda_graphs.GraphReplayer._key``): module attributes' values by kind, and the static
arguments (a Dynamo graph's parameters and buffers) confirmed per call by one C++ check."""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from .lent import _dense

try:     # Dynamo's C++ check of tensors' dtype, device, sizes, strides, requires_grad (StaticKey)
    from torch._C._dynamo.guards import TensorGuards as _TensorGuards
except ImportError:  # pragma: no cover - torch builds without Dynamo
    _TensorGuards = None


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


class StaticKey:
    """The replay key's part for the static arguments (a Dynamo graph's parameters and buffers:
    hundreds of tensors, the same ones on every call): each one's layout, identity and address,
    or None where one is not ``accept``-able (a dense CUDA tensor). Built in Python once, then
    confirmed per call by one C++ check of every tensor's dtype, device, sizes, strides and
    requires_grad (``TensorGuards``, what Dynamo's guards are made of) and a comparison of their
    addresses; a call that fails it builds the part anew. mobilenet_v3_large's 266 static
    tensors took 370 us a call to key in Python, ~90 us this way (CPU tensors, one core)."""

    def __init__(self, positions: frozenset, accept: Callable[[torch.Tensor], bool] = lambda t: t.is_cuda and _dense(t)):
        self.order = sorted(positions)
        self.accept = accept
        self.memo: Optional[tuple] = None       # (tensor count, guards, addresses, part)
        self.built = 0                          # parts built in Python (tests)

    def __call__(self, args: tuple) -> Optional[tuple]:
        tensors = [args[i] for i in self.order if i < len(args) and isinstance(args[i], torch.Tensor)]
        memo = self.memo
        if memo is not None and len(tensors) == memo[0]:
            try:
                if memo[1].check(*tensors) and [t.data_ptr() for t in tensors] == memo[2]:
                    return memo[3]
            except Exception:  # noqa: BLE001 - the Python key below decides
                pass
        self.memo = None
        self.built += 1
        out = []
        for t in tensors:
            if not self.accept(t):
                return None
            out.append((t.shape, t.stride(), t.dtype, t.get_device(), t.requires_grad, id(t), t.data_ptr()))
        part = tuple(out)
        if _TensorGuards is not None and tensors:
            try:
                guards = _TensorGuards(*tensors, dynamic_dims_sizes=[list(t.shape) for t in tensors],
                                       dynamic_dims_strides=[list(t.stride()) for t in tensors])
                self.memo = (len(tensors), guards, [t.data_ptr() for t in tensors], part)
            except Exception:  # noqa: BLE001 - (a torch without it: the Python key on every call)
                pass
        return part
