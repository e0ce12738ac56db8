"""Capture: ``torch.jit.script``'s graph (calls inlined) converted to graphfuser's IR.

Module parameters and buffers stay ``prim::GetAttr`` nodes on the module input (``self``), so
the host program reads them at run time and a changed parameter is seen on the next call.
``prim::If`` and ``prim::Loop`` stay blocks. Anything the host program's table cannot execute
raises ``UnsupportedError`` naming the construct and its source line (the executor then runs the
scripted object itself, so graphfuser is never less available than ``torch.jit.script``).
"""
from __future__ import annotations

import contextlib
import re
import warnings
from typing import Any, Optional

import torch

from ..ir.graph import Block, Graph, Value
from ..ir.types import TENSOR, Type
from ..executor.source import Captured, UnsupportedError  # noqa: F401  (raised and returned here)
from ..ops.aten import resolve_aten
from ..executor.handlers import handler_for
from .dropped_writes import dropped_writes, merged_signed_zeros


def _autocast_off() -> contextlib.ExitStack:
    """Scripting does not depend on autocast: a model scripted inside ``torch.autocast`` is
    captured as outside it (TorchScript's graph passes under an enabled CUDA autocast state
    crashed the process on torchvision's vit_b_16); autocast applies when the model runs."""
    stack = contextlib.ExitStack()
    for dev in ("cpu", "cuda"):
        if torch.is_autocast_enabled(dev):
            stack.enter_context(torch.autocast(dev, enabled=False))
    return stack


def _script(obj: Any):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return torch.jit.script(obj)
        except Exception as e:  # TorchScript's own message names the construct and line
            raise UnsupportedError(f"graphfuser.script could not script {getattr(obj, '__name__', type(obj).__name__)}:"
                                   f" {e}") from e


_SOURCE_RE = re.compile(r"#\s*(\S+:\d+:\d+)\s*$")


def _own_source(tnode) -> Optional[str]:
    text = str(tnode)
    m = _SOURCE_RE.search(text.splitlines()[0]) if text else None
    return m.group(1) if m else None


def _source_near(tnode) -> Optional[str]:
    """``file:line:col`` of ``tnode``; for a node TorchScript keeps no range for (prim::isinstance),
    that of the next node in its block or of the node that owns the block."""
    found = _own_source(tnode)
    if found is not None:
        return found
    block = tnode.owningBlock()
    nodes = list(block.nodes())
    for n in nodes[nodes.index(tnode) + 1:] if tnode in nodes else ():
        found = _own_source(n)
        if found is not None:
            return found
    owner = block.owningNode()
    return _source_near(owner) if owner is not None else None


def _type_of(tv) -> Type:
    t = tv.type()
    if isinstance(t, torch._C.TensorType):
        return TENSOR
    name = t.annotation_str if hasattr(t, "annotation_str") else str(t)
    name = {"Optional[Tensor]": "Tensor?"}.get(name, name)
    m = re.match(r"^Optional\[(.*)\]$", name)
    if m:
        name = m.group(1) + "?"
    m = re.match(r"^List\[(.*)\]$", name)
    if m:
        name = m.group(1) + "[]"
    return Type(name)


def _constant_value(tnode) -> Any:
    if not tnode.hasAttribute("value") and tnode.output().type().kind() == "NoneType":
        return None
    return tnode.output().toIValue()


class _Converter:
    def __init__(self, graph: Graph) -> None:
        self.g = graph
        self.vmap: dict[Any, Value] = {}

    def value(self, tv) -> Value:
        return self.vmap[tv.unique()]

    def convert_block(self, tblock, block: Block, params) -> None:
        for tp, name_hint in params:
            v = block.add_param(tp.debugName(), _type_of(tp))
            self.vmap[tp.unique()] = v
        for tnode in tblock.nodes():
            self.convert_node(tnode, block)
        block.returns = [self.value(o) for o in tblock.outputs()]

    def convert_node(self, tnode, block: Block) -> None:
        kind = tnode.kind()
        source = _own_source(tnode)
        attrs: dict[str, Any] = {}
        overload = None
        if kind == "prim::Constant":
            value = _constant_value(tnode)
            if value is not None or tnode.hasAttribute("value"):
                attrs["value"] = value
        elif kind in ("prim::GetAttr", "prim::SetAttr", "prim::CallMethod"):
            attrs["name"] = tnode.s("name")
        elif kind == "prim::isinstance":
            attrs["types"] = [t.annotation_str for t in tnode.tys("types")]
        handler = handler_for(kind)
        if handler is None:
            where = source or _source_near(tnode)
            raise UnsupportedError(f"unsupported construct {kind}" + (f" at {where}" if where else ""))
        if "::" in kind and not kind.startswith("prim::"):
            try:
                schema = tnode.schema()
            except RuntimeError:
                schema = None
            overload = resolve_aten(kind, schema) if schema != "(no schema)" else None
            if overload is None:
                raise UnsupportedError(f"unsupported operator {kind}" + (f" at {source}" if source else ""))
        node = self.g.create(kind, [self.value(i) for i in tnode.inputs()],
                             [_type_of(o) for o in tnode.outputs()], attrs, source,
                             [o.debugName() for o in tnode.outputs()])
        node.attrs.update({})
        if overload is not None:
            node.schema = overload
        block.append(node)
        for to, o in zip(tnode.outputs(), node.outputs):
            self.vmap[to.unique()] = o
        for tb in tnode.blocks():
            b = Block(self.g, owner=node)
            node.blocks.append(b)
            self.convert_block(tb, b, [(p, None) for p in tb.inputs()])


_RSUB = "aten::rsub.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor"


def _restore_rsub(block: Block) -> int:
    """``number - tensor`` scripts to TorchScript's builtin ``__rsub__``, ``torch.neg(self) + other``
    (inlined, its nodes' source is ``<string>:...``). Negating first is not eager's ``rsub``: an
    unsigned or int8 tensor wraps (``0.5 - uint8(1)`` would be ``255.5``, eager says ``-0.5``).
    Such a pair becomes ``aten::rsub(self, other)``, which promotes first, as eager does."""
    restored = 0
    for node in list(block.nodes):
        for b in node.blocks:
            restored += _restore_rsub(b)
        if node.kind != "aten::add" or len(node.inputs) != 3 or not (node.source or "").startswith("<string>:"):
            continue
        neg = node.inputs[0].node
        if neg is None or neg.kind != "aten::neg" or neg.source != node.source or neg.owner is not block \
                or len(neg.output.uses) != 1 or node.inputs[1].type.is_tensor:
            continue
        rsub = block.graph.create("aten::rsub", [neg.inputs[0], node.inputs[1], node.inputs[2]],
                                  [node.output.type], {}, node.source)
        rsub.schema = resolve_aten("aten::rsub", _RSUB)
        block.insert_before(node, rsub)
        for user, i in list(node.output.uses):
            user.replace_input(i, rsub.output)
        block.replace_return_everywhere(node.output, rsub.output)
        block.remove(node)
        block.remove(neg)
        restored += 1
    return restored


def forward_method(scripted: Any) -> Any:
    """The scripted module's ``forward``; for an overloaded one (``nn.LSTM``: ``forward__0`` for a
    Tensor input, ``forward__1`` for a PackedSequence), the first overload taking a Tensor."""
    if hasattr(scripted, "forward") and hasattr(scripted.forward, "graph"):
        return scripted.forward
    overloads = []
    i = 0
    while hasattr(scripted._c, f"forward__{i}"):
        overloads.append(getattr(scripted, f"forward__{i}"))
        i += 1
    for m in overloads:
        args = list(m.schema.arguments)[1:]
        if args and isinstance(args[0].type, torch._C.TensorType):
            return m
    if overloads:
        return overloads[0]
    raise UnsupportedError(f"{type(scripted).__name__} has no scripted forward", scripted)


def capture(obj: Any) -> Captured:
    """Script ``obj`` (a function or ``nn.Module``) and convert its inlined graph to the IR."""
    module = obj if isinstance(obj, torch.nn.Module) else None
    if module is None and not callable(obj):
        raise TypeError(f"graphfuser.script expects a function or nn.Module, got {type(obj).__name__}")
    with _autocast_off():
        scripted = _script(obj)
        fn = forward_method(scripted) if module is not None else scripted
        lost = dropped_writes(type(module).forward if module is not None else obj, fn.graph)
        if lost:
            # the graph computes another answer than eager: run the Python function itself
            raise UnsupportedError(f"torch.jit.script dropped the in-place write at {', '.join(lost)} (its target may "
                                   "be another tensor in eager: type_as / dropout / sum_to_size / atleast_Nd may "
                                   "return their input)", obj)
        source_fn = type(module).forward if module is not None else obj
        zeros = merged_signed_zeros(source_fn)
        if zeros:
            raise UnsupportedError(f"torch.jit.script merges the constant -0.0 at {', '.join(zeros)} with a 0.0 of "
                                   "the same function (constant pooling): a zero's sign would differ from eager's",
                                   obj)
        tgraph = fn.graph.copy()
        torch._C._jit_pass_inline(tgraph)
    g = Graph()
    conv = _Converter(g)
    try:
        conv.convert_block(tgraph.block() if hasattr(tgraph, "block") else tgraph, g.block,
                           [(i, None) for i in tgraph.inputs()])
    except UnsupportedError as e:
        e.scripted = scripted
        raise
    except Exception as e:  # a construct the converter does not know how to read
        raise UnsupportedError(f"cannot capture: {e}", scripted) from e
    _restore_rsub(g.block)
    schema = fn.schema
    args = list(schema.arguments)[1:] if module is not None else list(schema.arguments)
    defaults = {a.name: a.default_value for a in args if a.default_value is not None
                or a.has_default_value()} if args else {}
    name = type(obj).__name__ if module is not None else getattr(obj, "__name__", "fn")
    return Captured(g, module, [a.name for a in args], defaults, name, scripted)
