"""The backward graphs of one forward graph optimize together.

A forward graph's differentiable groups each carry a backward graph, run by a ``ScriptedFunction``
of its own (``autodiff/function.py``), which profiles and optimizes as autograd reaches it. One
at a time, each built its kernels on the calling thread: a graph of one group has nothing to
build beside it, so the compile threads stood idle. resnet50's bf16 training step through
``torch.compile`` (H200) spent 2.4 s of its cold start in the call where its 53 backward graphs
optimized one after another, 1.8 s of it in five NVRTC compiles in a row.

So the backward graphs of one optimized forward graph form a *family*. A member profiles (its
inputs are the forward's saved tensors and the incoming gradients, whose types the forward's
own profile fixed) and, at the start of its next call, every member that has profiled optimizes:
their passes one after another, each member's kernels starting to build on the compile threads as
soon as its passes are done (``fusion.BuildStream``), then each member's host program. The calling member then runs
optimized; the others find themselves optimized when autograd reaches them. A member that has
not profiled yet (a group no gradient reached) stays in the family and optimizes with it later.

Members whose profiled graphs are the same (``profiled_key``: every node, constant, type and
profiled scalar, with canonical names) optimize once: a transformer's layers give the same
backward graphs layer after layer (GPT-2's 39 members, 12 layers of three, spent 0.77 s in their
passes one after another on an H200 machine, 20-30 ms each). The first of them runs the passes;
the others take a copy of its optimized graph (``optimize_as``), with fusion sites of their
own.

Members profile ``max(1, profiling_runs - 1)`` times (one by default, TorchScript's
``num_profiled_runs``): the profiling call that would end in the optimization is the one the
family optimizes before.
"""
from __future__ import annotations

from typing import Any, Iterator, Optional

import torch

from ..config import config
from ..ir.clone import clone_graph
from ..ir.graph import UNPROFILED, VARIED, Block, Graph, Node
from ..ir.types import TensorType
from ..log import jit_log
from .fusion import STATS, BuildStream, FusionSite


def profiled_enough(member: Any) -> bool:
    return member._calls >= max(1, config.profiling_runs - 1)


def adopt(sf: Any) -> None:
    """After ``sf`` is optimized: the backward graphs of its differentiable groups become one
    family (fresh ones only: a backward graph shared with another forward keeps its own pace)."""
    from ..autodiff.function import DifferentiableGroup

    members = [r.backward for r in sf._runners.values() if isinstance(r, DifferentiableGroup)]
    members = [m for m in members if m._family is None and m._calls == 0 and m._optimized is None]
    if len(members) < 2:
        return
    family = Family(members)
    for m in members:
        m._family = family


def join(sf: Any, like: Any) -> None:
    """``sf`` (the backward of a subset of a group's outputs, made as autograd first reaches the
    group with the others' gradients undefined: GPT-2's logits) joins the family of its group's
    full backward ``like`` while that has not optimized: its passes and builds go with the
    others' rather than on their own (0.41 s of GPT-2's training step on an H200 machine)."""
    family = like._family
    if family is not None and sf._family is None and sf._calls == 0:
        sf._family = family
        family.members.append(sf)


class Family:
    def __init__(self, members: list) -> None:
        self.members = members

    def optimize(self, caller: Any) -> None:
        """Optimize every member that has profiled, ``caller`` (whose lock its call holds) first;
        another member that is running now (its lock taken) is left to optimize on its own."""
        from .start_up import gc_paused

        ready, locked = [caller], []
        for m in self.members:
            if m is not caller and m._family is self and m._optimized is None and profiled_enough(m) \
                    and m._lock.acquire(blocking=False):
                locked.append(m)
                ready.append(m)
        try:
            built, todo, optimized = [], [], {}
            with BuildStream() as stream:
                with gc_paused():
                    for m in ready:
                        m._family = None            # (once: a member that must profile again goes on alone)
                        key = profiled_key(m)
                        twin = optimized.get(key) if key is not None else None
                        result = optimize_as(m, *twin) if twin is not None else m._optimize(build=False)
                        if result is not None and key is not None and twin is None:
                            optimized[key] = (m, _copy(result[0]), _positions(result[0], result[1]))
                        if result is not None:
                            built.append((m, *result))
                            mine = [gr for gr in result[1] if gr not in m._runners and gr.kind.endswith("FusionGroup")]
                            todo += [(m, gr) for gr in mine]
                            stream.add(mine)        # its kernels build while the next member's passes run
                for (m, gr), runner in zip(todo, stream.finish() or ()):
                    m._runners.setdefault(gr, runner)
            for m, g, _ in built:
                m._finish(g)
            jit_log("graph_fuser", 1, f"{caller._captured.name}: {len(built)} backward graph(s) optimized together, "
                                      f"{len(todo)} group(s) built on the compile threads")
        finally:
            for m in locked:
                m._lock.release()
        self.members = [m for m in self.members if m._family is self]


_PLAIN = (type(None), bool, int, float, str, torch.dtype, torch.device, torch.memory_format, torch.layout)


def _plain(x: Any) -> bool:
    if isinstance(x, (tuple, list)):
        return all(_plain(i) for i in x)
    return isinstance(x, _PLAIN)


def profiled_key(sf: Any) -> Optional[str]:
    """What ``sf``'s optimization depends on, as text with canonical value names: its profiled
    graph (every node's kind, schema, inputs and attributes; every value's type and profiled
    scalar) and what it was captured with; None where something in it is not plain data (then it
    optimizes on its own)."""
    cap = sf._captured
    if sf._module is not None or sf._flag_mods or cap.static_inputs or cap.loose_output_strides:
        return None
    sf._record.apply()
    names: dict = {}
    lines = [f"{sf._autocast} {cap.fixed_sizes}"]
    try:
        for line in _block_lines(sf._work.block, names):
            lines.append(line)
    except _NotPlain:
        return None
    return "\n".join(lines)


class _NotPlain(Exception):
    pass


def _value(v: Any, names: dict) -> str:
    if not (v.profiled is UNPROFILED or v.profiled is VARIED or _plain(v.profiled)):
        raise _NotPlain
    t = v.type
    return f"{names.setdefault(v, f'%{len(names)}')}:{t!r}" if isinstance(t, TensorType) \
        else f"{names.setdefault(v, f'%{len(names)}')}:{t.name}={v.profiled!r}"


def _block_lines(block: Block, names: dict) -> Iterator[str]:
    yield "(" + ",".join(_value(p, names) for p in block.params) + ")"
    for n in block.nodes:
        if n.subgraph is not None or not all(_plain(a) for a in n.attrs.values()):
            raise _NotPlain
        if not all(v in names for v in n.inputs):
            raise _NotPlain
        ins = ",".join(names[v] for v in n.inputs)
        attrs = sorted((k, repr(a)) for k, a in n.attrs.items())
        yield f"{n.kind} {n.schema} ({ins}) {attrs} -> " + ",".join(_value(o, names) for o in n.outputs)
        for b in n.blocks:
            yield "{"
            yield from _block_lines(b, names)
            yield "}"
    if not all(r in names for r in block.returns):
        raise _NotPlain
    yield "return " + ",".join(names[r] for r in block.returns)


_PLANS = ("_conv_plan", "_attention_plan", "_rotary_plan", "_row_plan", "_sdpa_math_plan")


def _values(g: Graph) -> Iterator[Any]:
    """Every value of ``g``, its groups' subgraphs' too, in an order ``clone_graph`` keeps."""
    def block(b: Block) -> Iterator[Any]:
        yield from b.params
        for n in b.nodes:
            yield from n.outputs
            for nb in n.blocks:
                yield from block(nb)
            if n.subgraph is not None:
                yield from _values(n.subgraph)
    return block(g.block)


def _copy(g: Graph) -> Graph:
    """``clone_graph`` with each value's profiled scalar (what a group's lowering may read)."""
    new = clone_graph(g)
    for a, b in zip(_values(g), _values(new)):
        b.profiled = a.profiled
    return new


def _positions(g: Graph, groups: list[Node]) -> list[int]:
    where = {n: i for i, n in enumerate(g.all_nodes())}
    return [where[gr] for gr in groups]


def optimize_as(sf: Any, twin: Any, optimized: Graph, positions: list[int]) -> tuple[Graph, list[Node]]:
    """``sf._optimize(build=False)`` for a member whose profiled graph is ``twin``'s (the same
    ``profiled_key``): a copy of the twin's optimized graph (kept as the passes left it), its
    groups at the same places, each with a fusion site of ``sf``'s own."""
    STATS["optimizations"] += 1
    sf._record.apply()
    for plan in _PLANS:
        setattr(sf, plan, getattr(twin, plan, None))
    g = _copy(optimized)
    nodes = list(g.all_nodes())
    groups = [nodes[i] for i in positions]
    sf._work = g
    for group in groups:
        site = FusionSite(group, sf)
        sf._sites[group] = site
        sf._register_fallbacks(group, site)
    return g, groups
