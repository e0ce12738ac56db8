"""``Fusion``: a defined fusion, its id in the fusion cache, and its execution.

Note [fusion cache]: a definition is keyed by its canonical text, the python_definition it
prints (plus the transform log of a hand schedule). Identical definitions get one id and one
record; the record keeps one runner per input signature (``TensorType.specialization`` of each
tensor, the type of each scalar). A new signature profiles the graph once on the actual inputs
(the host program with a ``ProfileRecord``, as the scripted path profiles), which gives every
intermediate a complete type, and compiles the tensor part through ``compile_group``: the
kernel cache below it is shared with scripted groups, so identical fusions compile once.

Example::

    >>> import torch
    >>> from graphfuser.frontend import Fusion, FusionDefinition
    >>> fs = Fusion()
    >>> with FusionDefinition(fs) as fd:
    ...     fd.add_output(fd.ops.relu(fd.define_tensor(2)))
    >>> Fusion(fs.id()).execute([-torch.ones(2, 3)])[0].sum().item()
    0.0
"""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable, Optional

import torch

from ..codegen.schedule import ParallelType, ScheduleError
from ..config import config
from ..executor.compiled import compile_group, write_repro
from ..executor.fusion import FusionFailure
from ..executor.fusion_eager import eager_runner
from ..executor.hostgen import build_program
from ..executor.profile import ProfileRecord
from ..ir.clone import clone_graph
from ..ir.graph import Graph, Node
from ..ir.types import TensorType
from ..log import warn
from ..ops import fusible, lookup
from ..passes.dce import dce
from ..ops.datatype import DataType
from .opcall import DefinitionError
from ..ops.python_definition import python_definition
from .scheduling import UserScheduler

if TYPE_CHECKING:  # pragma: no cover
    from .fusion_definition import FusionDefinition

_SCALAR_DTYPES = {"float": torch.float64, "int": torch.int64, "bool": torch.bool, "complex": torch.complex128}
_LOCK = threading.RLock()
_RECORDS: list["FusionRecord"] = []
_BY_KEY: dict[str, "FusionRecord"] = {}


class FusionRecord:
    """One cached fusion: the definition's graph, its inputs, its schedule and its runners."""

    def __init__(self, fid: int, fd: "FusionDefinition", scheduler: Optional[UserScheduler]) -> None:
        self.id = fid
        self.graph: Graph = fd.graph
        self.input_names = [repr(h) for h in fd._inputs]
        self.scalar_dtypes = dict(fd._scalar_dtypes)
        self.scheduler = scheduler
        self.runners: dict[tuple, Callable[[list], list]] = {}

    def definition(self) -> str:
        return python_definition(self.graph, self.id, self.scalar_dtypes)

    # -- inputs ------------------------------------------------------------------------------
    def check_inputs(self, inputs: Any) -> None:
        """Everything the definition says about the inputs, checked before anything runs."""
        if not isinstance(inputs, (list, tuple)):
            raise DefinitionError(f"execute() takes a list of inputs, got {type(inputs).__name__}")
        params = self.graph.inputs
        if len(inputs) != len(params):
            raise DefinitionError(f"fusion {self.id} takes {len(params)} input(s) ({', '.join(self.input_names)}), "
                                  f"got {len(inputs)}")
        device = None
        for k, (v, x) in enumerate(zip(params, inputs)):
            label = f"fusion {self.id}: input {k} ({self.input_names[k]})"
            t = v.type
            if isinstance(t, TensorType):
                if not isinstance(x, torch.Tensor):
                    raise DefinitionError(f"{label} must be a tensor, got {type(x).__name__}")
                if x.dtype != t.dtype:
                    raise DefinitionError(f"{label} has dtype {x.dtype}; the definition says {DataType.of(t.dtype)!r}")
                if x.dim() != len(t.sizes):
                    raise DefinitionError(f"{label} has rank {x.dim()}; the definition says {len(t.sizes)}")
                for d, s in enumerate(t.sizes):
                    if s == 1 and x.shape[d] != 1:
                        raise DefinitionError(f"{label}: dim {d} is a broadcast dim (symbolic size 1) but has size "
                                              f"{x.shape[d]}")
                if device is not None and x.device != device:
                    raise DefinitionError(f"{label} is on {x.device}, an earlier input on {device}")
                device = x.device
            else:
                ok = {"bool": (bool,), "int": (int,), "float": (int, float), "complex": (int, float, complex)}
                kinds = ok.get(t.name, ())
                if isinstance(x, torch.Tensor) or not isinstance(x, kinds) or \
                        (isinstance(x, bool) and t.name != "bool"):
                    raise DefinitionError(f"{label} must be a Python {t.name}, got {type(x).__name__}")

    # -- execution ---------------------------------------------------------------------------
    def execute(self, inputs: list) -> list[torch.Tensor]:
        self.check_inputs(inputs)
        sig = tuple(TensorType.of(x).specialization() if isinstance(x, torch.Tensor) else type(x) for x in inputs)
        run = self.runners.get(sig)
        if run is None:
            with _LOCK:
                run = self.runners.get(sig) or self._build(list(inputs))
                self.runners[sig] = run
        return run(list(inputs))

    def _build(self, inputs: list) -> Callable[[list], list]:
        g = clone_graph(self.graph)
        _profile(g, inputs, self.id)
        tensor_pos = [i for i, v in enumerate(g.outputs) if v.type.is_tensor]
        scalar_pos = [i for i, v in enumerate(g.outputs) if not v.type.is_tensor]
        tensor_fn, used, order = (self._tensor_runner(g, tensor_pos, inputs) if tensor_pos else (None, [], []))
        scalar_fn = None
        if scalar_pos:
            sg = clone_graph(g)
            sg.block.returns = [sg.outputs[i] for i in scalar_pos]
            scalar_fn = build_program(dce(sg), name="scalars", tuple_return=True).fn
        n_out = len(g.outputs)
        scalar_dtypes = [_SCALAR_DTYPES.get(g.outputs[i].type.name) for i in scalar_pos]

        def run(xs: list) -> list:
            outs: list[Any] = [None] * n_out
            if tensor_fn is not None:
                res = tensor_fn(*[xs[k] for k in used])
                for i, j in zip(tensor_pos, order):
                    outs[i] = res[j]
            if scalar_fn is not None:
                for i, dt, value in zip(scalar_pos, scalar_dtypes, scalar_fn(*xs)):
                    outs[i] = torch.tensor(value, dtype=dt)
            return outs

        return run

    def _tensor_runner(self, g: Graph, tensor_pos: list[int], inputs: list) -> tuple[Callable, list[int], list[int]]:
        """The compiled group of the tensor outputs: (runner, input positions it takes, output order)."""
        sub = clone_graph(g)
        outs = [sub.outputs[i] for i in tensor_pos]
        unique = list(dict.fromkeys(outs))
        order = [unique.index(o) for o in outs]
        sub.block.returns = unique
        dce(sub)
        used = [k for k, p in enumerate(sub.inputs) if p.uses or p in unique]
        sub.block.params = [sub.inputs[k] for k in used]
        if all(n.kind == "prim::Constant" for n in sub.block.nodes):      # outputs are inputs
            positions = [sub.inputs.index(o) for o in unique]
            return (lambda *xs: tuple(xs[p] for p in positions)), used, order
        device = next(x.device for x in inputs if isinstance(x, torch.Tensor))
        if self.scheduler is not None:
            self._check_schedule(device.type, inputs)
        group = Node("prim::CudaFusionGroup" if device.type == "cuda" else "prim::CpuFusionGroup",
                     {"cache_id": self.id})
        group.subgraph = sub
        reasons = []
        for n in sub.block.nodes:
            if n.kind in ("prim::Constant", "prim::ListConstruct"):   # lists: shapes and dims, as in scripted groups
                continue
            if n.outputs[0].type.is_tensor:
                why = fusible(n, device.type)
            else:
                why = None if lookup(n.kind) is not None else "not in the op table"
            if why:
                reasons.append(f"{n.kind}: {why}")
        if reasons:
            return self._fallback(sub, reasons[0]), used, order
        return compile_group(group, self.scheduler, self.definition()), used, order

    def _check_schedule(self, target: str, inputs: list) -> None:
        self.scheduler.check_target(target)
        if not any(op == "parallelize" and args[1] is ParallelType.Vectorize for op, args in self.scheduler.log):
            return
        for k, x in enumerate(inputs):
            if isinstance(x, torch.Tensor) and x.dim() and x.shape[-1] != 1 and x.stride(-1) != 1:
                raise ScheduleError(f"fusion {self.id}: input {k} ({self.input_names[k]}) has stride {x.stride(-1)} "
                                    "in its innermost dim; the schedule vectorizes it, which needs unit stride")

    def _fallback(self, sub: Graph, reason: str) -> Callable:
        msg = f"graphfuser: fusion {self.id} cannot be fused ({reason})"
        if config.is_disabled("fallback"):
            path = write_repro(f"fusion_{self.id}", sub, "", FusionFailure(msg))
            raise FusionFailure(f"{msg}. Repro written to {path}")
        warn(msg + "; running it op by op")
        return eager_runner(sub, "fallback")


def _profile(g: Graph, inputs: list, fid: int) -> None:
    """Run ``g`` eagerly once on ``inputs``, recording every tensor's complete type on it."""
    rec = ProfileRecord([])
    prog = build_program(g, name="profile", profiler=rec.record, tuple_return=True)
    rec.slots, rec.types, rec.seen = prog.slots, [None] * len(prog.slots), [False] * len(prog.slots)
    try:
        prog.fn(*inputs)
    except Exception as e:
        raise DefinitionError(f"fusion {fid}: the inputs do not fit the definition: "
                              f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from e
    rec.apply()


def register(fusion: "Fusion", fd: "FusionDefinition", scheduler: Optional[UserScheduler]) -> None:
    """Give ``fusion`` the record of ``fd``'s definition, creating it if it is new."""
    text = python_definition(fd.graph, 0, fd._scalar_dtypes)
    key = text if scheduler is None else f"{text}\n# schedule: {scheduler.key}"
    with _LOCK:
        record = _BY_KEY.get(key)
        if record is None:
            record = FusionRecord(len(_RECORDS), fd, scheduler)
            _RECORDS.append(record)
            _BY_KEY[key] = record
    fusion._record = record


def reset_fusion_cache() -> None:
    """Forget every defined fusion (ids start at 0 again); compiled kernels stay cached."""
    with _LOCK:
        _RECORDS.clear()
        _BY_KEY.clear()


class Fusion:
    """A fusion: defined once with ``FusionDefinition``, executed many times.

    ``Fusion()`` is empty until defined; ``Fusion(fid)`` is the already-defined fusion ``fid``.
    """

    def __init__(self, fid: Optional[int] = None) -> None:
        self._record: Optional[FusionRecord] = None
        self._defining = False
        if fid is not None:
            with _LOCK:
                if isinstance(fid, bool) or not isinstance(fid, int) or not 0 <= fid < len(_RECORDS):
                    known = f"ids 0..{len(_RECORDS) - 1} are defined" if _RECORDS else "none is defined"
                    raise DefinitionError(f"no fusion with id {fid!r} ({known})")
                self._record = _RECORDS[fid]

    def defined(self) -> bool:
        """True once a definition is complete (the fusion can execute)."""
        return self._record is not None

    def _require(self, what: str) -> FusionRecord:
        if self._record is None:
            raise DefinitionError(f"Fusion.{what}: the fusion is not defined yet "
                                  "(use `with FusionDefinition(fs) as fd:`)")
        return self._record

    def id(self) -> int:
        """The fusion's id in the fusion cache (identical definitions share it)."""
        return self._require("id()").id

    def execute(self, inputs: list) -> list[torch.Tensor]:
        """Run the fusion on ``inputs`` (tensors and Python scalars, in definition order).

        Returns the outputs in ``add_output`` order; scalar outputs come back as 0-dim tensors.
        """
        return self._require("execute()").execute(inputs)

    def print(self) -> None:
        """Print the fusion's IR (the graph the definition built)."""
        print(self._require("print()").graph, end="")

    def python_definition(self) -> str:
        """The runnable ``def nvfuser_fusion_id<N>(fd : FusionDefinition)`` text of this fusion."""
        return self._require("python_definition()").definition()

    def __repr__(self) -> str:
        return f"Fusion({self._record.id})" if self._record is not None else "Fusion(<undefined>)"
