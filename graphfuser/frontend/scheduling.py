"""Hand scheduling of a FusionDefinition with the kernel's own primitives.

After ``fd.schedule()`` every tensor of the definition has a loop domain over its logical dims
(a ``LoopNest``; broadcast dims have extent 1) that ``merge`` / ``split`` / ``reorder`` /
``parallelize`` transform, exactly the calls the automatic pointwise scheduler makes.

graphfuser inlines the whole fusion into one loop nest: the kernel's nest is the domain of the
*reference*, the scheduled output. ``compute_at`` and ``inline_most`` are therefore checked and
recorded (``compute_at`` also replays the consumer's transforms on the producers, so that
``parallelize_all_like`` finds the same axes), but they never change the generated loops.

At compile time the reference's transform log replays on the kernel's roots (one root per
non-broadcast dim of the output, in memory order; see ``LoopNest.over_axes``), through the
``scheduler`` hook of ``executor.compiled.CompiledGroup``.

Example (the seed's pointwise schedule)::

    >>> import torch
    >>> from graphfuser.frontend import Fusion, FusionDefinition, ParallelType, ComputeAtMode
    >>> fs = Fusion()
    >>> with FusionDefinition(fs) as fd:
    ...     t0, t1 = fd.define_tensor(2), fd.define_tensor(2)
    ...     t3 = fd.ops.add(t0, fd.ops.add(t1, 2.0))
    ...     fd.add_output(t3)
    ...     with fd.schedule():
    ...         _ = t3.merge(0).split(0, 128).split(0, 4)
    ...         _ = [t.compute_at(t3, -1, ComputeAtMode.MostInlined) for t in (t0, t1)]
    ...         fd.inline_most()
    ...         _ = t3.parallelize(0, ParallelType.BIDx).parallelize(1, ParallelType.Unroll)
    ...         _ = t3.parallelize(2, ParallelType.TIDx).parallelize_all_like()
    >>> fs.execute([torch.ones(2, 3), torch.ones(2, 3)])[0].sum().item()
    24.0
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from ..ir.kir import Kernel
from ..codegen.lower import LaunchPlan
from ..codegen.pointwise import PointwiseParams
from ..codegen.schedule import LoopNest, ParallelType, ScheduleError, iconst, ivar
from ..ir.types import TensorType
from ..ops import lookup

if TYPE_CHECKING:  # pragma: no cover
    from .fusion_definition import FusionDefinition, Tensor

TRANSFORMS = ("merge", "split", "reorder")


class ComputeAtMode(enum.Enum):
    """Where producers are computed relative to a consumer (nvFuser's names)."""

    Standard = "Standard"
    BestEffort = "BestEffort"
    MostInlined = "MostInlined"

    def __repr__(self) -> str:
        return f"ComputeAtMode.{self.value}"


@dataclass(frozen=True)
class UserScheduler:
    """A hand schedule for ``CompiledGroup``: the reference's transform log, replayed per kernel.

    ``heuristics`` and ``schedule`` have the shape of the automatic pointwise scheduler's; the
    launch parameters (threads per block, elements per block) are read off the schedule.
    """

    rank: int
    log: tuple[tuple[str, tuple], ...]
    coalesce = False      # one kernel root per iteration dim: the log addresses logical dims

    @property
    def key(self) -> str:
        return "; ".join(f"{op}{args!r}" for op, args in self.log)

    def kernel_nest(self, kernel: Kernel, plan: LaunchPlan) -> LoopNest:
        if plan.out_rank != self.rank:
            raise ScheduleError(f"the schedule is written for rank {self.rank}; this kernel iterates "
                                f"over {plan.out_rank} dims (schedule the highest-rank output)")
        root_of = {od: r for r, dims in enumerate(plan.root_dims) for od in dims}
        axes = [root_of.get(d) for d in range(self.rank)]
        if not plan.root_dims:          # every dim is broadcast: one root of extent 1
            axes = [0] + axes[1:] if axes else [0]
        nest = LoopNest.over_axes(max(len(plan.root_dims), 1), axes)
        for op, args in self.log:
            getattr(nest, op)(*args)
        return nest

    def heuristics(self, kernel: Kernel, plan: LaunchPlan, target: str, knobs: dict,
                   vectorize: bool = True) -> PointwiseParams:
        if target != "cuda":
            return PointwiseParams(target)
        nest = self.kernel_nest(kernel, plan)
        block, unroll, vector = 1, 1, 1
        for k, d in enumerate(nest.leaves):
            c = d.extent.const
            if d.ptype is ParallelType.TIDx:
                block *= c
            elif d.ptype is ParallelType.Vectorize and vectorize and _vectorizable(nest, k):
                vector = c
            elif d.ptype not in (ParallelType.BIDx, ParallelType.BIDy) and c:
                unroll *= c
        return PointwiseParams("cuda", vector=vector, block=block, unroll=unroll)

    def schedule(self, kernel: Kernel, plan: LaunchPlan, params: PointwiseParams) -> LoopNest:
        nest = self.kernel_nest(kernel, plan)
        if params.target == "cuda" and params.vector == 1:
            for d in nest.leaves:       # the scalar variant (misaligned inputs, broadcast inner dim)
                if d.ptype is ParallelType.Vectorize:
                    d.ptype = ParallelType.Serial
        return nest

    def check_target(self, target: str) -> None:
        """Reject what the CUDA launcher cannot launch: TIDx needs a constant extent, TIDy is not
        launched, and one axis must be bound to BIDx."""
        if target != "cuda":
            return
        nest = LoopNest(self.rank)
        for op, args in self.log:
            getattr(nest, op)(*args)
        ptypes = [d.ptype for d in nest.leaves]
        for d in nest.leaves:
            if d.ptype is ParallelType.TIDx and d.extent.const is None:
                raise ScheduleError(f"TIDx axis of extent {d.extent}: threads per block must be a constant "
                                    "(split the axis and bind the constant part)")
        if ParallelType.TIDy in ptypes:
            raise ScheduleError("TIDy: this build launches one-dimensional blocks; use TIDx")
        if ParallelType.BIDx not in ptypes:
            raise ScheduleError("a CUDA schedule binds one axis to BIDx (otherwise every block would "
                                "compute the whole fusion)")


def _vectorizable(nest: LoopNest, k: int) -> bool:
    d = nest.leaves[k]
    return d.extent.const is not None and d.extent.const > 1 and nest.walks_innermost(k)


class ScheduleState:
    """The scheduling side of one FusionDefinition: a domain and a transform log per tensor."""

    def __init__(self, fd: "FusionDefinition") -> None:
        self.fd = fd
        self.nests: dict[int, LoopNest] = {}
        self.logs: dict[int, list[tuple[str, tuple]]] = {}
        self.computed_at: dict[int, tuple[int, int, ComputeAtMode]] = {}
        self.inlined = False

    # -- domains ----------------------------------------------------------------------------
    def nest(self, t: "Tensor") -> LoopNest:
        if t.index not in self.nests:
            sizes = t.value.type.sizes
            exts = [iconst(1) if s == 1 else ivar(f"n{k}") for k, s in enumerate(sizes)]
            nest = LoopNest(len(sizes), exts) if sizes else LoopNest(0)
            self.nests[t.index] = nest
            self.logs[t.index] = []
        return self.nests[t.index]

    def apply(self, t: "Tensor", op: str, *args: Any) -> None:
        self.fd._check_scheduling(f"{t!r}.{op}")
        nest = self.nest(t)
        if op == "parallelize":
            axis, ptype = args
            if not isinstance(ptype, ParallelType):
                raise ScheduleError(f"{t!r}.parallelize({axis}, {ptype!r}): not a ParallelType")
            if ptype is ParallelType.Vectorize:
                self._check_vectorize(t, axis)
        try:
            getattr(nest, op)(*args)
        except ScheduleError as e:
            raise ScheduleError(str(e) if str(e).startswith(repr(t)) else f"{t!r}.{e}") from None
        self.logs[t.index].append((op, args))

    def _check_vectorize(self, t: "Tensor", axis: int) -> None:
        for h in self.fd._inputs:
            ty = h.value.type
            if not isinstance(ty, TensorType) or not ty.sizes or ty.sizes[-1] == 1:
                continue
            last = len(ty.sizes) - 1
            if not (ty.stride_order and ty.stride_order[-1] == last and ty.contiguity[-1]):
                raise ScheduleError(f"{t!r}.parallelize({axis}, Vectorize): input {h!r} is not declared contiguous "
                                    "in its innermost dim; vectorized accesses need unit stride")

    # -- producers and consumers ------------------------------------------------------------
    def between(self, producer: "Tensor", consumer: "Tensor") -> list["Tensor"]:
        """Tensors on a path from ``producer`` to ``consumer`` (producer included, consumer not)."""
        handles = {h.value: h for h in self.fd._handles if h.is_tensor}
        reach: set = set()            # values from which the consumer is reachable
        stack = [consumer.value]
        while stack:
            v = stack.pop()
            if v in reach:
                continue
            reach.add(v)
            if v.node is not None:
                stack += list(v.node.inputs)
        down: set = set()             # values reachable from the producer
        stack = [producer.value]
        while stack:
            v = stack.pop()
            if v in down:
                continue
            down.add(v)
            stack += [u.outputs[0] for u, _ in v.uses if u.outputs]
        return [handles[v] for v in handles if v in reach and v in down and v is not consumer.value]

    def compute_at(self, producer: "Tensor", consumer: Any, pos: int, mode: Any) -> None:
        self.fd._check_scheduling(f"{producer!r}.compute_at")
        what = f"{producer!r}.compute_at({consumer!r}, {pos}, {mode!r})"
        self.fd._check_handle(consumer, what)
        if not getattr(consumer, "is_tensor", False):
            raise ScheduleError(f"{what}: the consumer must be a tensor")
        if not isinstance(mode, ComputeAtMode):
            raise ScheduleError(f"{what}: mode must be a ComputeAtMode")
        if consumer is producer or consumer.value is producer.value:
            raise ScheduleError(f"{what}: a tensor is not computed at itself")
        path = self.between(producer, consumer)
        if producer not in path:
            raise ScheduleError(f"{what}: {producer!r} is not a producer of {consumer!r}")
        n = len(self.nest(consumer).leaves)
        if not -n - 1 <= pos <= n:
            raise ScheduleError(f"{what}: position {pos} is outside {consumer!r}'s {n} axes")
        replay = [(op, args) for op, args in self.logs[consumer.index] if op in TRANSFORMS]
        for t in path:
            if t.ndim != consumer.ndim or any(op in TRANSFORMS for op, _ in self.logs.get(t.index, [])):
                continue
            for op, args in replay:
                self.apply(t, op, *args)
        self.computed_at[producer.index] = (consumer.index, pos, mode)

    def inline_most(self, tensors: Optional[list] = None) -> None:
        self.fd._check_scheduling("inline_most")
        for t in tensors or []:
            self.fd._check_handle(t, "inline_most")
        self.inlined = True

    def parallelize_all_like(self, ref: "Tensor", targets: Optional[list] = None) -> None:
        """Copy ``ref``'s parallel types onto ``targets`` (default: every tensor whose transforms
        match ``ref``'s, so whose axes correspond one to one)."""
        self.fd._check_scheduling("parallelize_all_like")
        ref_nest = self.nest(ref)
        ref_log = [x for x in self.logs[ref.index] if x[0] in TRANSFORMS]
        explicit = targets is not None
        if targets is None:
            targets = [h for h in self.fd._handles if h.is_tensor and h is not ref
                       and [x for x in self.logs.get(h.index, []) if x[0] in TRANSFORMS] == ref_log]
        for t in targets:
            self.fd._check_handle(t, "parallelize_all_like")
            nest = self.nest(t)
            if len(nest.leaves) != len(ref_nest.leaves):
                if explicit:
                    raise ScheduleError(f"parallelize_all_like: {t!r} has {len(nest.leaves)} axes, {ref!r} has "
                                        f"{len(ref_nest.leaves)}; apply the same transforms first")
                continue
            for k, d in enumerate(ref_nest.leaves):
                if nest.leaves[k].ptype is not d.ptype:
                    self.apply(t, "parallelize", k, d.ptype)

    # -- the kernel's schedule --------------------------------------------------------------
    def finish(self) -> Optional[UserScheduler]:
        """The schedule the kernel uses: the scheduled output's log (None: automatic)."""
        fd = self.fd
        logged = {i for i, log in self.logs.items() if log}
        if not logged:
            return None
        outs = [h for h in fd._outputs if h.is_tensor and h.index in logged]
        if not outs:
            raise ScheduleError("only non-output tensors were scheduled; the kernel's loop nest is the scheduled "
                                "output's, so transform an output")
        ref = outs[0]
        for other in outs[1:]:
            if self.logs[other.index] != self.logs[ref.index]:
                raise ScheduleError(f"outputs {ref!r} and {other!r} are scheduled differently; the whole fusion "
                                    "is one loop nest, so schedule them alike (or only one of them)")
        for node in fd.graph.block.nodes:
            row = lookup(node.kind)
            if row is not None and row.kind not in ("pointwise", "cast"):
                raise ScheduleError(f"hand schedules cover pointwise fusions; {row.name} is a {row.kind} op")
        rank = max(h.ndim for h in fd._handles if h.is_tensor)
        if ref.ndim != rank:
            raise ScheduleError(f"{ref!r} has rank {ref.ndim}, the fusion iterates over {rank} dims: "
                                "schedule the highest-rank output")
        return UserScheduler(ref.ndim, tuple(self.logs[ref.index]))

    def loop_nest_str(self, t: "Tensor") -> str:
        return self.nest(t).loop_nest_str().replace("T[...]", f"{t!r}[...]", 1)
