"""Automatic bias decomposition: a linear / conv bias add that would fuse with what follows leaves
the linear / conv (after profiling, before the partition):

    %y = aten::conv2d(%x, %w, %b, ...)        %y0 = aten::conv2d(%x, %w, None, ...)
    %r = aten::relu_(%y)               ->     %b1 = aten::unsqueeze(%b, -1)   (once per spatial dim)
                                              %y = aten::add(%y0, %b1, 1)
                                              %r = aten::relu_(%y)

Why. After a conv, the activation / BN / residual tail is one pass over the output with or without
the bias add in it, so a fused bias add is free; left in the conv, eager pays for it: a cuDNN
convolution adds its bias in a separate ``add_`` over the whole output (oneDNN on the CPU adds it
in the conv's epilogue, which is no cheaper than adding it in the pass that follows). vgg, alexnet
and squeezenet are conv(bias) -> relu -> maxpool and linear -> relu -> dropout stacks whose only
fusible chain is bias + relu. A linear's bias is already free in eager (the GEMM epilogue): split,
it costs no traffic either, since it is split only where its add joins a pass that runs anyway (a
GELU, a residual add, a normalization after an MLP); but on CUDA the GEMM without it may run
another cuBLAS algorithm, faster or slower, so there an inference linear's bias is split where
the GEMM without it measured faster on the profiled sizes (``gemm_without_bias_is_faster``),
and under training, where its gradient's column sum joins the fused backward.

When. The result's only consumer, past eval-mode dropouts, is a row of the op table (an in-place
activation counts: functionalize makes it functional on the fresh add), or, for a conv, a
``permute`` whose result's only consumer is (the add then follows the permute, the bias
unsqueezed for the channel dim's new place: ConvNeXt's depthwise conv before its layer norm);
the bias has the result's profiled dtype and device, or, for a CUDA conv under autocast (a half
result, a float32 bias), the split add reads the bias cast to the result's dtype, as the conv
would have cast it;
the result is fp32 / fp64, or a conv's on CUDA (a split add rounds the result twice in fp16 /
bf16; eager's GEMM epilogue and oneDNN round once, but cuDNN convolutions round before their
``add_`` too); and the bias is a tensor: typed ``Tensor``, or typed ``Optional[Tensor]`` (``nn.Conv2d.bias``)
and read from a module attribute that holds a tensor now. Such a bias is treated as fixed, as
``torch.jit.freeze`` treats parameters; set to None later, the host program raises on it and the
call runs through TorchScript's executor: never a wrong answer.

Never worse. ``restore_unfused_bias`` (end of the partition) folds every split bias whose add no
group took back into its conv / linear. ``PYTORCH_NVFUSER_DISABLE=bias_decomposition`` turns the
automatic split off; ``PYTORCH_NVFUSER_ENABLE=linear_decomposition,conv_decomposition`` still
splits every bias before profiling, fused or not (``passes/decompose.py``).
"""
from __future__ import annotations

import dataclasses
import weakref
from typing import Any, Optional

import torch

from ..config import config
from ..ir.graph import Block, Graph, Node, Value
from ..ir.types import TensorType, Type
from ..log import jit_log
from ..ops import lookup
from ..ops.aten import DTYPE_CODES, resolve_aten
from .decompose import _ADD, _TO, _UNSQUEEZE, _Emitter, constant_ints, reroute, split_bias

_VIEW = "aten::view(Tensor(a) self, SymInt[] size) -> Tensor(a)"
_PERMUTE = "aten::permute(Tensor(a) self, int[] dims) -> Tensor(a)"

_CONVS = ("aten::conv1d", "aten::conv2d", "aten::conv3d")
_IDENTITIES = ("aten::dropout", "aten::feature_dropout", "aten::alpha_dropout", "aten::feature_alpha_dropout")

# split bias add -> (its conv / linear, the original bias value): what restore_unfused_bias needs
SPLIT_BIAS: "weakref.WeakKeyDictionary[Node, tuple[Node, Value]]" = weakref.WeakKeyDictionary()
_UNKNOWN = object()
_WIDE = (torch.float32, torch.float64)
# where a conv's half-precision result (its bias added by a kernel of its own: cuDNN) has its
# bias split too, under autocast with a cast (the tests add "cpu")
HALF_CONV_DEVICES = ("cuda",)


def _attribute(v: Value, module: Any) -> Any:
    """The current value of ``v`` where it is a chain of ``prim::GetAttr`` from the module input
    (``self.features[0].bias``), else ``_UNKNOWN``."""
    names = []
    while v.node is not None and v.node.kind == "prim::GetAttr":
        names.append(v.node.attrs["name"])
        v = v.node.inputs[0]
    graph = v.block.graph if v.block is not None else None
    if module is None or not names or graph is None or not graph.inputs or v is not graph.inputs[0]:
        return _UNKNOWN
    obj = module
    for name in reversed(names):
        obj = getattr(obj, name, _UNKNOWN)
        if obj is _UNKNOWN:
            return _UNKNOWN
    return obj


def _fuses_with_consumer(v: Value) -> bool:
    """Whether ``v``'s only consumer (past eval-mode dropouts, identities once fused) is an op the
    op table fuses."""
    return _fusible_read(v, through_views=False) is not None


def _bias_type(bias: Value, module: Any) -> Optional[TensorType]:
    if isinstance(bias.type, TensorType):
        return bias.type
    if str(bias.type) not in ("Tensor?", "Optional[Tensor]"):
        return None
    t = _attribute(bias, module)
    return TensorType.of(t) if isinstance(t, torch.Tensor) else None


def _unsqueezed(t: TensorType, spatial: int) -> TensorType:
    """``t`` after ``spatial`` unsqueezes at -1 (the strides eager gives them)."""
    meta = torch.empty_strided(t.sizes, t.strides, dtype=t.dtype, device="meta")
    for _ in range(spatial):
        meta = meta.unsqueeze(-1)
    return dataclasses.replace(TensorType.of(meta), device=t.device, requires_grad=t.requires_grad)


def _split(block: Block, node: Node, module: Any) -> bool:
    out_t, bias = node.output.type, node.inputs[2]
    if not isinstance(out_t, TensorType) or out_t.dtype is None or (bias.node is not None
                                                                   and bias.node.kind == "prim::Constant"):
        return False
    bt = _bias_type(bias, module)
    cuda = out_t.device is not None and out_t.device.type == "cuda"
    conv_cuda = node.kind in _CONVS and out_t.device is not None and out_t.device.type in HALF_CONV_DEVICES
    if out_t.dtype not in _WIDE and not conv_cuda:
        return False
    if (bt is None or bt.device != out_t.device or bt.sizes is None
            or bt.strides is None or any(s < 0 for s in bt.sizes)):
        return False
    # under autocast (a half result, a float32 bias: eager's conv would refuse them otherwise)
    # the conv casts its bias to the result's dtype; the split add casts it so too
    autocast = conv_cuda and bt.dtype == torch.float32 and out_t.dtype in _HALVES
    if bt.dtype != out_t.dtype and not autocast:
        return False
    permute = None
    if not _fuses_with_consumer(node.output):
        permute = _fusing_permute(node, module)
        if permute is None:
            return False
    if node.kind == "aten::linear" and cuda and not out_t.requires_grad and not gemm_without_bias_is_faster(node):
        return False
    value = bias
    if not bias.type.is_tensor:
        cast = block.graph.create("prim::unchecked_cast", [bias], [bt], source=node.source)
        block.insert_before(node, cast)
        value = cast.output
    if autocast:
        bt = dataclasses.replace(bt, dtype=out_t.dtype)
        cast = block.graph.create("aten::to", [value, _constant(block, node, DTYPE_CODES[out_t.dtype], "int"),
                                               _constant(block, node, False, "bool"),
                                               _constant(block, node, False, "bool"),
                                               _constant(block, node, None, "NoneType")], [bt], source=node.source)
        cast.schema = resolve_aten("aten::to", _TO)
        block.insert_before(node, cast)
        value = cast.output
    if permute is not None:
        _split_past_permute(block, node, permute, value, bt, bias, module)
        return True
    add = split_bias(block, node, value)
    b = add.inputs[1]
    spatial = 0
    while b is not value:       # the unsqueezes between the bias and the add
        spatial += 1
        b = b.node.inputs[0]
    b, k = add.inputs[1], spatial
    while b is not value:
        b.type = _unsqueezed(bt, k)
        b, k = b.node.inputs[0], k - 1
    add.output.type = out_t
    SPLIT_BIAS[add] = (node, bias)
    return True


# (input sizes, strides, weight sizes, strides, dtype, device) -> the linear without its bias is
# faster: measured once a process
_GEMM_CHOICE: dict[tuple, bool] = {}
GEMM_MARGIN = 0.97          # the GEMM without the bias must take at most this much of its time
GEMM_TIMING_BYTES = 2 ** 30  # larger operands are not timed (the bias stays in the GEMM)


def gemm_without_bias_is_faster(node: Node) -> bool:
    """Whether a CUDA inference linear's GEMM runs faster without its bias, on the profiled
    sizes (``cuda.linear_bias_split``: ``auto`` times both once a process; ``true`` / ``false``).

    cuBLAS picks its algorithm by the call, and the bias epilogue (addmm) moves its choice
    either way. H200, float32: ConvNeXt-T's MLP GEMMs at batch 64 took 13.8 ms with their
    biases (64 x 64 tiles on 12 of the 36) against 13.0 ms for Inductor's, which adds the bias in
    the GELU's kernel; timm's vit_base fc1 ([12608, 768] x [768, 3072]) ran 1.44 ms with its bias
    and 1.47 ms without on an H100. Split, the bias costs no traffic: it is split only where its
    add joins a pass that runs anyway (a GELU, a residual add)."""
    setting = config.cuda["linear_bias_split"]
    if setting is not None and setting != "auto":
        return bool(setting)
    x, w = node.inputs[0].type, node.inputs[1].type
    types = (x, w)
    if not all(isinstance(t, TensorType) and t.sizes is not None and t.strides is not None and t.dtype is not None
               and t.device is not None for t in types) or x.device != w.device or x.dtype != w.dtype:
        return False
    key = (x.sizes, x.strides, w.sizes, w.strides, x.dtype, str(x.device))
    if key not in _GEMM_CHOICE:
        _GEMM_CHOICE[key] = _time_gemms(x, w)
    return _GEMM_CHOICE[key]


def _time_gemms(x: TensorType, w: TensorType) -> bool:
    """Time ``linear(x, w, b)`` and ``linear(x, w)`` on operands of these types (CUDA events,
    interleaved, the best of each); False where it cannot time them (a stream being captured)."""
    import torch.nn.functional as F  # noqa: PLC0415

    try:
        if torch.cuda.is_current_stream_capturing():
            return False
        item = torch.empty((), dtype=x.dtype).element_size()
        n_out = 1
        for d in x.sizes[:-1]:
            n_out *= d
        if (sum(x.sizes[i] * x.strides[i] for i in range(len(x.sizes))) + w.sizes[0] * w.sizes[1]
                + n_out * w.sizes[0]) * item > GEMM_TIMING_BYTES or n_out == 0:
            return False
        dev = torch.device(x.device)
        a = torch.empty_strided(x.sizes, x.strides, dtype=x.dtype, device=dev).uniform_(-1, 1)
        wt = torch.empty_strided(w.sizes, w.strides, dtype=w.dtype, device=dev).uniform_(-1, 1)
        b = torch.empty(w.sizes[0], dtype=x.dtype, device=dev).uniform_(-1, 1)
        best = {True: float("inf"), False: float("inf")}
        with torch.no_grad(), torch.cuda.device(dev), torch.autocast("cuda", enabled=False):
            for _ in range(2):
                F.linear(a, wt, b), F.linear(a, wt)
            for _ in range(3):
                for with_bias in (True, False):
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    for _ in range(3):
                        F.linear(a, wt, b if with_bias else None)
                    end.record()
                    end.synchronize()
                    best[with_bias] = min(best[with_bias], start.elapsed_time(end))
        faster = best[False] <= GEMM_MARGIN * best[True]
        jit_log("graph_fuser", 1, f"linear {list(x.sizes)} x {list(w.sizes)} {x.dtype}: "
                                  f"{best[True] / 3:.3f} ms with its bias, {best[False] / 3:.3f} ms without: "
                                  f"{'split' if faster else 'kept'}")
        return faster
    except (RuntimeError, torch.cuda.OutOfMemoryError):
        return False


def _permute_dims(permute: Node, module: Any) -> Optional[list[int]]:
    """A ``permute``'s dims: constant, or a module's list attribute read now (torchvision's
    ``Permute`` module keeps them in ``self.dims``, a run-time list in a scripted graph)."""
    dims = constant_ints(permute.inputs[1])
    if dims is None:
        v = _attribute(permute.inputs[1], module)
        dims = list(v) if isinstance(v, (list, tuple)) and all(isinstance(d, int) for d in v) else None
    return dims


def _fusing_permute(conv: Node, module: Any = None) -> Optional[Node]:
    """A conv's only consumer where it is a ``permute`` whose dims are known (constant, or a
    module attribute) and whose result's only consumer fuses (ConvNeXt's depthwise conv, then
    ``permute(0, 2, 3, 1)`` and a layer norm over the channels)."""
    out = conv.output
    if len(out.uses) != 1 or not isinstance(out.type, TensorType) or out.type.sizes is None:
        return None
    user, i = out.uses[0]
    if user.kind != "aten::permute" or i != 0:
        return None
    dims = _permute_dims(user, module)
    if dims is None or sorted(d % len(out.type.sizes) for d in dims) != list(range(len(out.type.sizes))):
        return None
    return user if _fuses_with_consumer(user.output) else None


def _split_past_permute(block: Block, conv: Node, permute: Node, bias: Value, bt: TensorType,
                        original: Value, module: Any = None) -> None:
    """``permute(conv(x, w, b))`` -> ``permute(conv(x, w, None)) + b`` with ``b`` unsqueezed
    for the channel dim's place after the permute: the same values (an add commutes with a
    permute), and the add joins the group of the permute's consumer. (Its cuDNN convolution
    added the bias in a kernel of its own: 22 of ConvNeXt-T's bf16 inference calls, 0.45 ms of
    5.4 on an H200, where Inductor adds it in the layer norm's kernel.)

    Dims a module attribute holds (torchvision's ``Permute``: ``self.dims``) are run-time values
    in the graph: there the bias is viewed with the conv result's rank (``[1, C, 1, 1]``) and
    permuted by the same dims value, right for whatever dims a later call brings; the dims read
    now only type it."""
    rank = len(conv.output.type.sizes)
    dims = [d % rank for d in _permute_dims(permute, module)]
    # the channel dim: a conv result's dim 1, a linear's last (ConvNeXt's MLP output permuted
    # back to channels first); where it lands after the permute decides the bias's unsqueezes
    channel = 1 if conv.kind in _CONVS else rank - 1
    trailing = rank - 1 - dims.index(channel)
    none = block.graph.create("prim::Constant", [], [Type("NoneType")])
    block.insert_before(conv, none)
    conv.replace_input(2, none.output)
    e = _Emitter(block, permute)
    if constant_ints(permute.inputs[1]) is not None:
        b = _unsqueeze_trailing(e, bias, bt, trailing, conv.source)
    else:
        b = _permuted_view(e, bias, bt, rank, channel, permute.inputs[1], dims, conv.source)
    out = e.aten("aten::add", _ADD, [permute.output, b, e.const(1, "int")], conv.source)
    reroute(block, permute.output, out)
    out.type = permute.output.type
    SPLIT_BIAS[out.node] = (conv, original)


def _permuted_view(e: _Emitter, bias: Value, bt: TensorType, rank: int, channel: int, dims_value: Value,
                   dims: list[int], source: Any) -> Value:
    """``bias`` ([C]) viewed with size 1 everywhere but the channel dim of a rank-``rank``
    result, then permuted by ``dims_value`` (typed with ``dims``, its value now)."""
    shape = [1] * rank
    shape[channel] = -1
    meta = torch.empty_strided(bt.sizes, bt.strides, dtype=bt.dtype, device="meta").view(shape)
    v = e.aten("aten::view", _VIEW, [bias, e.const(shape, "int[]")], source)
    v.type = dataclasses.replace(TensorType.of(meta), device=bt.device, requires_grad=bt.requires_grad)
    p = e.aten("aten::permute", _PERMUTE, [v, dims_value], source)
    p.type = dataclasses.replace(TensorType.of(meta.permute(dims)), device=bt.device, requires_grad=bt.requires_grad)
    return p


def _unsqueeze_trailing(e: _Emitter, bias: Value, bt: TensorType, trailing: int, source: Any) -> Value:
    """``bias`` ([C]) unsqueezed ``trailing`` times at -1 ([C, 1, 1] for a channel dim with two
    dims after it), each step typed as eager gives it."""
    for k in range(1, trailing + 1):
        bias = e.aten("aten::unsqueeze", _UNSQUEEZE, [bias, e.const(-1, "int")], source)
        bias.type = _unsqueezed(bt, k)
    return bias


def _constant(block: Block, before: Node, value: Any, type_name: str) -> Value:
    return block.graph.constant(value, Type(type_name), block=block, before=before)


def split_biases(graph: Graph, module: Any = None) -> int:
    """Split the bias adds that would fuse with their consumer off their linear / conv (profiled
    ``graph``, in place); ``module`` is what the graph's first input reads attributes from.
    Returns how many were split."""
    if config.is_disabled("bias_decomposition"):
        return 0
    done = 0
    for node in list(graph.all_nodes()):
        if (node.kind == "aten::linear" and len(node.inputs) == 3
                or node.kind in _CONVS and len(node.inputs) == 7) and _split(node.owner, node, module):
            done += 1
            jit_log("graph_fuser", 2, f"split the bias add of {node.where()} to fuse it with its consumer")
    return done


def restore_unfused_bias(graph: Graph) -> int:
    """Fold every automatically split bias whose add no group took back into its conv / linear."""
    restored = 0
    for add in list(SPLIT_BIAS):
        conv, bias = SPLIT_BIAS[add]
        block = add.owner
        if block is None or block.graph is not graph or conv.owner is not block:
            continue
        bt = bias.type
        if isinstance(bt, TensorType) and bt.sizes is not None and len(bt.sizes) != 1:
            # a later pass gave the bias value another shape (sink_views moved the split add's
            # unsqueezes above the bias's cast, which they were its only reader of: [C, 1, 1]
            # after a permute; fuzz graph 2906 of CPU seed 34725): the add stays, unfused
            del SPLIT_BIAS[add]
            continue
        y0, out = add.inputs[0], add.output
        none = conv.inputs[2]
        conv.replace_input(2, bias)
        for user, i in list(out.uses):
            user.replace_input(i, y0)
        block.replace_return_everywhere(out, y0)
        block.remove(add)
        del SPLIT_BIAS[add]
        if none.node is not None and not none.uses and none.node.owner is not None:
            none.node.owner.remove(none.node)
        restored += 1
        jit_log("graph_fuser", 2, f"bias of {conv.where()} folded back: its add was not fused")
    return restored


# -- bias gradients --------------------------------------------------------------------------
_VIEWS = ("aten::view", "aten::reshape", "aten::_unsafe_view", "aten::flatten", "aten::unflatten")
_DETACH = "aten::detach(Tensor(a) self) -> Tensor(a)"
ROUTE_DEVICES = ("cuda",)    # where eager's bias sum is a kernel of its own (tests add "cpu")
_HALVES = (torch.float16, torch.bfloat16)
_FLOATS = _HALVES + (torch.float32, torch.float64)


def _fusible_read(v: Value, through_views: bool = True) -> Optional[Value]:
    """The value (``v``, past eval-mode dropouts and, with ``through_views``, views of it) that an
    op the op table fuses reads, where that op is ``v``'s only consumer; None otherwise."""
    while len(v.uses) == 1:
        user, i = v.uses[0]
        if through_views and user.kind in _VIEWS and i == 0 or user.kind in _IDENTITIES:
            v = user.output
            continue
        row = lookup(user.kind) or (lookup(user.kind[:-1]) if user.kind.endswith("_") and i == 0 else None)
        return v if row is not None and not (row.kind == "cast" and i != 0) else None
    return None


# ops that read a tensor only for its size and device: a dropout's random state
_SIZE_READERS = ("graphfuser::philox_state",)


def _fused_readers(v: Value) -> tuple[Optional[Value], int]:
    """(the value, the place of ``v``'s last dim in it): ``v`` past views and eval-mode dropouts
    with no other use, then at most one ``permute`` by constant dims (timm's ConvNeXt permutes its
    MLP's result back to channels first), whose every consumer is an op the op table fuses (at
    least one) or reads only its size and device; (None, -1) otherwise. GPT-2's tanh GELU reads
    its input three times (``x * 0.5``, ``x ** 3``, ``x + ...``), and a training dropout beside
    its random state's size read."""
    chain = [v]
    while len(v.uses) == 1:
        user, i = v.uses[0]
        if not (user.kind in _VIEWS and i == 0 or user.kind in _IDENTITIES):
            break
        v = user.output
        chain.append(v)
    place = -1
    if len(v.uses) == 1 and v.uses[0][0].kind == "aten::permute" and v.uses[0][1] == 0 \
            and isinstance(v.type, TensorType) and v.type.sizes:
        permute = v.uses[0][0]
        dims = constant_ints(permute.inputs[1])
        rank = len(v.type.sizes)
        if dims is None or sorted(d % rank for d in dims) != list(range(rank)):
            return None, -1
        place = [d % rank for d in dims].index(rank - 1)
        v = permute.output
        chain.append(v)
    if any(c.returned() for c in chain):
        return None, -1     # (the graph hands the product out: its readers are not all here)
    rows = 0
    for user, i in v.uses:
        if user.kind in _SIZE_READERS:
            continue
        if user.kind.endswith("_"):
            # an in-place write stays a write into the product: routed, it would write into
            # ``bias_grad``'s result instead, which no other alias of the product sees (a view
            # of it returned after ``v.mul_(2)``: CPU fuzz graph 486 of seed 34634; ``v.relu_()``
            # then ``relu6(v)``: graph 861 of seed 34611)
            return None, -1
        row = lookup(user.kind)
        if row is None or row.kind == "cast" and i != 0 or user.owner is not v.node.owner:
            return None, -1
        rows += 1
    return (v, place) if rows and v.node is not None else (None, -1)


def _bias_of(node: Node) -> Optional[Value]:
    """The bias of ``linear(x, w, b)`` or of ``addmm(b, x, w)`` with beta = alpha = 1."""
    if node.kind == "aten::linear" and len(node.inputs) == 3:
        return node.inputs[2]
    if node.kind == "aten::addmm" and len(node.inputs) == 5 and \
            all(v.is_constant and v.constant() == 1 for v in node.inputs[3:]):
        return node.inputs[0]
    return None


def route_bias_gradients(graph: Graph) -> int:
    """Under grad, the bias gradient of a linear / addmm whose result goes on to a fused op comes
    from that op's fused backward (profiled ``graph``, in place; returns how many)::

        %y = aten::addmm(%b, %x, %w, 1, 1)        %bd = aten::detach(%b)
        %v = aten::view(%y, %size)         ->     %y = aten::addmm(%bd, %x, %w, 1, 1)
        %r = aten::gelu(%v)                       %v0 = aten::view(%y, %size)
                                                  %v = graphfuser::bias_grad(%v0, %b)
                                                  %r = aten::gelu(%v)

    Why. Eager's addmm backward sums its incoming gradient over the rows for the bias, a
    reduction kernel of its own that reads the whole gradient once more; the group ``bias_grad``
    joins computes that gradient in the first place, and its backward sums it into the bias's
    shape in the same pass (column sums). The product is untouched: the bias stays in the GEMM's
    epilogue, so every value is eager's (a split bias add, ``split_biases``, rounds an fp16 / bf16
    result twice, which is why a linear under autocast keeps its bias there). Measured on an
    H100, GPT-2 training in bf16 at 8 x 512 tokens: eager's 48 bias sums of its ``Conv1D``
    addmms took 0.73 ms per step.

    When. On CUDA (``ROUTE_DEVICES``: on the CPU eager's sum is no launch of its own and the
    extra group only costs compile time), the result requires grad and every consumer of it,
    past views and eval-mode dropouts, is a row of the op table or reads only its size (a
    dropout's random state; ``_fused_readers``: GPT-2's tanh GELU reads its input three times); the bias is a tensor that requires
    grad, of the result's dtype or, under autocast, a float32 one (its gradient is rounded to the
    result's dtype first, as eager's gradient of the cast bias is: ``ops/derivatives.py``), as
    wide as the result's last dim. Where no group takes ``bias_grad``, its eager program gives
    the same gradients (an autograd function summing the gradient), at eager's cost.
    ``PYTORCH_NVFUSER_DISABLE=bias_gradients`` turns it off."""
    if config.is_disabled("bias_gradients"):
        return 0
    done = 0
    for node in list(graph.all_nodes()):
        b = _bias_of(node)
        if b is None or len(node.outputs) != 1:
            continue
        out, bt = node.output.type, b.type
        if not (isinstance(out, TensorType) and isinstance(bt, TensorType) and out.requires_grad
                and out.device is not None and out.device.type in ROUTE_DEVICES
                and bt.requires_grad and out.dtype in _FLOATS
                and (bt.dtype == out.dtype or bt.dtype == torch.float32 and out.dtype in _HALVES)
                and bt.sizes is not None and len(bt.sizes) == 1 and out.sizes and bt.sizes[0] == out.sizes[-1]):
            continue
        read, place = _fused_readers(node.output)
        rt = read.type if read is not None else None
        if not (isinstance(rt, TensorType) and rt.sizes and rt.sizes[place] == bt.sizes[0] and read.node is not None
                and read.node.owner is node.owner):
            continue
        block = node.owner
        # past a permute, the bias as the channel dim's new place wants it: [C, 1, 1] after
        # permute(0, 3, 1, 2) (views of the parameter, whose gradient flows back through them)
        trailing = (len(rt.sizes) - 1 - place) if place >= 0 else 0
        operand = _unsqueeze_trailing(_Emitter(block, node), b, bt, trailing, node.source)
        detach = graph.create("aten::detach", [b], [dataclasses.replace(bt, requires_grad=False)], source=node.source)
        detach.schema = resolve_aten("aten::detach", _DETACH)
        block.insert_before(node, detach)
        node.replace_input(0 if node.kind == "aten::addmm" else 2, detach.output)
        # next to the op that reads it (after the views between: GPT-2's addmm result is viewed
        # back to [batch, tokens, width]), so that the two share a group
        route = graph.create("graphfuser::bias_grad", [read, operand], [rt], source=node.source)
        # (no schema: the host program runs the op table's eager program, ops/pointwise.py)
        block.insert_after(read.node, route)
        for user, i in list(read.uses):
            if user is not route:
                user.replace_input(i, route.output)
        done += 1
        jit_log("graph_fuser", 2, f"the bias gradient of {node.where()} comes from its consumer's fused backward")
    return done
