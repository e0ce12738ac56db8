"""Batched weight casts: under autocast, the casts of many weights in one launch (and under
grad their gradients' casts back).

Every autocast call of a matmul or convolution casts its fp32 weight to the autocast dtype, one
copy kernel per weight per call. GPT-2 at 8 x 512 tokens (bf16, H100) ran 134 such copies in
0.86 ms of a 4.3 ms forward, most of them too small to reach the memory's bandwidth (a bias is
768 elements: a launch and a tail). Here a CUDA specialization makes those casts explicit
(``weight_cache._explicit_casts``, the same ``aten::to`` autocast would make) and replaces runs
of them by one call that allocates every result (``empty_like``: the weight's own strides, as
the cast's) and fills them with one ``torch._foreach_copy_``, a multi-tensor kernel that takes a
different source and destination dtype.

    %a = aten::to(%w1, bf16) ... %b = aten::to(%w2, bf16) ...
        ->  %t = prim::PythonOp[call=weight_casts](%w1, %w2)   (before the first of them)
            %a, %b = prim::TupleUnpack(%t)

Same values bit for bit (a round-to-nearest-even cast either way), and the weights are read when
the casts would have read them within the same call: no forward changes a weight in its middle
(one that writes a weight keeps that weight's casts where they are). A batch is cut at
``BATCH_BYTES`` of results so that casts made early stay a bounded amount of memory ahead of their use (eager's autocast keeps every cast of a parameter
that requires grad until its region ends; one that does not is freed after its op). Casts of the
same weight to the same dtype in one batch are made once, as autocast's cache does. Only the
top-level block's casts of the graph's weights are batched: a Dynamo graph's parameter inputs,
or a TorchScript module's ``prim::GetAttr`` reads, which are read again where the batch runs.
Under grad the batch is one autograd node whose backward casts the gradients back to the
weights' dtype by one multi-tensor copy too (``ToCopyBackward``'s values, one launch for the batch
instead of one per weight). On by default for CUDA;
``PYTORCH_NVFUSER_DISABLE=weight_cast_batching`` turns it off. The opt-in weight cache
(``weight_cache.py``), when on, has taken these chains before this runs.
"""
from __future__ import annotations

from typing import Any

import torch

from ..config import config
from ..ir.graph import Graph, Node, Value
from ..ir.types import Type
from ..log import jit_log
from .handlers import PyArg, PyCall
from .weight_cache import _explicit_casts, _parameters

DEVICES = ("cuda",)             # where a cast is a kernel launch worth batching (tests add "cpu")
BATCH_BYTES = 64 << 20          # results of one batch, at most (a single larger cast stays alone)
_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
STATS = {"batches": 0, "casts": 0}


class BatchedCast:
    """``fn(*weights)`` -> a tuple of each weight cast to its dtype (``dtypes``), by one
    ``torch._foreach_copy_`` per (source, result) dtype pair. Under grad, one autograd node
    (``_Casts``) whose backward casts the gradients back the same way."""

    def __init__(self, dtypes: tuple[torch.dtype, ...]) -> None:
        self.dtypes = dtypes

    def __call__(self, *weights: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if not (torch.is_grad_enabled() and any(w.requires_grad for w in weights)):
            return _cast_all(weights, self.dtypes)
        # the weights that require grad through one autograd node; the others' casts require none
        grad = [k for k, w in enumerate(weights) if w.requires_grad]
        outs = list(_Casts.apply(tuple(self.dtypes[k] for k in grad), *(weights[k] for k in grad)))
        rest = [k for k, w in enumerate(weights) if not w.requires_grad]
        if not rest:
            return tuple(outs)
        with torch.no_grad():
            made = _cast_all([weights[k] for k in rest], [self.dtypes[k] for k in rest])
        result: list = [None] * len(weights)
        for k, o in zip(grad + rest, outs + list(made)):
            result[k] = o
        return tuple(result)

    def __repr__(self) -> str:
        return f"weight_casts({len(self.dtypes)})"


def _cast_all(tensors, dtypes) -> tuple[torch.Tensor, ...]:
    """Each tensor (None stays None) cast to its dtype as ``to`` casts it, the dense ones of one
    (source, result) dtype pair by one multi-tensor copy."""
    outs: list = []
    lists: dict[tuple, tuple[list, list]] = {}
    for w, d in zip(tensors, dtypes):
        if w is None:
            outs.append(None)
            continue
        o = torch.empty_like(w, dtype=d) if w.dtype != d else w
        if o is w or o.stride() != w.stride():
            outs.append(w.to(d))        # as the cast would: a no-op, or a layout empty_like does not keep
            continue
        outs.append(o)
        dst, src = lists.setdefault((w.dtype, d, w.device), ([], []))
        dst.append(o)
        src.append(w)
    for dst, src in lists.values():
        torch._foreach_copy_(dst, src)
    return tuple(outs)


class _Casts(torch.autograd.Function):
    """The batch under grad. Each result's gradient is its weight's cast back to the weight's
    dtype (``ToCopyBackward``'s, value for value), one multi-tensor copy for the batch instead of
    a kernel per weight. The node runs once every result's gradient is known: the batch's
    gradients reach the weights at the end of the batch's part of the backward."""

    @staticmethod
    def forward(ctx, dtypes, *weights):
        ctx.sources = tuple(w.dtype for w in weights)
        ctx.set_materialize_grads(False)    # a result the loss does not reach: its weight gets no gradient
        return _cast_all(weights, dtypes)

    @staticmethod
    def backward(ctx, *grads):
        if torch.is_grad_enabled():         # create_graph: casts autograd records
            return (None, *(g.to(d) if g is not None else None for g, d in zip(grads, ctx.sources)))
        return (None, *_cast_all(grads, ctx.sources))


def _cast(node: Node, params: set[Value]) -> bool:
    """A plain dtype cast of a weight (``aten::to(w, dtype, False, False, None)``)."""
    if node.kind != "aten::to" or len(node.inputs) != 5 or node.inputs[0] not in params:
        return False
    out = node.output.type
    src = node.inputs[0].type
    return (all(x.is_constant for x in node.inputs[1:]) and node.inputs[4].constant() is None
            and node.inputs[2].constant() is False and node.inputs[3].constant() is False
            and getattr(out, "dtype", None) in _FLOATS and getattr(src, "dtype", None) in _FLOATS
            and out.dtype != src.dtype)


def _bytes(v: Value) -> int:
    t = v.type
    sizes = getattr(t, "sizes", None)
    if not sizes or any(s is None for s in sizes) or t.dtype is None:
        return 0
    n = 1
    for s in sizes:
        n *= s
    return n * t.dtype.itemsize


def _attr_chain(v: Value, graph: Graph) -> "list[Node] | None":
    """The ``prim::GetAttr`` nodes, outermost first, that read ``v`` from the graph's module
    input (a TorchScript graph's parameter); None where ``v`` is read otherwise."""
    chain: list[Node] = []
    while v.node is not None and v.node.kind == "prim::GetAttr" and v.node.owner is graph.block:
        chain.append(v.node)
        v = v.node.inputs[0]
    return chain[::-1] if chain and graph.inputs and v is graph.inputs[0] else None


def _identity(w: Value, graph: Graph) -> Any:
    """What names a weight: its graph input, or the attribute path a TorchScript graph reads it by
    (two reads of ``self.head.weight`` are one weight)."""
    chain = _attr_chain(w, graph)
    return tuple(a.attrs["name"] for a in chain) if chain else w


def _replace(graph: Graph, batch: list[Node], order: dict[Node, int]) -> None:
    first = batch[0]
    weights: list[Value] = []
    dtypes: list[torch.dtype] = []
    slot: dict[tuple[Any, torch.dtype], int] = {}
    keys = [(_identity(n.inputs[0], graph), n.output.type.dtype) for n in batch]
    for n, key in zip(batch, keys):
        if key not in slot:
            slot[key] = len(weights)
            weights.append(n.inputs[0])
            dtypes.append(n.output.type.dtype)
    # a TorchScript module's weights are read (prim::GetAttr) next to their use: read again,
    # from the module, where the batch runs (each attribute path once)
    reads: dict[tuple[str, ...], Value] = {}
    for k, w in enumerate(weights):
        if w.node is not None and order.get(w.node, 0) > order[first]:
            path: tuple[str, ...] = ()
            src = graph.inputs[0]
            for a in _attr_chain(w, graph) or ():
                path += (a.attrs["name"],)
                if path not in reads:
                    read = graph.create("prim::GetAttr", [src], [a.output.type], dict(a.attrs), source=a.source)
                    first.owner.insert_before(first, read)
                    reads[path] = read.output
                src = reads[path]
            weights[k] = src
    fn = BatchedCast(tuple(dtypes))
    call = graph.create("prim::PythonOp", weights,
                        [Type("(" + ", ".join("Tensor" for _ in weights) + ")")],
                        {"call": PyCall("weight_casts", fn=fn, args=tuple(PyArg(i) for i in range(len(weights))),
                                        effects=False)},
                        source=first.source)
    first.owner.insert_before(first, call)
    types = [next(n.output.type for n, key in zip(batch, keys) if key == k) for k in slot]
    unpack = graph.create("prim::TupleUnpack", [call.output], types, source=first.source)
    first.owner.insert_after(call, unpack)
    for n, key in zip(batch, keys):
        out = unpack.outputs[slot[key]]
        for u, i in list(n.output.uses):
            u.replace_input(i, out)
        graph.block.replace_return_everywhere(n.output, out)
        n.owner.remove(n)
    STATS["batches"] += 1
    STATS["casts"] += len(batch)


def batch_weight_casts(graph: Graph, module: Any, static: tuple[int, ...]) -> int:
    """Batch the weight casts of a profiled ``graph`` (in place, before the partition);
    returns how many casts were batched."""
    if config.is_disabled("weight_cast_batching"):
        return 0
    params = [p for p in _parameters(graph, module, static, trainable=True)
              if p.type.device is not None and p.type.device.type in DEVICES]
    if not params:
        return 0
    # a weight the graph writes (in place, or a module attribute it sets) keeps its cast where
    # it is: a batch earlier in the program would read it before the write
    from ..passes.aliasing import AliasSets

    sets = AliasSets(graph)
    sets_attr = any(n.kind == "prim::SetAttr" for n in graph.all_nodes())
    written = {_identity(p, graph) for p in params if sets.is_written(p)}   # two reads of one attribute alike
    params = [p for p in params if _identity(p, graph) not in written and not (sets_attr and p.node is not None)]
    for p in params:
        _explicit_casts(graph, p)
    pset = set(params)
    order = {n: i for i, n in enumerate(graph.block.nodes)}
    batches: list[list[Node]] = []
    run: list[Node] = []
    size = 0
    for n in graph.block.nodes:
        if not _cast(n, pset):
            continue
        w = n.inputs[0]
        if w.node is not None and _attr_chain(w, graph) is None:
            continue                        # a weight computed in the graph: its cast stays
        b = _bytes(n.output)
        if run and size + b > BATCH_BYTES:
            batches.append(run)
            run, size = [], 0
        run.append(n)
        size += b
    if run:
        batches.append(run)
    done = 0
    for batch in batches:
        if len(batch) < 2:
            continue
        _replace(graph, batch, order)
        done += len(batch)
    if done:
        jit_log("graph_fuser", 2, f"{done} weight casts batched into {sum(len(b) > 1 for b in batches)} launches")
    return done
