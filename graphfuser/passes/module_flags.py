"""A module's ``training`` flags as constants of the specialization (before profiling).

``nn.Dropout.forward`` is ``F.dropout(x, self.p, self.training)`` and ``nn.BatchNorm2d.forward``
branches on ``self.training``: read at run time, the flag hides from the passes what the call
does. ``randomize`` leaves a dropout whose ``train`` is not a constant to eager's RNG, unfused,
and ``batch_norm_training`` keeps both behaviours of a batch norm under ``prim::If(training)``,
whose consumers (the ReLU, the residual add) then cannot join its group.

So the flags are part of what a specialization is for, as the autocast state is: the executor
reads the ``training`` flag of every submodule the graph reads it from (``training_modules``,
in graph order) on each call, and a call whose flags differ from its specialization's runs the
specialization made for them (``ScriptedFunction._specialized``). In the specialization's graph
each such read is the constant it was (``specialize_training``), so ``fold_constant_ifs`` inlines
the branch taken, a training dropout draws from Philox and fuses, and a training batch norm is
split as in ``batch_norm.py``'s straight rewrite. ``model.train()`` / ``model.eval()`` switch
between two specializations; ``model.bn.eval()`` alone makes a third.

Reads not on a ``prim::GetAttr`` chain from the module, and graphs that write a ``training``
attribute (``prim::SetAttr``), stay run-time reads.
"""
from __future__ import annotations

from typing import Any, Iterator, Optional

import torch

from ..ir.graph import Block, Graph, Node, Value
from ..ir.types import Type
from ..log import jit_log


def module_attr(obj: Any, name: str) -> Any:
    """``getattr(obj, name)``, reading a module's parameter / buffer / submodule dicts first."""
    d = obj.__dict__
    for slot in ("_parameters", "_buffers", "_modules"):
        s = d.get(slot)
        if s is not None and name in s:
            return s[name]
    return getattr(obj, name)


def _nodes(block: Block) -> Iterator[Node]:
    for n in block.nodes:
        yield n
        for b in n.blocks:
            yield from _nodes(b)


def _reads(graph: Graph, module: Optional[torch.nn.Module]) -> list[tuple[Node, torch.nn.Module]]:
    """(GetAttr node, the module it reads ``training`` of) for each read on a chain from ``module``."""
    if module is None or not graph.inputs:
        return []
    objs: dict[Value, Any] = {graph.inputs[0]: module}
    out = []
    for n in _nodes(graph.block):
        if n.kind == "prim::SetAttr" and n.attrs.get("name") == "training":
            return []
        if n.kind != "prim::GetAttr" or n.inputs[0] not in objs:
            continue
        parent = objs[n.inputs[0]]
        if not isinstance(parent, torch.nn.Module):
            continue
        name = n.attrs["name"]
        if name == "training":
            out.append((n, parent))
            continue
        try:
            obj = module_attr(parent, name)
        except AttributeError:
            continue
        if isinstance(obj, torch.nn.Module):
            objs[n.outputs[0]] = obj
    return out


def training_modules(graph: Graph, module: Optional[torch.nn.Module]) -> list[torch.nn.Module]:
    """The modules whose ``training`` flag ``graph`` reads (each once, in graph order)."""
    seen: dict[int, torch.nn.Module] = {}
    for _, m in _reads(graph, module):
        seen.setdefault(id(m), m)
    return list(seen.values())


def specialize_training(graph: Graph, module: Optional[torch.nn.Module], modules: list[torch.nn.Module],
                        flags: tuple) -> int:
    """Replace every read of a ``training`` flag in ``modules`` by the constant in ``flags``
    (``flags[i]`` is ``modules[i].training`` at the call); returns how many reads were replaced."""
    value = {id(m): f for m, f in zip(modules, flags)}
    done = 0
    for node, m in _reads(graph, module):
        if id(m) not in value:
            continue
        block = node.owner
        const = graph.create("prim::Constant", [], [Type("bool")], {"value": bool(value[id(m)])})
        block.insert_before(node, const)
        for user, i in list(node.output.uses):
            user.replace_input(i, const.output)
        block.replace_return_everywhere(node.output, const.output)
        block.remove(node)
        done += 1
    if done:
        jit_log("graph_fuser", 2, f"{done} module training flag read(s) specialized "
                f"({sum(map(bool, flags))} of {len(flags)} module(s) training)")
    return done
