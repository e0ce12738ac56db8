"""Fusion sites: what runs for a fusion group, its fallback, and re-specialization on misses.

A ``FusionSite`` is one fused region of the original graph. It owns the eager fallback program,
the miss statistics per input signature, and the compiled runner of every specialization
(group node) made for it. A signature (tensor specializations plus the values of the scalars
the group was specialized on) that misses the guards twice gets its own specialization, up to
``max_specializations``; after that the site stays on the fallback and warns once, saying why.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from ..config import config
from ..ir.graph import Node
from ..ir.types import TensorType
from ..log import jit_log, warn
from .fusion_eager import eager_runner


# Events a steady-state call never has (tests and tools/prof_zoo_train.py count them): calls that ran
# the profiling program, graphs optimized, fusion groups re-specialized, guard misses (fallbacks).
STATS = {"profiling_calls": 0, "optimizations": 0, "respecializations": 0, "fallbacks": 0}


class FusionFailure(RuntimeError):
    """A fusion group could not be compiled or launched (raised when fallback is disabled)."""


class FusionSite:
    """``group`` is wrapped by guard insertion; the site runs and re-specializes its fallback,
    whose subgraph (the template) still takes the scalars the group holds as constants."""

    def __init__(self, group: Node, executor: Any) -> None:
        guard, fb = _guard_and_fallback(group)
        self.template = fb.subgraph
        self.kind = group.kind
        self.executor = executor
        self.fallback_fn = eager_runner(fb.subgraph, "fallback")
        self.misses: dict[tuple, int] = {}
        self.rejected: set[tuple] = set()
        self.n_specializations = 1
        self.exhausted = False
        self.tensor_positions = [i for i, v in enumerate(fb.inputs) if v.type.is_tensor]
        checked = guard.inputs[len(guard.attrs.get("types", ())):] if guard is not None else []
        self.value_positions = [fb.inputs.index(v) for v in checked]

    def signature(self, inputs: tuple) -> tuple:
        return tuple(TensorType.of(inputs[i]).specialization() if isinstance(inputs[i], torch.Tensor) else None
                     for i in self.tensor_positions) + tuple(_hashable(inputs[i]) for i in self.value_positions)

    def fallback(self, *inputs: Any) -> tuple:
        out = self.fallback_fn(*inputs)
        STATS["fallbacks"] += 1
        if self.exhausted or not config.guard_mode:
            return out
        sig = self.signature(inputs)
        if sig in self.rejected:
            return out
        n = self.misses[sig] = self.misses.get(sig, 0) + 1
        jit_log("guard", 1, f"guard miss on {self.kind} (signature seen {n} time(s))")
        if n == 2:
            if self.n_specializations >= config.max_specializations:
                self.exhausted = True
                warn(f"graphfuser: {self.kind} reached max_specializations={config.max_specializations}; "
                     "new input signatures run on the eager fallback from now on "
                     "(raise max_specializations in the config to allow more)")
            else:
                self.executor.request_respecialization(self, inputs, sig)
        return out


def _guard_and_fallback(group: Node) -> tuple[Optional[Node], Node]:
    """The guard and fallback nodes guard insertion put around ``group`` (None and the group
    itself for a group that was not wrapped)."""
    ifn = group.owner.owner if group.owner is not None else None
    if ifn is None or ifn.kind != "prim::If" or ifn.owner is None:
        return None, group
    from ..passes.guard import guarded

    return guarded(group)


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def make_group_runner(group: Node) -> Callable[..., tuple]:
    """The compiled kernel for ``group`` (the codegen backend), or the eager program when the
    backend cannot take it; compile failures follow the fallback policy."""
    from ..autodiff import make_differentiable_runner
    from ..autodiff.saved import save_statistics
    from .compiled import compile_group  # the kernel backend

    # a training batch norm's statistics: the forward kernel of a copy writes what the backward reads
    forward, saved = save_statistics(group)
    return make_differentiable_runner(group, compile_group(forward), _graph_runners(), forward.subgraph, saved)


_RUNNERS: list = []


def _graph_runners() -> Any:
    """How autodiff runs a backward graph (profiled and fused, never replayed) and a group's eager
    program: handed down to it, since autodiff sits below the executor."""
    if not _RUNNERS:
        from ..autodiff import GraphRunners
        from .executor import ScriptedFunction

        def script(graph: Any, name: str, known: Optional[dict[int, str]] = None) -> Any:
            return ScriptedFunction.from_graph(graph, name, replay=False, known=known)

        _RUNNERS.append(GraphRunners(script, lambda sub: eager_runner(sub, "differentiable_fallback")))
    return _RUNNERS[0]
