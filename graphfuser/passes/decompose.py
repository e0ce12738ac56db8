"""Decompositions of ops the fuser cannot enter into ops it can, before profiling.

Always: a global average pool (``adaptive_avg_pool{1,2,3}d`` to size 1, as every classifier's
head does) is a mean over the pooled dims, which the reduction schedulers fuse with what comes
before and after it (squeeze-excite gates, BN + ReLU tails):

    %y = aten::adaptive_avg_pool2d(%x, [1, 1])   ->   %y = aten::mean(%x, [-1, -2], True, None)

Always: ``group_norm`` with a constant ``num_groups`` > 1 is an instance norm of the input viewed
with its channels split into (groups, channels per group) and its spatial dims flattened, then
the per-channel affine in that view (a loop axis is a whole tensor dim, so the view gives the
groups their own axis; the views cost nothing, the normalization and its affine are one kernel
each way, their gradients the instance norm's and the pointwise rows'; ``type_as`` keeps the
input's dtype when the weight's differs, as eager's mixed-type kernel does):

    %y = aten::group_norm(%x, G, %w, %b, eps, cudnn)
      ->  %xg = aten::unflatten(aten::flatten(aten::unsqueeze(%x, -1), 2, -1), 1, [G, -1])
          %yg = aten::instance_norm(%xg, None, None, None, None, True, 0.0, eps, cudnn)  [N, G, C/G, S]
          %wg = aten::unsqueeze(aten::unflatten(%w, 0, [G, -1]), -1)               [G, C/G, 1]; %bg alike
          %yt = aten::type_as(aten::reshape_as(aten::flatten(%yg * %wg + %bg, 1, 2), %x), %x)
          %y  = graphfuser::group_norm_layout(%yt, %x)

The rewrite checks none of eager's preconditions, so a ``graphfuser::group_norm_check(%x, G, %w,
%b)`` node (no outputs, kept by dce) goes first: the host program raises eager's error there
(``ops.norms.check_group_norm``). The views give a contiguous result; ``group_norm_layout`` gives
it eager's memory format (channels-last on the CPU for a channels-last input). Where the instance
norm is not fused (profiling calls, the fallback), the host program runs it through
``ops.norms.grouped_instance_norm`` (its node's call), the fused kernel's shifted moments, not
eager's instance_norm: that is batch norm underneath, whose CPU moments are not exact for
constant groups.

Opt-in (``PYTORCH_NVFUSER_ENABLE=linear_decomposition,conv_decomposition``, as nvFuser had): the
bias add of every linear / conv whose bias is typed ``Tensor`` is split off before profiling and
stays split. Without the knobs, ``passes/bias.py`` splits the biases whose add would fuse with the
consumer, after profiling.

Runs on the captured graph before profiling, so the new nodes are profiled like any other:

    %y = aten::linear(%x, %w, %b)             %y0 = aten::linear(%x, %w, None)
                                       ->     %y = aten::add(%y0, %b, 1)

    %y = aten::conv2d(%x, %w, %b, ...)        %y0 = aten::conv2d(%x, %w, None, ...)
                                       ->     %b1 = aten::unsqueeze(%b, -1)   (once per spatial dim)
                                              %y = aten::add(%y0, %b1, 1)
"""
from __future__ import annotations

from typing import Optional

from ..config import config
from ..ops.aten import AtenCall, resolve_aten
from ..ir.graph import Block, Graph, Node, Value
from ..ir.types import TENSOR, Type
from ..log import jit_log
from ..ops.norms import grouped_instance_norm

_ADD = "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"
_MEAN = "aten::mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"
_POOLS = {"aten::adaptive_avg_pool1d": 1, "aten::adaptive_avg_pool2d": 2, "aten::adaptive_avg_pool3d": 3}
_UNSQUEEZE = "aten::unsqueeze(Tensor(a) self, int dim) -> Tensor(a)"
_TO = ("aten::to.dtype(Tensor(a) self, ScalarType dtype, bool non_blocking=False, bool copy=False, "
       "MemoryFormat? memory_format=None) -> Tensor(a)")
_MUL = "aten::mul.Tensor(Tensor self, Tensor other) -> Tensor"
_UNFLATTEN = "aten::unflatten.int(Tensor(a) self, int dim, int[] sizes) -> Tensor(a)"
_FLATTEN = "aten::flatten.using_ints(Tensor(a) self, int start_dim=0, int end_dim=-1) -> Tensor(a)"
_INSTANCE_NORM = ("aten::instance_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, "
                  "Tensor? running_var, bool use_input_stats, float momentum, float eps, bool cudnn_enabled) -> Tensor")
_RESHAPE_AS = "aten::reshape_as(Tensor(a) self, Tensor other) -> Tensor(a)"
_TYPE_AS = "aten::type_as(Tensor self, Tensor other) -> Tensor"
# conv kind -> spatial dims of its output (the bias is broadcast over them)
_CONVS = {"aten::conv1d": 1, "aten::conv2d": 2, "aten::conv3d": 3}


class _Emitter:
    """Creates nodes one after another, right after ``anchor``."""

    def __init__(self, block: Block, anchor: Node) -> None:
        self.block, self.last = block, anchor

    def add(self, node: Node) -> Node:
        self.block.insert_after(self.last, node)
        self.last = node
        return node

    def const(self, value, type_name: str) -> Value:
        attrs = {} if value is None else {"value": value}
        return self.add(self.block.graph.create("prim::Constant", [], [Type(type_name)], attrs)).output

    def aten(self, kind: str, schema: str, inputs: list[Value], source) -> Value:
        node = self.block.graph.create(kind, inputs, [TENSOR], source=source)
        node.schema = resolve_aten(kind, schema)
        return self.add(node).output


def split_bias(block: Block, node: Node, bias: Value) -> Node:
    """Make ``node`` (linear / conv) bias-free and add ``bias`` (a Tensor-typed value) to its
    result, broadcast over the spatial dims; returns the add node (its output has no type yet)."""
    spatial = _CONVS.get(node.kind, 0)
    none = block.graph.create("prim::Constant", [], [Type("NoneType")])
    block.insert_before(node, none)
    node.replace_input(2, none.output)
    e = _Emitter(block, node)
    b = bias
    for _ in range(spatial):
        b = e.aten("aten::unsqueeze", _UNSQUEEZE, [b, e.const(-1, "int")], node.source)
    out = e.aten("aten::add", _ADD, [node.output, b, e.const(1, "int")], node.source)
    reroute(block, node.output, out)
    return out.node


def reroute(block: Block, old: Value, new: Value) -> None:
    """Every reader of ``old`` but ``new``'s own node (and the block's returns) reads ``new``."""
    for user, i in list(old.uses):
        if user is not new.node:
            user.replace_input(i, new)
    block.replace_return_everywhere(old, new)


def constant_ints(v: Value) -> Optional[list[int]]:
    """The constant int list ``v`` holds (a constant or a ListConstruct of constants), else None."""
    if v.is_constant:
        c = v.constant()
        return [c] if isinstance(c, int) else list(c) if isinstance(c, (list, tuple)) else None
    if v.node is not None and v.node.kind == "prim::ListConstruct" and all(i.is_constant for i in v.node.inputs):
        return [i.constant() for i in v.node.inputs]
    return None


def _global_pool(block: Block, node: Node, dims: int) -> bool:
    size = constant_ints(node.inputs[1])
    if size is None or len(size) not in (1, dims) or any(s != 1 for s in size):
        return False
    e = _Emitter(block, node)
    items = [e.const(-d, "int") for d in range(1, dims + 1)]
    lst = e.add(block.graph.create("prim::ListConstruct", items, [Type("int[]")])).output
    out = e.aten("aten::mean", _MEAN, [node.inputs[0], lst, e.const(True, "bool"), e.const(None, "NoneType")],
                 node.source)
    return _replace(block, node, out)


def _group_norm(block: Block, node: Node) -> bool:
    """``group_norm`` with constant num_groups > 1 as an instance norm of a view (module docstring)."""
    x, groups, w, b, eps, cudnn = node.inputs
    if not groups.is_constant or not isinstance(groups.constant(), int) or isinstance(groups.constant(), bool) \
            or groups.constant() <= 1:
        return False
    if any(not p.type.is_tensor and not (p.is_constant and p.constant() is None) for p in (w, b)):
        return False        # an Optional[Tensor] weight / bias: known only at run time
    e = _Emitter(block, node)
    # the rewrite checks none of eager's preconditions (weight of C elements, C % G, mixed dtypes)
    e.add(block.graph.create("graphfuser::group_norm_check", [x, groups, w, b], [], source=node.source))
    none = e.const(None, "NoneType")
    one, minus_one = e.const(1, "int"), e.const(-1, "int")
    split = e.add(block.graph.create("prim::ListConstruct", [groups, minus_one], [Type("int[]")])).output
    # [N, C, *S] -> [N, C, S, 1] -> [N, C, S'] -> [N, G, C/G, S']: one rank whatever the input's
    xs = e.aten("aten::flatten", _FLATTEN, [e.aten("aten::unsqueeze", _UNSQUEEZE, [x, minus_one], node.source),
                                            e.const(2, "int"), minus_one], node.source)
    xg = e.aten("aten::unflatten", _UNFLATTEN, [xs, one, split], node.source)
    y = e.aten("aten::instance_norm", _INSTANCE_NORM,
               [xg, none, none, none, none, e.const(True, "bool"), e.const(0.0, "float"), eps, cudnn], node.source)
    # unfused (profiling, fallback): the fused kernel's shifted moments, not batch norm's (module docstring)
    y.node.schema = AtenCall(op=grouped_instance_norm, kwarg_names=(None,) * 9, schema=_INSTANCE_NORM)
    for param, kind, schema in ((w, "aten::mul", _MUL), (b, "aten::add", _ADD)):
        if not param.type.is_tensor:
            continue
        p = e.aten("aten::unflatten", _UNFLATTEN, [param, e.const(0, "int"), split], node.source)
        p = e.aten("aten::unsqueeze", _UNSQUEEZE, [p, minus_one], node.source)       # [G, C/G, 1]
        y = e.aten(kind, schema, [y, p] + ([one] if kind == "aten::add" else []), node.source)
    flat = e.aten("aten::flatten", _FLATTEN, [y, one, e.const(2, "int")], node.source)
    out = e.aten("aten::type_as", _TYPE_AS, [e.aten("aten::reshape_as", _RESHAPE_AS, [flat, x], node.source), x],
                 node.source)
    # eager's output memory format (channels-last on the CPU for a channels-last input)
    out = e.add(block.graph.create("graphfuser::group_norm_layout", [out, x], [TENSOR], source=node.source)).output
    return _replace(block, node, out)


def _replace(block: Block, node: Node, out: Value) -> bool:
    """Make ``out`` stand for ``node``'s output everywhere and drop ``node``."""
    for user, i in list(node.output.uses):
        user.replace_input(i, out)
    block.replace_return_everywhere(node.output, out)
    block.remove(node)
    return True


def _decompose_block(block: Block, linear: bool, conv: bool) -> int:
    done = 0
    for node in list(block.nodes):
        for b in node.blocks:
            done += _decompose_block(b, linear, conv)
        if node.kind in _POOLS and len(node.inputs) == 2:
            if _global_pool(block, node, _POOLS[node.kind]):
                done += 1
                jit_log("graph_fuser", 1, f"global average pool {node.where()} is a mean")
            continue
        if node.kind == "aten::group_norm" and len(node.inputs) == 6:
            if _group_norm(block, node):
                done += 1
                jit_log("graph_fuser", 1, f"group_norm {node.where()} is an instance norm over its groups")
            continue
        if not (linear and node.kind == "aten::linear" and len(node.inputs) == 3
                or conv and node.kind in _CONVS and len(node.inputs) == 7):
            continue
        if node.inputs[2].type.is_tensor:
            split_bias(block, node, node.inputs[2])
            done += 1
            jit_log("graph_fuser", 1, f"decomposed the bias add of {node.where()}")
    return done


def decompose(graph: Graph) -> int:
    """Apply the enabled decompositions to ``graph`` in place; returns how many ops were split."""
    linear, conv = config.is_enabled("linear_decomposition"), config.is_enabled("conv_decomposition")
    return _decompose_block(graph.block, linear, conv)
