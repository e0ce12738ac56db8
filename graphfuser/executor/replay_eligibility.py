"""Whether a graph's steady calls may be replayed as a CUDA graph (``cuda_graphs.py``'s first
condition, checked once per graph): no in-place write into a graph input, no print or
``SetAttr``, no write into a container that is neither the graph's own nor a module attribute, no
call into Python other than those its frontend marks free of effects, autocast and grad-mode
regions the graph closes itself, module attributes read only through ``prim::GetAttr`` chains
(``_chains``: what the replay key follows). The module docstring of ``cuda_graphs.py`` says why
each condition is there; this module is the graph analysis, that one the capture and replay."""
from __future__ import annotations

from typing import Optional

import torch

from ..ir.graph import Graph, Node, Value
from ..passes.autocast import region_switch
from .handlers import PyArg

_PYTHON_CALLS = {"prim::CallMethod", "prim::CallFunction", "prim::PythonOp"}
_SIDE_EFFECTS = {"prim::SetAttr", "prim::Print"}
# host-side container writes: replayable when the container is the graph's own (a list being built)
_CONTAINER_WRITES = {"aten::append", "aten::_set_item", "aten::insert", "aten::pop", "aten::clear", "aten::extend",
                     "aten::remove", "aten::__setitem__"}
_RUNNING_STATS = {"aten::batch_norm", "aten::_batch_norm_impl_index", "aten::native_batch_norm",
                  "aten::instance_norm", "aten::cudnn_batch_norm"}


def _pure_call(node: Node) -> bool:
    """A ``prim::PythonOp`` its frontend marks free of effects (``x[[0, 2]]``, arithmetic on sizes):
    a function of the call's arguments, which the key holds; what else could make a replay differ
    is checked at capture (random draws, host reads of device values, aliased outputs)."""
    call = node.attrs.get("call") if node.kind == "prim::PythonOp" else None
    return call is not None and getattr(call, "effects", True) is False


def _mutating(node: Node) -> bool:
    k = node.kind
    return (k.startswith("aten::") and k.endswith("_") and not k.endswith("__")) or k == "aten::copy_"


def _constant_false(v: Value) -> bool:
    return v.is_constant and v.constant() is False


def ineligible_reason(graph: Graph, has_module: bool, static: tuple[int, ...] = ()) -> Optional[str]:
    """Why replaying a captured call of ``graph`` could differ from running it (None: it cannot).
    ``has_module``: the graph's first input is the scripted module. ``static``: input positions
    that hold the module's parameters and buffers (a Dynamo graph's): like a TorchScript graph's
    ``prim::GetAttr`` reads, a replay reads and writes them in place (batch norm's running
    statistics, ``num_batches_tracked += 1``), never through a static copy. Random ops are checked
    when a call is captured (``GraphReplayer._capture``): only a call that draws makes a
    difference, and a dropout in eval or a stochastic depth's untaken branch draws nothing."""
    held = frozenset(graph.inputs[i] for i in static if i < len(graph.inputs))
    chained = {graph.inputs[0]} if has_module and graph.inputs else set()
    depth = 0
    modes: list[bool] = []
    for n in graph.all_nodes():
        k = n.kind
        mode = _grad_switch(n)
        if mode is not None:
            # a grad-mode region the graph opens and closes (a Dynamo graph's ``with
            # torch.no_grad():``, Hugging Face's rotary embeddings): like an autocast region, it
            # decides which ops autograd records, the same at every call of the specialization
            modes.append(mode)
            continue
        switch = region_switch(n)
        if switch:
            # an autocast region the graph opens and closes: it decides how the captured ops
            # dispatched, and the specialization is already per autocast state of the call
            depth += 1 if switch.startswith("_enter") else -1
            if depth < 0:
                return "an autocast region closed that the graph did not open"
            continue
        if k in _PYTHON_CALLS and not _pure_call(n):
            call = n.attrs.get("call")
            what = getattr(call, "name", None) or getattr(getattr(call, "fn", None), "__name__", None) \
                or n.attrs.get("name")
            return f"Python call {k}" + (f" ({what})" if what else "")
        if k in _SIDE_EFFECTS:
            return f"side effect {k}"
        if k in _CONTAINER_WRITES and _origin(n.inputs[0], graph, held) not in ("fresh", "attr"):
            return f"{k} into a list or dict that is not made by the graph or held by the module"
        if k in _RUNNING_STATS and len(n.inputs) > 5 and not _constant_false(n.inputs[5]) \
                and any(not (v.is_constant and v.constant() is None) and _origin(v, graph, held) != "attr"
                        for v in n.inputs[3:5]):
            return f"running-stats update of an input by {k}"
        if k == "prim::GetAttr":
            if n.inputs[0] not in chained:
                return "attribute of an object that is not a submodule"
            chained.add(n.outputs[0])
        if _mutating(n) and _origin(n.inputs[0], graph, held) in ("input", "unknown"):
            return f"in-place {k} on a value that may be an input"
    if modes and modes[-1] == modes[0]:
        return "a grad-mode switch the graph does not undo"
    return "an autocast region left open" if depth else None


def _grad_switch(n: Node) -> Optional[bool]:
    """The constant mode of a ``torch._C._set_grad_enabled(mode)`` call, else None. Dynamo
    switches only where the mode changes, and switches back before the graph ends: the first
    switch's mode is the opposite of the call's, the last one's the call's own."""
    call = n.attrs.get("call") if n.kind == "prim::PythonOp" else None
    if call is None or getattr(call, "fn", None) is not torch._C._set_grad_enabled \
            or len(call.args) != 1 or call.kwargs:
        return None
    x = call.args[0]
    if isinstance(x, PyArg):
        v = n.inputs[x.index]
        x = v.constant() if v.is_constant else None
    return x if isinstance(x, bool) else None


def _subgraphs(n: Node) -> list[Graph]:
    return [n.subgraph] if n.subgraph is not None else []


def _origin(v: Value, graph: Graph, held: frozenset = frozenset()) -> str:
    """Where the memory of ``v`` comes from: "fresh" (made by this graph), "attr" (a module
    attribute, or an input in ``held``, the module tensors a Dynamo graph takes as inputs: replay
    writes it in place at the same address, as the host program does), "input" or "unknown" (a
    graph input, or a value read out of a list, tuple or control flow). Follows every op that may
    return a view or its input."""
    for _ in range(64):
        node = v.node
        if node is None:
            if v in held:
                return "attr"
            return "input" if v in graph.inputs else "unknown"
        if node.kind == "prim::GetAttr":
            return "attr"
        if node.kind == "prim::If":
            k = node.outputs.index(v)
            kinds = {_origin(b.returns[k], graph, held) for b in node.blocks}
            return kinds.pop() if len(kinds) == 1 else "unknown"
        if node.kind in ("prim::ListConstruct", "prim::DictConstruct", "prim::TupleConstruct"):
            return "fresh"
        if node.kind in ("prim::ListUnpack", "prim::TupleUnpack", "prim::TupleIndex", "aten::__getitem__",
                         "prim::unchecked_cast", "prim::Loop"):
            return "unknown"
        if not any(i.type.is_tensor for i in node.inputs):
            return "fresh"
        if not _may_alias_input(node):
            return "fresh"
        v = next(i for i in node.inputs if i.type.is_tensor)
    return "unknown"


def _may_alias_input(node: Node) -> bool:
    from ..passes.aliasing import may_alias_input

    try:
        return bool(may_alias_input(node))
    except Exception:  # noqa: BLE001 - unknown schema: assume it may
        return True


def _chains(graph: Graph, has_module: bool) -> list[tuple[int, str]]:
    """The module attributes the graph reads, as (parent index, name) in read order; index -1 is
    the module itself, index i the i-th entry's value."""
    out: list[tuple[int, str]] = []
    where: dict[Value, int] = {}
    if has_module and graph.inputs:
        where[graph.inputs[0]] = -1
    for n in graph.all_nodes():
        if n.kind == "prim::GetAttr" and n.inputs[0] in where:
            key = (where[n.inputs[0]], n.attrs["name"])
            if key not in out:
                out.append(key)
            where[n.outputs[0]] = out.index(key)
    return out


_FUSED_KINDS = ("prim::CudaFusionGroup", "prim::CpuFusionGroup")


def launches(graph: Graph) -> int:
    """How many kernels a call of ``graph`` may launch, counted high: its fusion groups and aten
    ops (not a guard's fallback graph, which runs where the fused group does not). A
    function of one fused group (``(x + 1).relu()``) launches one kernel: a replay would enqueue
    its input copies and the graph launch in place of that one launch, and computing the replay key
    alone took about 1 us per call on an H200 host, where the call takes 10."""
    return sum(1 for n in graph.all_nodes() if n.kind.startswith("aten::") or n.kind in _FUSED_KINDS)
