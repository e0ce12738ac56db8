"""Prepared weights kept across calls (``PYTORCH_NVFUSER_ENABLE=weight_cache``; off by default).

Under bf16 / fp16 autocast, every inference call casts every fp32 weight of a matmul or
convolution to the autocast dtype again (autocast's own cache lives for one ``with`` region):
GPT-2 at 8 x 512 tokens spends 0.87 ms of a 4.3 ms forward on an H100 in 134 weight casts.
A CUDA linear padded by ``passes/gemm_pad.py`` pads its cast weight on every call too, and a
convolution planned channels-last (``passes/conv_layout.py``) converts its weight.

With the knob on, a no-grad specialization computes each such chain once per parameter and
keeps the result: the chain (casts, pads, layout conversions of one parameter, constants
otherwise) becomes one ``prim::PythonOp`` calling a ``WeightCache``, whose entry per parameter
holds the prepared tensor with the parameter's version counter and data pointer. A later call
returns the kept tensor while both are unchanged, and recomputes it in place (the same
address, which a captured CUDA graph reads) when the parameter changed: an optimizer step,
``load_state_dict``, any in-place op on it, ``param.data = t``. A replayed CUDA graph runs no
host code, so the replayer refreshes the entries of its graph before each replay.

Why it is opt-in: a write through ``param.data`` (``p.data.mul_(0.9)``, some EMA code) bumps the
version counter of the temporary ``.data`` tensor, not the parameter's, and nothing cheaper than
reading the weight could see it; the kept weight would then be stale. Inductor's weight freezing
(``torch._inductor.config.freezing``) is opt-in for the same reason. What it costs: the prepared
copies stay allocated (half the fp32 weights' size under bf16), given back with captured CUDA
graphs when CUDA runs out of memory.

Only chains whose every consumer is a matmul / convolution (the autocast ``lower`` ops) are
kept, so no kept tensor ever escapes into the caller's hands or is written in place.
"""
from __future__ import annotations

import weakref
from typing import Any, Callable

import torch

from ..config import config
from ..ir.graph import Graph, Node, Value
from ..ir.types import TensorType, Type
from ..log import jit_log
from ..ops.aten import DTYPE_CODES, resolve_aten
from ..ops.autocast import LOWER
from .handlers import PyArg, PyCall
from .hostgen import build_program

_PREP = ("aten::to", "aten::constant_pad_nd", "graphfuser::pad_rows", "aten::contiguous",
         "aten::_autocast_to_reduced_precision")
_TO = ("aten::to.dtype(Tensor(a) self, ScalarType dtype, bool non_blocking=False, bool copy=False, "
       "MemoryFormat? memory_format=None) -> Tensor(a)")
_LIVE: "weakref.WeakSet[WeightCache]" = weakref.WeakSet()
STATS = {"hits": 0, "refreshes": 0, "fills": 0}


class _Kept:
    __slots__ = ("ref", "version", "ptr", "value", "retired")

    def __init__(self, p: torch.Tensor, value: torch.Tensor) -> None:
        self.ref, self.version, self.ptr, self.value = weakref.ref(p), p._version, p.data_ptr(), value
        self.retired: list[torch.Tensor] = []   # replaced values a captured CUDA graph may still read


class WeightCache:
    """One chain of weight preparation (``compute``: a host program of the chain) and what it
    gave for each parameter it was called with."""

    def __init__(self, compute: Callable[[torch.Tensor], torch.Tensor], where: str) -> None:
        self.compute, self.where = compute, where
        self.kept: dict[int, _Kept] = {}
        _LIVE.add(self)

    def __call__(self, p: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() and p.requires_grad:
            return self.compute(p)          # a call under grad: autograd must see the chain
        k = self.kept.get(id(p))
        if k is None or k.ref() is not p:
            value = self.compute(p)
            if value is p:                  # the chain changed nothing (a layout it had already)
                return value
            self.kept[id(p)] = _Kept(p, value)
            STATS["fills"] += 1
            return value
        if k.version != p._version or k.ptr != p.data_ptr():
            self._refresh(k, p)
        else:
            STATS["hits"] += 1
        return k.value

    def _refresh(self, k: _Kept, p: torch.Tensor) -> None:
        fresh = self.compute(p)
        if fresh.shape == k.value.shape and fresh.stride() == k.value.stride() and fresh.dtype == k.value.dtype:
            k.value.copy_(fresh)            # in place: a captured CUDA graph reads this address
        else:
            k.retired.append(k.value)
            k.value = fresh
        k.version, k.ptr = p._version, p.data_ptr()
        STATS["refreshes"] += 1

    def refresh(self) -> None:
        """Bring every kept tensor up to date with its parameter (before a CUDA graph replay)."""
        for key, k in list(self.kept.items()):
            p = k.ref()
            if p is None:
                del self.kept[key]
            elif k.version != p._version or k.ptr != p.data_ptr():
                self._refresh(k, p)

    def __repr__(self) -> str:
        return f"weight_cache({self.where})"


def caches_of(graph: Graph) -> list[WeightCache]:
    """The weight caches ``graph`` calls (a replayer refreshes them before each replay)."""
    out = []
    for n in graph.all_nodes():
        call = n.attrs.get("call") if n.kind == "prim::PythonOp" else None
        fn = getattr(call, "fn", None)
        if isinstance(fn, WeightCache):
            out.append(fn)
    return out


def release_weight_caches() -> int:
    """Drop every kept tensor (out of CUDA memory); returns how many were dropped."""
    n = 0
    for c in list(_LIVE):
        n += len(c.kept)
        c.kept.clear()
    return n


# -- the rewrite -----------------------------------------------------------------------------
def _parameters(graph: Graph, module: Any, static: tuple[int, ...], trainable: bool = False) -> list[Value]:
    """Graph values that hold the module's parameters and buffers: the frontend's static inputs
    (a Dynamo graph's), or ``prim::GetAttr`` reads from the module input (TorchScript's); with
    ``trainable``, those that require grad too (leaves, whose gradient autograd accumulates)."""
    found = [graph.inputs[i] for i in static if i < len(graph.inputs)]
    if module is not None and graph.inputs:
        found += [n.output for n in graph.all_nodes()
                  if n.kind == "prim::GetAttr" and n.output.type.is_tensor]
    return [v for v in found if isinstance(v.type, TensorType) and v.type.dtype is not None
            and v.type.dtype.is_floating_point and (trainable or v.type.requires_grad is False)]


def _lower(kind: str, device: str) -> bool:
    return kind.startswith("aten::") and kind[6:] in LOWER.get(device, ())


def _explicit_casts(graph: Graph, p: Value) -> None:
    """Autocast's cast of ``p`` for each matmul / convolution that ran in a lower dtype (its
    profiled result's), made an explicit ``aten::to`` the chain then starts with."""
    t = p.type
    if t.device is None:
        return
    for user, i in list(p.uses):
        out = user.outputs[0].type if user.outputs else None
        if not (_lower(user.kind, t.device.type) and isinstance(out, TensorType) and out.dtype in
                (torch.float16, torch.bfloat16) and t.dtype == torch.float32):
            continue
        block = user.owner
        consts = []
        for value, tn in ((DTYPE_CODES[out.dtype], "int"), (False, "bool"), (False, "bool"), (None, "NoneType")):
            c = graph.create("prim::Constant", [], [Type(tn)], {} if value is None else {"value": value})
            block.insert_before(user, c)
            consts.append(c.output)
        cast = graph.create("aten::to", [p] + consts, [t.with_dtype(out.dtype)], source=user.source)
        cast.schema = resolve_aten("aten::to", _TO)
        block.insert_before(user, cast)
        user.replace_input(i, cast.output)


def _chain(p: Value) -> list[tuple[Node, list[Node]]]:
    """(the last node, every node in order) of each preparation chain starting at ``p``: prep ops
    whose only non-constant input is the chain's value, ending where every consumer is a matmul
    or convolution that takes it as an operand."""
    chains = []
    for user, i in list(p.uses):
        nodes, v = [], p
        node = user
        while node.kind in _PREP and node.inputs[0] is v and all(x.is_constant for x in node.inputs[1:]) \
                and len(node.outputs) == 1:
            nodes.append(node)
            v = node.output
            if len(v.uses) != 1:
                break
            node = v.uses[0][0]
        if not nodes:
            continue
        end = nodes[-1].output
        device = p.type.device.type if p.type.device is not None else ""
        if end.uses and all(_lower(u.kind, device) for u, _ in end.uses) and not _returned(end):
            chains.append((nodes[-1], nodes))
    return chains


def _returned(v: Value) -> bool:
    return v in v.block.graph.outputs if v.block is not None and v.block.graph is not None else False


def _program(nodes: list[Node], p: Value) -> Callable[[torch.Tensor], torch.Tensor]:
    from ..ir.clone import clone_node

    g = Graph()
    vm: dict[Value, Value] = {p: g.add_input("w", p.type)}
    for n in nodes:
        for x in n.inputs:
            if x not in vm:
                vm[x] = g.constant(x.constant(), x.type)
        clone_node(n, g, vm, g.block)
    g.block.returns = [vm[nodes[-1].output]]
    return build_program(g, name="prepare_weight").fn


def keep_weights(graph: Graph, module: Any, static: tuple[int, ...]) -> int:
    """Replace the weight preparation chains of a profiled no-grad ``graph`` by weight caches
    (in place, before the partition); returns how many chains."""
    if not config.is_enabled("weight_cache"):
        return 0
    done = 0
    for p in _parameters(graph, module, static):
        _explicit_casts(graph, p)
        for last, nodes in _chain(p):
            cache = WeightCache(_program(nodes, p), last.where())
            block = last.owner
            call = graph.create("prim::PythonOp", [p], [last.output.type],
                                {"call": PyCall("weight_cache", fn=cache, args=(PyArg(0),), effects=False)},
                                source=last.source)
            block.insert_after(last, call)
            out = last.output
            for u, i in list(out.uses):
                u.replace_input(i, call.output)
            done += 1
            jit_log("graph_fuser", 2, f"weight kept across calls: {last.where()}")
    return done
