"""Batch norm in training: the running-stats update as separate nodes, so the normalization fuses.

``aten::batch_norm(x, w, b, rm, rv, training=True, momentum, eps, cudnn)`` normalizes by the batch
statistics and, as a side effect, updates ``rm`` / ``rv`` in place. The op table fuses the pure
part (``batch_norm`` with no running stats: statistics over N and the spatial dims, then the
affine normalization); this pass, run on the profiled graph before the partition, splits the side
effect off as eager does it (``batch_norm_cpu_update_stats_template`` and its CUDA twin):

    %y = aten::batch_norm(%x, %w, %b, %rm, %rv, %true, %mom, %eps, %cudnn)
  ->
    %y = aten::batch_norm(%x, %w, %b, None, None, %true, %mom, %eps, %cudnn)
    %m = aten::mean(%x, [0, 2, ...], False)                 # per channel
    %v = aten::var(%x, [0, 2, ...], True, False)            # unbiased, for the running variance
    %m1 = aten::detach(%m)  ...                             # the update carries no gradient
    %rm1 = aten::add(aten::mul(%m1, %mom), aten::mul(%rm, 1 - mom))      (same for %rv)
    ...
    prim::If(aten::gt(aten::numel(%x), 0))                  # after the consumers of %y
      aten::copy_(%rm, aten::detach(%rm1))                  # (an empty batch updates nothing)
      aten::copy_(%rv, aten::detach(%rv1))

The partition puts the mean / var / update arithmetic in the group of ``%y`` (one reduction over
N, H, W per channel, read once) and the ReLU / residual add after it; the group writes the new
running stats ([C] outputs) and the two ``copy_`` write them into the buffers. ``copy_`` is an
ordering barrier for the partition, so it is placed after the nodes that follow the batch norm, up
to the first one that reads ``rm`` / ``rv`` or has a side effect (then the update is visible to it,
as in eager). ``num_batches_tracked`` and the momentum of ``momentum=None`` (a cumulative average,
``1 / num_batches_tracked``) are computed by the module's own graph and reach here as a run-time
float: the update takes it as a kernel argument.

An instance norm with running stats (``aten::instance_norm(x, w, b, rm, rv, use_input_stats=True,
...)``, ``nn.InstanceNorm*d(track_running_stats=True)`` in training) is split the same way: its
statistics are per (sample, channel), over the spatial dims, and the running stats take their
mean over the batch, as eager's batch norm over the ``[1, N * C, ...]`` view does with the running
stats repeated N times; eager writes them for an empty batch too (NaN), so the copies are not
guarded. The flag must be a (profiled) constant.

A ``training`` flag that is a run-time value (``nn.BatchNorm*d.forward`` reads ``self.training``)
keeps both behaviours: ``prim::If(training)`` holds the rewritten nodes and, in its other block, the
original node. The consumers of ``%y`` then sit after the ``If`` and do not join its group; once
run-time module flags become profiled, guarded constants, ``fold_constant_ifs`` inlines the taken
block before this pass and the rewrite is the straight one above.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Optional

import torch

from ..config import config
from ..ops import lookup
from ..ops.aten import resolve_aten
from ..ir.graph import Block, Graph, Node, Value
from ..ir.types import TensorType, Type, layout_of
from ..log import jit_log
from ..ops.norms import CUDA_REASON, DISABLED_REASON, cuda_training_fused  # the policy lives with the rows
from ..ops.norms import _contiguous
from ..ops.reduction import scalar_type_code
from .functionalize import _fresh_root
from .partition import _mutates, in_place_kind

_SCHEMAS = {
    "aten::batch_norm": "aten::batch_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, "
                        "Tensor? running_var, bool training, float momentum, float eps, bool cudnn_enabled) -> Tensor",
    "aten::instance_norm": "aten::instance_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, "
                           "Tensor? running_var, bool use_input_stats, float momentum, float eps, "
                           "bool cudnn_enabled) -> Tensor",
    "aten::mean": "aten::mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
    "aten::var": "aten::var.dim(Tensor self, int[1]? dim, bool unbiased=True, bool keepdim=False) -> Tensor",
    "aten::detach": "aten::detach(Tensor(a) self) -> Tensor(a)",
    "aten::mul": "aten::mul.Scalar(Tensor self, Scalar other) -> Tensor",
    "aten::add": "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
    "aten::copy_": "aten::copy_(Tensor(a!) self, Tensor src, bool non_blocking=False) -> Tensor(a!)",
    "aten::sub": "aten::sub.float(float a, float b) -> float",
    "aten::to": "aten::to.dtype(Tensor(a) self, ScalarType dtype, bool non_blocking=False, bool copy=False, "
                "MemoryFormat? memory_format=None) -> Tensor(a)",
    "aten::numel": "aten::numel(Tensor self) -> int",
    "aten::ne": "aten::ne.int(int a, int b) -> bool",
}


def _flag(v: Value) -> Optional[bool]:
    """The value of a bool argument: a constant, a profiled constant, or None (run time / varied)."""
    if v.is_constant:
        return bool(v.constant())
    if v.is_profiled_constant and isinstance(v.profiled, bool):
        return v.profiled
    return None


def _vector_type(like: TensorType, dtype: torch.dtype, requires_grad: bool, per_sample: bool = False) -> TensorType:
    """The type of a per-channel [C] tensor computed from ``like`` ([N, C, ...]); ``per_sample``:
    a contiguous [N, C] one (an instance norm's statistics)."""
    sizes = tuple(like.sizes[:2]) if per_sample else (like.sizes[1],)
    strides = (sizes[1], 1) if per_sample else (1,)
    order, contig = layout_of(sizes, strides)
    return TensorType(dtype=dtype, sizes=sizes, strides=strides, stride_order=order, contiguity=contig,
                      device=like.device, requires_grad=requires_grad)


class _Builder:
    """Appends nodes to ``block`` (at its end, or before ``anchor``)."""

    def __init__(self, block: Block, source, anchor: Optional[Node] = None) -> None:
        self.block, self.source, self.anchor = block, source, anchor
        self.graph: Graph = block.graph

    def _put(self, node: Node) -> Node:
        if self.anchor is None:
            self.block.append(node)
        else:
            self.block.insert_before(self.anchor, node)
        return node

    def const(self, value, type_name: str) -> Value:
        attrs = {} if value is None else {"value": value}
        return self._put(self.graph.create("prim::Constant", [], [Type(type_name)], attrs)).output

    def ints(self, values: list[int]) -> Value:
        items = [self.const(v, "int") for v in values]
        return self._put(self.graph.create("prim::ListConstruct", items, [Type("int[]")])).output

    def op(self, kind: str, inputs: list[Value], out: Type) -> Value:
        node = self.graph.create(kind, inputs, [out], source=self.source)
        node.schema = resolve_aten(kind, _SCHEMAS[kind])
        return self._put(node).output


def _eligible(node: Node) -> Optional[str]:
    """Why this batch_norm node is not rewritten (None: it is)."""
    if len(node.inputs) != 9:
        return "unexpected arity"
    x, rm, rv = node.inputs[0], node.inputs[3], node.inputs[4]
    if not all(isinstance(v.type, TensorType) and v.type.complete for v in (x, rm, rv)):
        return "running stats that may be None, or types that were not profiled"
    if x.type.rank is None or x.type.rank < 2 or rm.type.rank != 1 or rv.type.rank != 1:
        return "unexpected ranks"
    if rm.type.requires_grad or rv.type.requires_grad:
        return "running stats that require grad (eager raises: native_batch_norm is not differentiable for them)"
    if x.type.sizes is not None and 0 in x.type.sizes:
        # eager's batch norm of an empty input checks nothing and returns it: the split-off
        # update's arithmetic broadcasts the statistics into the running stats, and raised where
        # their widths differ (fuzz graph 1588 of CPU seed 34703: a [1, B, 0, 5, 0] input beside
        # stats of 33, B = 35); an empty input has nothing to fuse either
        return "an input profiled empty"
    from ..ops.norms import cpu_mixed_dtypes

    mixed = cpu_mixed_dtypes(x, [node.inputs[1], node.inputs[2], rm, rv])
    if mixed:
        return mixed
    if config.is_disabled("batch_norm_training"):
        return DISABLED_REASON
    if x.type.device is not None and x.type.device.type == "cuda" and not cuda_training_fused():
        return CUDA_REASON
    return None


def _update(e: _Builder, x: Value, stat: Value, running: Value, momentum: Value, keep: Value) -> Value:
    """``momentum * stat + (1 - momentum) * running`` with ``stat`` detached (eager's formula)."""
    st: TensorType = stat.type
    rt: TensorType = running.type
    out = replace(rt, dtype=torch.promote_types(st.dtype, rt.dtype), requires_grad=False)
    no_grad = replace(st, requires_grad=False)
    s = e.op("aten::detach", [stat], no_grad)
    if momentum.is_constant:
        keep_v = e.const(1.0 - float(momentum.constant()), "float")
    else:
        keep_v = e.op("aten::sub", [keep, momentum], Type("float"))
    a = e.op("aten::mul", [s, momentum], no_grad)
    r = e.op("aten::mul", [running, keep_v], replace(rt, requires_grad=False))
    new = e.op("aten::add", [a, r, e.const(1, "int")], out)
    if out.dtype != rt.dtype:
        # computed in the statistics' wider dtype, stored in the buffer's (rounded once, as eager
        # does): the group then writes it into the buffer itself
        false = e.const(False, "bool")
        new = e.op("aten::to", [new, e.const(scalar_type_code(rt.dtype), "int"), false, false,
                                e.const(None, "NoneType")], replace(out, dtype=rt.dtype))
    return new


# where a training batch norm's new running mean is summed in double (``_training_nodes``); tests
# that render CUDA kernels from graphs profiled on the CPU take it off
DOUBLE_MEAN_DEVICES = ("cpu",)


def _training_nodes(e: _Builder, node: Node) -> tuple[Value, list[tuple[Value, Value]]]:
    """The fusible training batch norm and the new running stats, appended through ``e``;
    returns (output, [(running stat, its new value)])."""
    x, w, b, rm, rv, _, momentum, eps, cudnn = node.inputs
    xt: TensorType = x.type
    none = e.const(None, "NoneType")
    instance = node.kind == "aten::instance_norm"
    y = e.op(node.kind, [x, w, b, none, none, e.const(True, "bool"), momentum, eps, cudnn], node.output.type)
    # an instance norm's statistics are per (sample, channel): eager runs a batch norm over the
    # [1, N * C, ...] view of a contiguous copy, its running stats repeated N times, and writes
    # the mean over N of the N updated copies (aten/native/Normalization.cpp)
    dims = e.ints(([] if instance else [0]) + list(range(2, xt.rank)))
    false = e.const(False, "bool")
    # eager's statistics of fp16 / bf16 input are float (its accumulate type), not rounded
    acc = torch.float32 if xt.dtype in (torch.float16, torch.bfloat16) else xt.dtype
    # On the CPU, eager's generic path (a float32 input neither contiguous nor channels-last)
    # sums the squared deviations in double and updates the running variance in double (its
    # contiguous paths keep float; its mean stays float): a variance past float's range (1e77)
    # beside a running variance of -inf gives -inf there, where a float32 inf gave NaN (fuzz
    # graph 730 of CPU seed 34313, a transposed input). The guards keep the profiled layout.
    var_acc = acc
    if not instance and xt.dtype == torch.float32 and xt.device is not None and xt.device.type == "cpu" \
            and not _contiguous(xt) and not (xt.rank in (4, 5) and _contiguous(xt, channels_last=True)):
        var_acc = torch.float64
    # On the CPU the mean of a float32 (or bf16 / fp16) input is summed in double: eager's float
    # sums of finite values past float's range there (3e38 four times beside -inf four times)
    # come out -inf or NaN by the order its vector lanes meet them; double's sum is the float64
    # reference's -inf (fuzz graphs 637 and 1354 of CPU seed 34722, float32 and bf16). The new
    # running mean is rounded to the buffer's dtype once.
    mean_acc = acc
    if xt.dtype in (torch.float32, torch.float16, torch.bfloat16) and xt.device is not None \
            and xt.device.type in DOUBLE_MEAN_DEVICES:
        mean_acc = torch.float64
    xs = {}
    for dt in {mean_acc, var_acc}:
        xs[dt] = x if dt == xt.dtype else e.op(
            "aten::to", [x, e.const(scalar_type_code(dt), "int"), false, false, e.const(None, "NoneType")],
            replace(xt, dtype=dt))
    grad = bool(xt.requires_grad)
    mean = e.op("aten::mean", [xs[mean_acc], dims, false], _vector_type(xt, mean_acc, grad, instance))
    var = e.op("aten::var", [xs[var_acc], dims, e.const(True, "bool"), false],
               _vector_type(xt, var_acc, grad, instance))
    if instance:
        over_n = e.ints([0])
        mean = e.op("aten::mean", [mean, over_n, false], _vector_type(xt, mean_acc, grad))
        var = e.op("aten::mean", [var, over_n, false], _vector_type(xt, var_acc, grad))
    one = e.const(1.0, "float")
    return y, [(rm, _update(e, x, mean, rm, momentum, one)), (rv, _update(e, x, var, rv, momentum, one))]


def _write_back(e: _Builder, x: Value, updates: list[tuple[Value, Value]], guard_empty: bool = True) -> None:
    """The copies of the new running stats, under ``if x.numel() != 0`` (``guard_empty``): eager's
    batch norm leaves the running stats alone for an empty input (its batch statistics would be
    NaN); its instance norm writes them, NaN, whatever the input."""
    # every detach before the first copy_ (a barrier): the detaches join the update's group
    detached = [(running, e.op("aten::detach", [new], new.type)) for running, new in updates]
    inner = e
    if guard_empty:
        nonempty = e.op("aten::ne", [e.op("aten::numel", [x], Type("int")), e.const(0, "int")], Type("bool"))
        ifn = e._put(e.graph.create("prim::If", [nonempty], [], source=e.source))
        taken, _ = ifn.add_block(), ifn.add_block()
        inner = _Builder(taken, e.source)
    for running, d in detached:
        copied = inner.op("aten::copy_", [running, d, inner.const(False, "bool")], running.type)
        copied.node.attrs["running_stats"] = True       # (passes/in_place.py)


def _update_site(block: Block, after: Node, running: list[Value]) -> Optional[Node]:
    """The node before which the running stats must be written: the first one after ``after``
    that reads them or has a side effect; None for the end of the block. An in-place op on a
    fresh intermediate of the block (``x.relu_()`` of the batch norm's output: torchvision's
    ``ReLU(inplace=True)``) writes memory no buffer shares, so the copies go on past it; placed
    before it, they split the ReLU off the batch norm's group (the partition orders every node
    against a ``copy_``), which cost resnet50's training step a ReLU kernel each way per batch
    norm."""
    nodes = list(block.nodes)
    for n in nodes[nodes.index(after) + 1:]:
        reads = any(i in running for i in n.inputs) or any(
            i in running for b in n.blocks for m in b.nodes for i in m.inputs)
        getattr_stat = n.kind == "prim::GetAttr" and n.attrs.get("name") in ("running_mean", "running_var")
        if reads or getattr_stat or (_mutates(n) and not _writes_fresh(n, block)):
            return n
    return None


def _writes_fresh(n: Node, block: Block) -> bool:
    """Whether ``n`` is an op-table in-place op (no nested blocks) whose target is a fresh
    intermediate of ``block`` (``passes/functionalize.py``'s rule), or the result of such writes
    on one (``out += identity; out.relu_()``): memory no buffer aliases."""
    if not _in_place_row(n):
        return False
    v = n.inputs[0]
    while v.node is not None and v.node.owner is block and _in_place_row(v.node):
        v = v.node.inputs[0]
    return _fresh_root(v, block) is not None


def _in_place_row(n: Node) -> bool:
    """An ``aten`` in-place op (no nested blocks) whose functional twin is an op-table row."""
    return not n.blocks and bool(n.inputs) and in_place_kind(n.kind) and lookup(n.kind[:-1]) is not None


def _rewrite(block: Block, node: Node, training: Optional[bool]) -> None:
    x, rm, rv = node.inputs[0], node.inputs[3], node.inputs[4]
    y_old = node.output
    if training:            # a constant: straight rewrite
        e = _Builder(block, node.source, anchor=node)
        y, updates = _training_nodes(e, node)
        for user, i in list(y_old.uses):
            user.replace_input(i, y)
        block.replace_return_everywhere(y_old, y)
        block.remove(node)
        site = _update_site(block, updates[-1][1].node, [rm, rv])
        _write_back(_Builder(block, node.source, anchor=site), x, updates, node.kind == "aten::batch_norm")
        return
    # a run-time flag: If(training) { rewritten } else { the original node }
    g = block.graph
    ifn = g.create("prim::If", [node.inputs[5]], [y_old.type], source=node.source)
    block.insert_before(node, ifn)
    taken, other = ifn.add_block(), ifn.add_block()
    e = _Builder(taken, node.source)
    y, updates = _training_nodes(e, node)
    taken.returns = [y]
    for user, i in list(y_old.uses):
        user.replace_input(i, ifn.output)
    block.replace_return_everywhere(y_old, ifn.output)
    block.nodes.remove(node)
    other.append(node)
    other.returns = [node.output]
    while _sink_consumer(block, ifn, [rm, rv]):
        pass
    _write_back(e, x, updates, node.kind == "aten::batch_norm")


# ops a run-time-flag batch norm's consumer may be to move into both blocks of its If (pure,
# deterministic, fused by the partition: ReLU, a residual add, an activation ...)
_SINKABLE = frozenset({"pointwise"})


def _sink_consumer(block: Block, ifn: Node, running: list[Value]) -> bool:
    """Move the only consumer of ``ifn``'s output into both of its blocks, where it joins the
    batch norm's group (the taken block) or follows the original node (the other): the If then
    returns the consumer's value. Only a pure pointwise op whose other inputs exist before the
    If, that does not read the running stats; returns whether one moved."""
    from ..ops import lookup

    out = ifn.output
    if len(out.uses) != 1 or any(out in b.returns for b in _enclosing(block)):
        return False
    user, _ = out.uses[0]
    row = lookup(user.kind)
    if user.owner is not block or len(user.outputs) != 1 or user.blocks or _mutates(user) or row is None \
            or row.kind not in _SINKABLE or "philox" in row.name or "dropout" in row.name:
        return False
    pos = block.nodes.index(ifn)
    for v in user.inputs:
        if v is out or v.is_constant:
            continue
        if v in running or not (v.node is None or (v.node.owner is block and block.nodes.index(v.node) < pos)):
            return False
    g = block.graph
    for b in ifn.blocks:
        ins = []
        for v in user.inputs:
            if v is out:
                ins.append(b.returns[0])
            elif v.is_constant:
                ins.append(g.constant(v.constant(), v.type, block=b))
            else:
                ins.append(v)
        clone = g.create(user.kind, ins, [user.output.type], dict(user.attrs), user.source)
        clone.schema = user.schema
        b.append(clone)
        b.returns = [clone.output]
    out.type = user.output.type
    for u, i in list(user.output.uses):
        u.replace_input(i, out)
    block.replace_return_everywhere(user.output, out)
    block.remove(user)
    return True


def _enclosing(block: Block) -> list[Block]:
    """``block`` and the blocks that contain it."""
    chain = [block]
    while chain[-1].owner is not None and chain[-1].owner.owner is not None:
        chain.append(chain[-1].owner.owner)
    return chain


def _block(block: Block) -> int:
    done = 0
    for node in list(block.nodes):
        for b in node.blocks:
            done += _block(b)
        if node.kind not in ("aten::batch_norm", "aten::instance_norm") or len(node.inputs) != 9:
            continue
        training = _flag(node.inputs[5])          # (instance norm: use_input_stats)
        if training is False or (training is None and node.kind == "aten::instance_norm"):
            continue
        why = _eligible(node)
        if why is not None:
            if not (node.inputs[3].type.name == "NoneType" and node.inputs[4].type.name == "NoneType"):
                jit_log("partition", 1, f"{node.kind[6:]} {node.where()} in training is not rewritten: {why}")
            continue
        constant = node.inputs[5].is_constant
        _rewrite(block, node, training if constant else None)
        done += 1
        jit_log("graph_fuser", 1, f"{node.kind[6:]} {node.where()}: running-stats update split off "
                                  f"({'constant' if constant else 'run-time'} training flag)")
    return done


def batch_norm_training(graph: Graph) -> int:
    """Split the running-stats update off every training ``aten::batch_norm`` of ``graph``
    (in place); returns how many were rewritten."""
    return _block(graph.block)
