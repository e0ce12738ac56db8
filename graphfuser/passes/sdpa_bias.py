"""Boolean attention masks become SDPA's additive bias once per graph, not once per call.

``scaled_dot_product_attention`` given a boolean mask converts it to an additive bias on every
call, before its kernel runs: the cuDNN backend fills a tensor of the queries' dtype with
-65504 and writes 0 where the mask holds, the memory-efficient, flash (CPU) and math backends
write -inf instead of -65504. A model whose layers share one mask (GPT-2, BERT: a causal and a
padding mask made once) pays for the conversion in every layer: measured on an H200 (torch
2.11, bf16, [8, 12, 512, 64], mask [8, 1, 512, 512]), a call with the boolean mask took 59.3 us
and ran two fills and a masked write before the attention kernel; the same call given the
converted bias took 35.7 us, with the same kernel and a bitwise equal result
(``logs/sdpa-bias-probe-cuda-H200.log``). Inductor likewise computes the converted mask in its
own kernels. This pass, after profiling and before the partition, converts each boolean mask
once per dtype and backend, where the mask is made, and hands the bias to every attention that
reads it::

    %o = aten::scaled_dot_product_attention(%q, %k, %v, %mask, ...)
  ->
    %w = aten::where(%mask, 0., fill)         (fill: the chosen backend's value, above)
    %b = aten::to(%w, q's dtype)              (both fuse, with whatever made the mask)
    %c = graphfuser::sdpa_bias_check(%q, %k, %v, %b, ..., choice)
    %o = aten::scaled_dot_product_attention(%q, %k, %v, %c, ...)

The bias is then bitwise the tensor eager's backend would have made, so the attention's result
and gradients are eager's. ``graphfuser::sdpa_bias_check`` asks SDPA's backend choice again on
each call's tensors (``torch._fused_sdp_choice``, about 2 us of host time, where the boolean
mask's conversion cost three kernel launches): a call whose choice differs (another sequence
length or head size, an ``sdpa_kernel`` context, a disabled backend) gets the boolean mask back
(``bias == 0``, exact) and eager's own conversion.

When. On CUDA (``DEVICES``): a boolean mask of known sizes and strides, floating ``q``, ``k``,
``v`` of one dtype and ``is_causal`` not true, where ``torch._fused_sdp_choice`` on tensors of the
profiled types picks a backend of
``FILLS`` and picks it for the bias too. A mask that an in-place op writes (or a view of it)
gets its bias right before each call that reads it, shared with none. ``PYTORCH_NVFUSER_DISABLE=sdpa_bias``
keeps the boolean masks.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import torch
from torch.nn.attention import SDPBackend

from ..config import config
from ..ir.graph import Block, Graph, Node, Value
from ..ir.types import TensorType, Type
from ..log import jit_log
from ..ops.aten import DTYPE_CODES, resolve_aten
from .aliasing import AliasSets
from .sdpa_math import _FLOATS, SDPA, _const, _empty

DEVICES = ("cuda",)     # (the tests add "cpu")
# what eager's backend writes for a masked-out (False) position, by its backend choice
# (cuDNN: -65504 in the queries' dtype, which rounds to -65536 in bf16; the others -inf)
FILLS = {int(SDPBackend.CUDNN_ATTENTION): -65504.0, int(SDPBackend.EFFICIENT_ATTENTION): float("-inf"),
         int(SDPBackend.FLASH_ATTENTION): float("-inf"), int(SDPBackend.MATH): float("-inf")}

_WHERE = "aten::where.Scalar(Tensor condition, Scalar self, Scalar other) -> Tensor"
_TO = ("aten::to.dtype(Tensor(a) self, ScalarType dtype, bool non_blocking=False, bool copy=False, "
       "MemoryFormat? memory_format=None) -> Tensor(a)")
_CHECK = ("graphfuser::sdpa_bias_check(Tensor query, Tensor key, Tensor value, Tensor(a) bias, float dropout_p, "
          "bool is_causal, float? scale, bool enable_gqa, int choice) -> Tensor(a)")


def _typed(t: torch.Tensor, device: torch.device) -> TensorType:
    return dataclasses.replace(TensorType.of(t), device=device, requires_grad=False)


def _choice(n: Node) -> tuple[Optional[int], str]:
    """(SDPA's backend choice for ``n`` on its profiled types, why not) where its mask is a
    boolean one this pass converts; (None, why) where it keeps it."""
    if len(n.inputs) < 4:
        return None, "no mask"
    if n.inputs[3].node is not None and n.inputs[3].node.kind == "graphfuser::sdpa_bias_check":
        return None, "a bias made already (an earlier round of profiling)"
    q, k, v, mask = (i.type for i in n.inputs[:4])
    if not isinstance(mask, TensorType) or mask.dtype != torch.bool or not mask.complete \
            or mask.sizes is None or mask.strides is None:
        return None, "no boolean mask of known layout"
    ts = [q, k, v]
    if not all(isinstance(t, TensorType) and t.complete and t.sizes is not None and t.strides is not None
               and t.dtype in _FLOATS for t in ts):
        return None, "q, k, v not floating tensors of known layout"
    if len({t.dtype for t in ts}) != 1 or len({t.device for t in ts} | {mask.device}) != 1:
        return None, "q, k, v, mask of several dtypes or devices"
    if q.device is None or q.device.type not in DEVICES:
        return None, f"on {q.device}"
    # run-time values (a module's float attribute under TorchScript) are planned at their
    # defaults: each call's check asks again with its own
    defaults = [0.0, False, None, False]
    values = [x if c else defaults[i] for i, (c, x) in enumerate(_const(v) for v in n.inputs[4:8])]
    dropout, causal, scale, gqa = values + defaults[len(values):]
    if causal or not isinstance(dropout, (int, float)) or (scale is not None and not isinstance(scale, (int, float))):
        return None, "a causal flag beside the mask, or a dropout or scale that is not a number"
    args = (float(dropout), bool(causal))
    kw = dict(scale=scale, enable_gqa=bool(gqa))
    try:
        choice = torch._fused_sdp_choice(_empty(q), _empty(k), _empty(v), _empty(mask), *args, **kw)
        if choice not in FILLS:
            return None, f"SDPA runs backend {choice}"
        bias = torch.empty_strided(mask.sizes, mask.strides, dtype=q.dtype, device=q.device)
        if torch._fused_sdp_choice(_empty(q), _empty(k), _empty(v), bias, *args, **kw) != choice:
            return None, "SDPA would choose another backend for the bias"
    except (RuntimeError, ValueError) as e:
        return None, f"SDPA's backend choice raised ({str(e).splitlines()[0] if str(e) else type(e).__name__})"
    return choice, ""


class _Cursor:
    """Inserts nodes one after another: after ``after`` where given, else before ``at``."""

    def __init__(self, block: Block, at: Node, after: Optional[Node] = None) -> None:
        self.block, self.at, self.after = block, at, after

    def put(self, node: Node, schema: Optional[str] = None) -> Value:
        if schema is not None:
            node.schema = resolve_aten(node.kind, schema)
        if self.after is None:
            self.block.insert_before(self.at, node)
        else:
            self.block.insert_after(self.after, node)
            self.after = node
        return node.output

    def const(self, value, type_name: str) -> Value:
        attrs = {} if value is None else {"value": value}
        return self.put(self.block.graph.create("prim::Constant", [], [Type(type_name)], attrs))


def _bias(block: Block, at: Node, mask: Value, dtype: torch.dtype, fill: float, right_before: bool = False) -> Value:
    """``where(mask, 0, fill).to(dtype)``, typed, right after ``mask`` is made (before ``at``
    where it is a block input or made in another block, or with ``right_before``)."""
    made_here = not right_before and mask.node is not None and mask.node.owner is block
    c = _Cursor(block, at, mask.node if made_here else None)
    t = mask.type
    meta = torch.where(torch.empty_strided(t.sizes, t.strides, dtype=torch.bool, device="meta"), 0.0, fill)
    g = block.graph
    w = c.put(g.create("aten::where", [mask, c.const(0.0, "float"), c.const(fill, "float")],
                       [_typed(meta, t.device)], source=at.source), _WHERE)
    args = [w, c.const(DTYPE_CODES[dtype], "int"), c.const(False, "bool"), c.const(False, "bool"),
            c.const(None, "NoneType")]
    return c.put(g.create("aten::to", args, [_typed(meta.to(dtype), t.device)], source=at.source), _TO)


def bias_masks(graph: Graph) -> int:
    """Convert the boolean masks of ``graph``'s SDPA calls to additive biases (in place, on the
    profiled graph); returns how many calls read a bias."""
    if config.is_disabled("sdpa_bias"):
        return 0
    made: dict[tuple, Value] = {}
    done = 0
    sets: Optional[AliasSets] = None
    for n in list(graph.all_nodes()):
        if n.kind != SDPA:
            continue
        choice, why = _choice(n)
        if choice is None:
            if len(n.inputs) > 3 and isinstance(n.inputs[3].type, TensorType) and n.inputs[3].type.dtype == torch.bool:
                jit_log("graph_fuser", 2, f"attention at {n.where()} keeps its boolean mask: {why}")
            continue
        q, mask = n.inputs[0], n.inputs[3]
        dtype, fill = q.type.dtype, FILLS[choice]
        sets = sets or AliasSets(graph)
        if sets.is_written(mask):
            # an in-place op writes the mask (or a view of it) somewhere: its bias is made right
            # before this call, from the mask as this call reads it, and shared with no other
            bias = _bias(n.owner, n, mask, dtype, fill, right_before=True)
        else:
            key = (mask, dtype, fill, n.owner)
            bias = made.get(key)
            if bias is None:
                bias = made[key] = _bias(n.owner, n, mask, dtype, fill)
        c = _Cursor(n.owner, n)
        rest = list(n.inputs[4:8])
        defaults = [(0.0, "float"), (False, "bool"), (None, "NoneType"), (False, "bool")]
        rest += [c.const(v, tn) for v, tn in defaults[len(rest):]]
        check = c.put(graph.create("graphfuser::sdpa_bias_check", [*n.inputs[:3], bias, *rest, c.const(choice, "int")],
                                   [bias.type], source=n.source), _CHECK)
        n.replace_input(3, check)
        done += 1
    if done:
        jit_log("graph_fuser", 1, f"{done} attention call(s) read a bias made once from their boolean mask "
                                  f"({len(made)} made; passes/sdpa_bias.py)")
    return done
