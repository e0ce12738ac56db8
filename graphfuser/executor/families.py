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

Members profile ``max(1, profiling_runs - 1)`` times (one by default, TorchScript's
``num_profiled_runs``): the profiling call that would end in the optimization is the one the
family optimizes before.
"""
from __future__ import annotations

from typing import Any

from ..config import config
from ..log import jit_log
from .fusion import BuildStream


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
            built, todo = [], []
            with BuildStream() as stream:
                with gc_paused():
                    for m in ready:
                        m._family = None            # (once: a member that must profile again goes on alone)
                        result = m._optimize(build=False)
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
