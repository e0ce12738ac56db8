"""Random ops draw from Philox: rewrite them into the op table's random rows (before profiling).

Each rewritten op gets a ``graphfuser::philox_state`` node in front of it, which the host program
runs per call: it takes (seed, offset) from torch's default generator of the input's device and
advances the generator past the values the op draws (``ops/philox.py``). The op itself becomes
``graphfuser::<op>(..., seed, offset)``, a pointwise row that fuses with its neighbours; seed and
offset are run-time int arguments of the kernel, and the backward of a differentiable group
(which recomputes the forward from the group's inputs) regenerates the same mask from them.

    aten::dropout(x, p, True)           -> graphfuser::dropout(x, p, seed, offset)
    aten::native_dropout(x, p, True)    -> graphfuser::native_dropout(x, p, seed, offset)
    aten::rand_like(x)                  -> graphfuser::rand_like(x, seed, offset)
    aten::bernoulli(p_tensor)           -> graphfuser::bernoulli(p_tensor, seed, offset)
    aten::bernoulli(x, p: float)        -> graphfuser::bernoulli_p(x, p, seed, offset)

Only forms with constant ``p`` and ``train`` and no explicit generator, dtype, layout or memory
format are rewritten; anything else stays the aten op (eager's RNG, unfused). A dropout whose
``train`` is a run-time bool (a function's ``training`` argument) becomes

    aten::dropout(x, p, train)          -> graphfuser::dropout(x, p, seed, offset, train)

whose row takes ``p`` and ``train`` as constants where every profiling run saw one value: the
group is specialized for the flag it saw (the identity, or Philox's dropout), and its guard sends a
call with the other value to the fallback, which runs the row's eager form with that value.
(A module's ``self.training`` is specialized before this, by ``module_flags.py``.)
"""
from __future__ import annotations

from typing import Optional

from ..ir.graph import Block, Graph, Node, Value
from ..ir.types import Type
from ..log import jit_log


def _const(v: Value):
    return v.constant() if v.is_constant else _MISSING


_MISSING = object()


def _all_none(values: list[Value]) -> bool:
    return all(v.is_constant and v.constant() is None for v in values)


def _p(v: Value) -> Optional[float]:
    p = _const(v)
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1:
        return None
    return float(p)


def _runtime_flag(v: Value) -> bool:
    return not v.is_constant and v.type.name == "bool"


def _runtime_p(v: Value) -> bool:
    return _p(v) is not None or (not v.is_constant and v.type.name == "float")


def _target(node: Node) -> Optional[tuple[str, list[Value], list[Value]]]:
    """The random kind ``node`` becomes, its inputs before (seed, offset) and after them; None
    to keep it."""
    ins = node.inputs
    if node.kind in ("aten::dropout", "aten::native_dropout") and len(ins) == 3:
        # (dropout with p = 0 returns its input itself: removed by _identity before this)
        if _const(ins[2]) is True and _p(ins[1]) is not None and \
                not (node.kind == "aten::dropout" and _p(ins[1]) == 0.0):
            return node.kind.replace("aten::", "graphfuser::"), [ins[0], ins[1]], []
        if node.kind == "aten::dropout" and _runtime_flag(ins[2]) and _runtime_p(ins[1]) and _p(ins[1]) != 0.0:
            # a run-time flag (and maybe p): both become the row's constants where profiling
            # saw one value, guarded; the row is the identity where the flag is False
            return "graphfuser::dropout", [ins[0], ins[1]], [ins[2]]
        return None
    if node.kind == "aten::rand_like" and _all_none(ins[1:]):
        return "graphfuser::rand_like", [ins[0]], []
    if node.kind == "aten::bernoulli":
        if len(ins) == 2 and _all_none(ins[1:]):
            return "graphfuser::bernoulli", [ins[0]], []
        if len(ins) == 3 and ins[1].type.name == "float" and _p(ins[1]) is not None and _all_none(ins[2:]):
            return "graphfuser::bernoulli_p", [ins[0], ins[1]], []
    return None


_DROPOUTS = ("aten::dropout", "aten::feature_dropout", "aten::alpha_dropout", "aten::feature_alpha_dropout")


def _identity(node: Node) -> bool:
    """A dropout that returns its input itself in eager: not training, or p = 0 (``_dropout_impl``)."""
    if node.kind not in _DROPOUTS or len(node.inputs) != 3 or len(node.outputs) != 1:
        return False
    return _const(node.inputs[2]) is False or _p(node.inputs[1]) == 0.0


def _rewrite_block(block: Block) -> int:
    done = 0
    graph: Graph = block.graph
    for node in list(block.nodes):
        for b in node.blocks:
            done += _rewrite_block(b)
        if _identity(node):
            # eager returns the input itself (the same tensor, its strides): so does the graph
            for user, i in list(node.output.uses):
                user.replace_input(i, node.inputs[0])
            block.replace_return_everywhere(node.output, node.inputs[0])
            block.remove(node)
            continue
        target = _target(node)
        if target is None:
            continue
        kind, ins, after = target
        state = graph.create("graphfuser::philox_state", [node.inputs[0]], [Type("int"), Type("int")],
                             source=node.source)
        block.insert_before(node, state)
        new = graph.create(kind, ins + list(state.outputs) + after, [o.type for o in node.outputs],
                           source=node.source)
        block.insert_before(node, new)
        for old, out in zip(node.outputs, new.outputs):
            for user, i in list(old.uses):
                user.replace_input(i, out)
            block.replace_return_everywhere(old, out)
        block.remove(node)
        jit_log("graph_fuser", 1, f"{node.where()} draws from Philox ({kind})")
        done += 1
    return done


def randomize(graph: Graph) -> int:
    """Rewrite the random ops of ``graph`` in place; returns how many were rewritten."""
    return _rewrite_block(graph.block)
