"""Autocast as explicit casts, before profiling (TorchScript's autocast pass, for graphfuser).

A scripted function called under ``torch.autocast`` gets its own specialization (the executor
keys its optimized graphs by the autocast state, ``ops.autocast.autocast_state``), whose graph
this pass rewrites once, before decompositions and profiling: every tensor input of an op that
autocast casts (``ops/autocast.py``) goes through an explicit, device-conditional cast node, as
eager would cast it::

    %y = aten::exp(%x)          ->   %x1 = aten::_autocast_to_full_precision(%x, True, False)
                                     %y = aten::exp(%x1)

    %y = aten::linear(%h, ...)  ->   %h1 = aten::_autocast_to_reduced_precision(%h, True, False, 5, 15)
                                     %y = aten::linear(%h1, ...)

The casts are op-table rows (``cast`` kind), so they fuse: a fused group containing ``exp``
computes it in float32 as eager does under autocast, and a LayerNorm group feeding a linear
writes its output in bf16 instead of float32 (the linear's cast is fused into the producer).
A lower-precision cast is inserted only where the argument comes from a fusible op, directly or
through views (elsewhere autocast's own cast, still enabled while the host program runs, does the
same work and keeps its cache of cast weights); through views the cast goes under them and the
views are repeated on its result (``cast(view(ln)) = view(cast(ln))``), so GPT-2's layer norms,
read by its ``Conv1D`` as ``x.view(-1, x.size(-1))``, write bf16 as Llama's do: 38 unfused casts
of activations per call on GPT-2 at 8 x 512 tokens (0.52 ms of 4.4 on an H100) before. Ops outside groups run under the live autocast state, for which
the explicit casts are no-ops; the nodes cast nothing on devices autocast is not enabled for,
so the graph stays right for every input its guards let through.

A graph that switches autocast itself (a Dynamo graph's ``with torch.autocast(...)``, which the FX
frontend hands over as ``_enter_autocast`` / ``_exit_autocast`` Python calls) gets the state of
each region: Hugging Face's rotary embeddings compute their angles under
``autocast(enabled=False)``, in float32, inside a model called under bf16 autocast.
"""
from __future__ import annotations

from typing import Any

import torch

from ..ops.aten import DTYPE_CODES, resolve_aten
from ..ir.graph import Block, Graph, Node, Value
from ..ir.types import TENSOR, Type
from ..log import jit_log
from ..ops import lookup
from ..ops.autocast import AutocastState, describe, policy

_FULL = "aten::_autocast_to_full_precision(Tensor(a) self, bool cuda_enabled, bool cpu_enabled) -> Tensor(a)"
_REDUCED = ("aten::_autocast_to_reduced_precision(Tensor(a) self, bool cuda_enabled, bool cpu_enabled, "
            "ScalarType cuda_dtype, ScalarType cpu_dtype) -> Tensor(a)")
CAST_KINDS = ("aten::_autocast_to_full_precision", "aten::_autocast_to_reduced_precision")


def _const(block: Block, before: Node, value, type_name: str) -> Value:
    node = block.graph.create("prim::Constant", [], [Type(type_name)], {"value": value})
    block.insert_before(before, node)
    return node.output


def _cast(block: Block, node: Node, v: Value, kind: str, enabled: dict[str, bool], dtypes: dict) -> Value:
    args = [v, _const(block, node, enabled["cuda"], "bool"), _const(block, node, enabled["cpu"], "bool")]
    schema = _FULL
    if kind == "aten::_autocast_to_reduced_precision":
        schema = _REDUCED
        args += [_const(block, node, DTYPE_CODES[dtypes.get(dev, dtypes.get("cuda") or dtypes.get("cpu"))], "int")
                 for dev in ("cuda", "cpu")]
    cast = block.graph.create(kind, args, [TENSOR], source=node.source)
    cast.schema = resolve_aten(kind, schema)
    block.insert_before(node, cast)
    return cast.output


def _fusible_source(v: Value) -> bool:
    return v.node is not None and lookup(v.node.kind) is not None


# shape ops a cast commutes with (they move elements, never change them)
_VIEWS = {"aten::view", "aten::reshape", "aten::_unsafe_view", "aten::flatten", "aten::unsqueeze",
          "aten::squeeze", "aten::transpose", "aten::t", "aten::permute", "aten::expand",
          "aten::contiguous", "aten::slice", "aten::select", "aten::narrow"}


def _viewed_fusible(v: Value) -> list[Node]:
    """The chain of views (outermost last) between ``v`` and a fusible op's result, or []:
    GPT-2's ``Conv1D`` reads its layer norm through ``x.view(-1, x.size(-1))``."""
    chain: list[Node] = []
    while v.node is not None and v.node.kind in _VIEWS and v.node.inputs and len(v.node.outputs) == 1:
        chain.append(v.node)
        v = v.node.inputs[0]
        if _fusible_source(v):
            return chain[::-1]
    return []


def _cast_below_views(block: Block, node: Node, chain: list[Node], kind: str, enabled: dict, dtypes: dict) -> Value:
    """Cast the fusible result under ``chain`` and repeat the views on the cast value: the cast
    then fuses into the producing group, whose output is written in the reduced dtype (half
    the bytes), where a cast of the view would run on its own, unfused, on every call."""
    v = _cast(block, node, chain[0].inputs[0], kind, enabled, dtypes)
    for view in chain:
        copy = block.graph.create(view.kind, [v] + list(view.inputs[1:]), [TENSOR], dict(view.attrs),
                                  source=view.source)
        copy.schema = view.schema
        block.insert_before(node, copy)
        v = copy.output
    return v


_ENTER, _EXIT = "_enter_autocast", "_exit_autocast"


def _torchscript_region(node: Node) -> tuple[str, tuple]:
    """A scripted ``with torch.autocast(...)``: ``prim::Enter`` / ``prim::Exit`` of an autocast
    object whose inlined ``__init__`` set ``device``, ``_enabled`` and ``fast_dtype``."""
    obj = node.inputs[0] if node.inputs else None
    if obj is None or not getattr(obj.type, "name", "").endswith("autocast_mode.autocast"):
        return "", ()
    if node.kind == "prim::Exit":
        return _EXIT, ()
    sets = {u.attrs.get("name"): u.inputs[1] for u, _ in obj.uses if u.kind == "prim::SetAttr" and len(u.inputs) > 1}

    def const(name: str) -> Any:
        v = sets.get(name)
        return v.constant() if v is not None and v.is_constant else _UNKNOWN

    dtype = const("fast_dtype")
    dtype = _CODE_DTYPES.get(dtype) if isinstance(dtype, int) and not isinstance(dtype, bool) else \
        dtype if isinstance(dtype, torch.dtype) else None       # (not a constant: the state's own)
    return _ENTER, (const("device"), dtype, const("_enabled"))


def _region_call(node: Node) -> tuple[str, tuple]:
    """(``_enter_autocast`` / ``_exit_autocast`` / "", the region's arguments) of a node that
    switches autocast: a frontend's Python call (a Dynamo graph's ``with torch.autocast(...)``:
    ``prim::PythonOp``) or TorchScript's ``prim::Enter`` / ``prim::Exit`` of an autocast object."""
    if node.kind in ("prim::Enter", "prim::Exit"):
        return _torchscript_region(node)
    call = node.attrs.get("call") if node.kind == "prim::PythonOp" else None
    name = getattr(call, "name", "") or getattr(getattr(call, "fn", None), "__name__", "")
    name = name.rsplit(".", 1)[-1]
    return (name, tuple(getattr(call, "args", ()))) if name in (_ENTER, _EXIT) else ("", ())


def region_switch(node: Node) -> str:
    """``_enter_autocast`` / ``_exit_autocast`` where ``node`` opens or closes an autocast region
    (either frontend's form), else ""."""
    return _region_call(node)[0]


def _entered(dtypes: dict, args: tuple) -> dict:
    """The autocast state inside ``_enter_autocast(device_type, dtype, enabled, cache_enabled)``
    entered in state ``dtypes``; a run-time argument (not a constant) leaves the region without
    casts (``_UNKNOWN``: its groups compute as written)."""
    device, dtype, enabled = (list(args) + [None, None, True])[:3]
    if not isinstance(device, str) or not isinstance(enabled, bool) or \
            (dtype is not None and not isinstance(dtype, torch.dtype)):
        return {_UNKNOWN: True}
    inner = {k: v for k, v in dtypes.items() if k != _UNKNOWN}
    device = device.split(":")[0]
    if not enabled:
        inner.pop(device, None)
    else:
        inner[device] = dtype or inner.get(device) or torch.get_autocast_dtype(device)
    return inner


_UNKNOWN = "?"
_CODE_DTYPES = {code: dt for dt, code in DTYPE_CODES.items()}


def has_regions(graph: Graph) -> bool:
    """Does ``graph`` switch autocast itself (``with torch.autocast(...)`` inside a Dynamo graph)?"""
    return any(_region_call(n)[0] for n in graph.all_nodes())


def _rewrite_block(block: Block, dtypes: dict) -> int:
    done = 0
    stack: list[dict] = []
    for node in list(block.nodes):
        region, args = _region_call(node)
        if region == _ENTER:
            stack.append(dtypes)
            dtypes = _entered(dtypes, args)
            continue
        if region == _EXIT:
            dtypes = stack.pop() if stack else dtypes
            continue
        if _UNKNOWN in dtypes:
            continue
        for b in node.blocks:
            done += _rewrite_block(b, dtypes)
        per_dev = {dev: policy(node.kind, dev) if dev in dtypes else None for dev in ("cuda", "cpu")}
        for which, kind in (("fp32", CAST_KINDS[0]), ("lower", CAST_KINDS[1])):
            enabled = {dev: p == which for dev, p in per_dev.items()}
            if not any(enabled.values()):
                continue
            for i, v in enumerate(list(node.inputs)):
                if not v.type.is_tensor:
                    continue
                if which == "lower" and not _fusible_source(v):
                    chain = _viewed_fusible(v)
                    if chain:
                        node.replace_input(i, _cast_below_views(block, node, chain, kind, enabled, dtypes))
                        done += 1
                    continue
                node.replace_input(i, _cast(block, node, v, kind, enabled, dtypes))
                done += 1
    return done


def insert_autocast(graph: Graph, state: AutocastState) -> int:
    """Make ``state``'s casts explicit in ``graph`` (in place); returns how many were inserted."""
    if not state and not has_regions(graph):
        return 0
    done = _rewrite_block(graph.block, dict(state or ()))
    jit_log("graph_fuser", 1, f"{describe(state)}: {done} explicit cast(s) inserted")
    return done
