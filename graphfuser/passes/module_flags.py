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

from typing import Any, Callable, Iterator, Optional

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


def _branch_only(v: Value) -> bool:
    """Whether every use of ``v`` is the condition of a ``prim::If``."""
    return bool(v.uses) and all(user.kind == "prim::If" and i == 0 for user, i in v.uses)


def _reads(graph: Graph, module: Optional[torch.nn.Module]) -> list[tuple[Node, torch.nn.Module, str]]:
    """(GetAttr node, the module, the flag's name) for each read of a flag on a chain from
    ``module``: its ``training``, and its plain bool attributes read only as a branch's condition
    (timm's ConvNeXt block's ``if self.use_conv_mlp:``), none of them written by the graph."""
    if module is None or not graph.inputs:
        return []
    written = {n.attrs.get("name") for n in _nodes(graph.block) if n.kind == "prim::SetAttr"}
    objs: dict[Value, Any] = {graph.inputs[0]: module}
    out = []
    for n in _nodes(graph.block):
        if n.kind != "prim::GetAttr" or n.inputs[0] not in objs:
            continue
        parent = objs[n.inputs[0]]
        if not isinstance(parent, torch.nn.Module):
            continue
        name = n.attrs["name"]
        if name == "training":
            if name not in written:
                out.append((n, parent, name))
            continue
        try:
            obj = module_attr(parent, name)
        except AttributeError:
            continue
        if isinstance(obj, torch.nn.Module):
            objs[n.outputs[0]] = obj
        elif type(obj) is bool and name not in written and name in parent.__dict__ and _branch_only(n.outputs[0]):
            out.append((n, parent, name))
    return out


def training_modules(graph: Graph, module: Optional[torch.nn.Module]) -> list[tuple[torch.nn.Module, str]]:
    """The (module, flag name) pairs ``graph`` reads (each once, in graph order)."""
    seen: dict[tuple[int, str], tuple[torch.nn.Module, str]] = {}
    for _, m, name in _reads(graph, module):
        seen.setdefault((id(m), name), (m, name))
    return list(seen.values())


def flag_reader(pairs: list[tuple[torch.nn.Module, str]]) -> Callable[[], tuple]:
    """A function of no argument returning the current value of each flag of ``pairs`` (what the
    executor reads on every call to pick its specialization): one tuple display of attribute
    reads, the modules bound in its namespace."""
    ns: dict[str, Any] = {f"m{i}": m for i, (m, _) in enumerate(pairs)}
    items = "".join(f"m{i}.{name}, " for i, (_, name) in enumerate(pairs))   # (GetAttr names: identifiers)
    exec(f"def read():\n    return ({items})\n", ns)  # noqa: S102
    return ns["read"]


def specialize_training(graph: Graph, module: Optional[torch.nn.Module], pairs: list[tuple[torch.nn.Module, str]],
                        flags: tuple) -> int:
    """Replace every read of a flag of ``pairs`` by the constant in ``flags`` (``flags[i]`` is
    the flag ``pairs[i]`` at the call); returns how many reads were replaced."""
    value = {(id(m), name): f for (m, name), f in zip(pairs, flags)}
    done = 0
    for node, m, name in _reads(graph, module):
        if (id(m), name) not in value:
            continue
        block = node.owner
        const = graph.create("prim::Constant", [], [Type("bool")], {"value": bool(value[(id(m), name)])})
        block.insert_before(node, const)
        for user, i in list(node.output.uses):
            user.replace_input(i, const.output)
        block.replace_return_everywhere(node.output, const.output)
        block.remove(node)
        done += 1
    if done:
        jit_log("graph_fuser", 2, f"{done} module flag read(s) specialized "
                f"({sum(map(bool, flags))} of {len(flags)} flag(s) set)")
    return done
