"""The profiling executor: the only place where every stage is wired together.

``ScriptedFunction`` runs the captured graph through a profiling host program for the first
``profiling_runs`` calls, merging the types it sees (and the values of the scalars that feed
reductions' dims, keepdim, dtype, correction and eps). It then runs the pass pipeline once
(functionalize -> partition -> guards -> dce), makes a fusion site per group, and from then on
every call runs one generated host program. Guard misses run the fallback; a signature seen
twice is specialized (the fallback branch gets its own guard and group) and the host program is
regenerated.

Autocast: the state of ``torch.autocast`` (enabled device types and their dtypes) is checked
first on every call; a call under autocast runs the specialization for its state (a
``ScriptedFunction`` of its own, made on the first call in that state, whose graph has autocast's
casts made explicit by ``passes.autocast``), so the same scripted model is right with and without
autocast, and its fusion groups compute in the dtypes eager uses under that state.
"""
from __future__ import annotations

import functools
import threading
from typing import Any, Callable, Optional

import torch
import torch.autograd.forward_ad as _forward_ad

from ..config import config
from ..ir.clone import clone_graph
from ..ir.graph import Graph, Node
from ..ir.types import TensorType
from ..ir.verify import verify
from ..log import jit_log, jit_log_graph
from ..passes import (apply_conv_layouts, batch_norm_training, dce, decompose, fill_numbers, fold_constant_ifs,
                      functionalize, insert_autocast, insert_guards, pad_gemms, partition, route_bias_gradients, plan_conv_layouts, randomize,
                      sink_views, split_biases, wrap_group)
from ..passes.attention import apply_attention, plan_attention
from ..passes.gemm_pad import returned_pads
from ..passes.row_layout import apply_row_layouts, plan_row_layouts
from ..passes.sdpa_math import apply_sdpa_math, plan_sdpa_math
from ..passes.rotary import apply_rotary, plan_rotary
from ..passes.broadcast_copy import materialize_broadcasts
from ..passes.sdpa_bias import bias_masks
from ..passes.unbind_grad import dense_unbinds
from ..passes.in_place import inherit_writes, write_running_stats_in_place
from ..passes.module_flags import flag_reader, specialize_training, training_modules
from .cuda_graphs import GraphReplayer, make_replayer
from .families import adopt, profiled_enough
from .fusion import STATS, FusionFailure, FusionSite, build_runners, make_group_runner
from .recovery import Recovering
from .selfcheck import SelfChecking
from ..ops import profiled_args
from ..ops.autocast import AutocastState, autocast_state, describe
from ..ops.axes import input_axes
from .guards import always_true, make_guard
from .hostgen import HostProgram, build_program
from .profile import ProfileRecord, pad_returns
from .source import Captured, UnsupportedError
from .weight_cache import keep_weights
from .start_up import gc_paused, warm_cuda
from .weight_casts import batch_weight_casts

_state = threading.local()


def last_executed_optimized_graph() -> Optional[Graph]:
    """The optimized graph of the most recent call that ran one (like torch.jit's)."""
    return getattr(_state, "graph", None)


class ScriptedFunction(Recovering, SelfChecking):

    """What ``graphfuser.script`` returns: callable like the original function or module.

    Example::

        >>> import torch, graphfuser
        >>> def f(x):
        ...     return (x + 1.0).relu()
        >>> sf = graphfuser.script(f)
        >>> for _ in range(3):
        ...     _ = sf(torch.rand(4, 8))
        >>> "CpuFusionGroup" in str(sf.graph_for(torch.rand(4, 8)))
        True
    """

    _replayable = True           # steady no-grad CUDA calls may replay a CUDA graph (``from_graph``)
    _known: dict = {}            # input position -> "saved" / "grad": what a backward's caller vouches for
    _oom_retry = False           # a call running again after an out-of-memory error (``_after_oom``)
    _flag_mods: list = []        # the (submodule, flag) pairs the graph reads: ``training``, bool branch
                                 # conditions (passes/module_flags.py)
    _flags: tuple = ()           # their values, as this specialization has them as constants
    _read_flags = staticmethod(tuple)   # their current values (``module_flags.flag_reader``)
    _family = None               # the backward graphs it optimizes with (``families.py``)

    def __init__(self, obj: Any, capture: Callable[[Any], Captured]) -> None:
        """``capture``: the frontend's, turning ``obj`` into a ``Captured`` (or raising
        ``UnsupportedError``, with the frontend's own runner where it has one)."""
        self._torchscript: Optional[Callable] = None
        self._lock = threading.Lock()
        self._captured: Captured = None  # type: ignore[assignment]
        self._autocast: AutocastState = None          # the autocast state this specialization is for
        self._variants: Optional[dict] = {}           # (autocast state, flags) -> its specialization (root only)
        try:
            self._captured = capture(obj)
            build_program(self._captured.graph, name="check")   # every node has a handler
        except UnsupportedError as e:
            if e.scripted is None:
                raise                   # torch.jit.script itself rejects it: so do we
            self._run_through_torchscript(obj, e.scripted, str(e))
            return
        except Exception as e:  # noqa: BLE001 - a handler that cannot emit this node
            if self._captured is None:
                raise
            self._run_through_torchscript(obj, self._captured.scripted, f"cannot execute: {e}")
            return
        self._module = self._captured.module
        self.graph: Graph = self._captured.graph
        self._flag_mods = training_modules(self.graph, self._module)
        self._read_flags = flag_reader(self._flag_mods)
        self._flags = self._read_flags()
        self._reset()

    @classmethod
    def from_graph(cls, graph: Graph, name: str, replay: bool = True,
                   known: Optional[dict[int, str]] = None) -> "ScriptedFunction":
        """A ScriptedFunction running ``graph`` (no module, inputs by position), profiled and fused
        like a scripted function: how backward graphs run. ``replay=False``: never through CUDA
        graph replay (``cuda_graphs.py``), although its calls run without grad. ``known``: input
        position -> what the caller vouches for ("saved" / "grad": ``guards.guard_source``)."""
        sf = cls.__new__(cls)
        sf._known = known or {}
        sf._replayable = replay
        sf._torchscript = None
        sf._lock = threading.Lock()
        sf._captured = Captured(graph, None, [v.name for v in graph.inputs], {}, name)
        sf._module = None
        sf.graph = graph
        sf._autocast, sf._variants = None, {}
        sf._reset()
        return sf

    def _specialized(self, flags: Optional[tuple] = None) -> "ScriptedFunction":
        """The specialization for the current autocast state and the current ``training`` flags
        of the modules the graph reads them from (``self`` where both are this one's);
        ``flags``: those flags, where the caller has read them already."""
        if self._torchscript is not None:
            return self
        state = autocast_state()
        if flags is None:
            flags = self._read_flags()
        if state is None and flags == self._flags:
            return self
        sf = self._variants.get((state, flags))
        if sf is None:
            sf = type(self).__new__(type(self))
            sf._torchscript = None
            sf._lock = threading.Lock()
            sf._captured, sf._module, sf.graph = self._captured, self._module, self.graph
            sf._autocast, sf._variants = state, None
            sf._flag_mods, sf._flags, sf._read_flags = self._flag_mods, flags, self._read_flags
            sf._replayable, sf._known = self._replayable, self._known
            sf._reset()
            training = f", {sum(flags)} of {len(flags)} module(s) training" if flags else ""
            jit_log("graph_fuser", 1, f"{self._captured.name}: new specialization for {describe(state)}{training}")
            self._variants[(state, flags)] = sf
        return sf

    def _reset(self) -> None:
        self._calls = 0
        self._work: Graph = clone_graph(self.graph)
        if self._flag_mods:
            specialize_training(self._work, self._module, self._flag_mods, self._flags)
        insert_autocast(self._work, self._autocast)
        decompose(self._work)
        if not config.is_disabled("fused_rng"):
            randomize(self._work)
        rows = getattr(self, "_row_plan", None)
        if rows:        # (first: its positions are among the graph's permutes before the attention rewrite adds any)
            apply_row_layouts(self._work, rows)
        math_sdpa = getattr(self, "_sdpa_math_plan", None)
        if math_sdpa:   # (before the attention rewrite adds SDPA calls of its own)
            apply_sdpa_math(self._work, math_sdpa)
        attention = getattr(self, "_attention_plan", None)
        if attention:
            apply_attention(self._work, attention)
        rotary = getattr(self, "_rotary_plan", None)
        if rotary:
            apply_rotary(self._work, rotary)
        plan = getattr(self, "_conv_plan", None)
        if plan:
            apply_conv_layouts(self._work, plan)
        self._record: Optional[ProfileRecord] = None
        self._profiling: Optional[HostProgram] = None
        self._plain: Optional[HostProgram] = None
        self._optimized: Optional[Graph] = None
        self._program: Optional[HostProgram] = None
        self._sites: dict[Node, FusionSite] = {}       # group or fallback node -> site
        self._runners: dict[Node, Callable] = {}
        self._pending: list[tuple] = []
        self._fast: Optional[Callable] = None           # steady state: host program, self bound
        self._replay: Optional[GraphReplayer] = None    # steady no-grad CUDA calls: CUDA graph replay
        # check_every: N, the checking host program (every group also run eagerly and compared)
        # that every N-th call runs, and the calls since the last check
        self._check_every = 0
        self._checking: Optional[HostProgram] = None
        self._checking_fast: Optional[Callable] = None
        self._check_count = 0
        self._check_flags: list = []
        self._nargs = len(self._captured.arg_names)
        # trailing arguments with defaults (timm's forward(x, attn_mask=None)): a call that
        # leaves them out still takes the fast path (and CUDA graph replay), with the defaults
        names, defaults = self._captured.arg_names, self._captured.defaults
        self._nreq = len(names)
        while self._nreq and names[self._nreq - 1] in defaults:
            self._nreq -= 1
        self._tail = tuple(defaults[n] for n in names[self._nreq:])
        self._reprofiled = False
        self._writes: Optional[bool] = None

    # -- public --------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if _forward_ad._current_level >= 0:
            return self._dual_call(args, kwargs)
        if self._variants is not None:          # the root: pick the specialization for this call
            flags = self._read_flags() if self._flag_mods else self._flags
            if flags != self._flags or torch._C._is_any_autocast_enabled():
                sf = self._specialized(flags)
                if sf is not self:
                    return sf(*args, **kwargs)
        fast = self._fast
        if fast is not None and not kwargs and self._nreq <= len(args) < self._nargs:
            args = args + self._tail[len(args) - self._nreq:]
        if fast is not None and not kwargs and len(args) == self._nargs and config.fusion_on:
            try:
                replay = self._replay
                if self._check_every and self._check_due():
                    out = self._checked_call(self._checking_fast, args)
                else:
                    out = fast(*args) if replay is None else replay(fast, args)
            except Exception as e:
                self._check_args(self._bind(args, {}))
                return self._recover(args, {}, e)
            _state.graph = self._optimized
            if self._pending:
                self._respecialize()
            return out
        if self._torchscript is not None:
            return self._torchscript(*args, **kwargs)
        user_args, user_kwargs = args, dict(kwargs)
        args = self._bind(args, kwargs)
        program = self._program
        if program is not None and config.fusion_on:
            checking = bool(self._check_every) and self._check_due()
            try:
                out = self._checked_call(self._checking.fn, args) if checking else program.fn(*args)
            except Exception as e:
                self._check_args(args)  # a non-tensor for a Tensor argument: say so, not "no .dtype"
                return self._recover(user_args, user_kwargs, e)
            _state.graph = self._optimized
            if self._pending:
                self._respecialize()
            return out
        if not config.enabled:
            if self._plain is None:
                self._plain = build_program(self.graph, name="unfused", module=self._module)
            self._check_args(args)
            return self._plain.fn(*args)
        with self._lock:
            try:
                return self._profile_call(args)
            except Exception as e:
                return self._recover(user_args, user_kwargs, e)

    def _dual_call(self, args: tuple, kwargs: dict) -> Any:
        """A call under forward-mode AD (``torch.autograd.forward_ad.dual_level``): the unfused
        program, eager's ops one by one, which carry dual tensors' tangents (a fused kernel reads
        the primal's memory and returns a plain tensor: the tangent was dropped). Neither
        profiled nor counted; ``torch.func.jvp`` goes through functorch's wrappers instead."""
        if self._torchscript is not None:
            return self._torchscript(*args, **kwargs)
        if self._plain is None:
            self._plain = build_program(self.graph, name="unfused", module=self._module)
        bound = self._bind(args, kwargs)
        self._check_args(bound)
        return self._plain.fn(*bound)

    def graph_for(self, *args: Any, **kwargs: Any) -> Graph:
        """Run once with ``args`` and return the graph that ran: optimized once profiling is done
        (None where the function runs through torch.jit.script)."""
        self(*args, **kwargs)
        sf = self._specialized() if self._variants is not None else self
        if sf._torchscript is not None:
            return None  # type: ignore[return-value]
        return sf._optimized if sf._optimized is not None else sf._work

    @property
    def code(self) -> str:
        """Source of the current host program."""
        if self._variants is not None:
            sf = self._specialized()
            if sf is not self:
                return sf.code
        if self._torchscript is not None:
            return ""
        return (self._program or self._profiling or build_program(self.graph)).source

    # -- argument binding ----------------------------------------------------------------
    def _bind(self, args: tuple, kwargs: dict) -> tuple:
        cap = self._captured
        names = cap.arg_names
        if kwargs or len(args) != len(names):
            if len(args) > len(names):
                raise TypeError(f"{cap.name}() takes {len(names)} argument(s) ({', '.join(names)}) "
                                f"but {len(args)} were given")
            full = list(args)
            for name in names[len(args):]:
                if name in kwargs:
                    full.append(kwargs.pop(name))
                elif name in cap.defaults:
                    full.append(cap.defaults[name])
                else:
                    raise TypeError(f"{cap.name}() missing required argument {name!r}")
            if kwargs:
                raise TypeError(f"{cap.name}() got unexpected keyword argument(s) {', '.join(kwargs)}")
            args = tuple(full)
        return (self._module,) + args if self._module is not None else args

    # -- profiling -----------------------------------------------------------------------
    def _profile_call(self, args: tuple) -> Any:
        if self._program is not None:
            return self._program.fn(*args)
        # the profiling calls too run without the cyclic collector: recording a type per value
        # allocates enough to trigger collections, each a walk over every object of the process
        # (GPT-2's first profiling call: 0.26 of 0.51 s in collections on a 2-core CPU machine)
        with gc_paused():
            return self._profile_call_unpaused(args)

    def _profile_call_unpaused(self, args: tuple) -> Any:
        if self._family is not None and profiled_enough(self):
            self._family.optimize(self)
            if self._program is not None:
                return self._program.fn(*args)
        if self._profiling is None:
            warm_cuda(args)
            self._record = ProfileRecord([])
            self._profiling = build_program(self._work, name="profiling", profiler=self._record_slot,
                                            scalars=profiled_args, module=self._module)
            self._record.slots = self._profiling.slots
            self._record.types = [None] * len(self._record.slots)
            self._record.seen = [False] * len(self._record.slots)
        self._check_args(args)
        out = self._profiling.fn(*args)
        if self._captured.loose_output_strides:    # the layouts the optimized program will return
            self._record.apply()
            out = pad_returns(out, returned_pads(self._work))
        STATS["profiling_calls"] += 1
        self._calls += 1
        if self._calls >= config.profiling_runs and self._family is None:
            try:
                self._optimize()
            except Exception as e:
                # this call already ran (its in-place writes are made): return its result, never
                # run it a second time; later calls go through TorchScript
                scripted = self._captured.scripted if self._captured is not None else None
                if isinstance(e, torch.jit.Error) or config.is_disabled("fallback") or scripted is None:
                    raise
                self._run_through_torchscript(self._module if self._module is not None else self._captured,
                                              scripted, f"optimizing the graph raised {type(e).__name__}: {e}")
        return out

    def _record_slot(self, slot: int, value: Any) -> None:
        self._record.record(slot, value)

    def _check_args(self, args: tuple) -> None:
        offset = 1 if self._module is not None else 0
        for v, a, name in zip(self.graph.inputs[offset:], args[offset:], self._captured.arg_names):
            if v.type.is_tensor and not isinstance(a, torch.Tensor):
                raise TypeError(f"{self._captured.name}(): argument {name!r} must be a Tensor, got {type(a).__name__}")

    # -- optimization --------------------------------------------------------------------
    def _optimize(self, build: bool = True) -> Optional[tuple[Graph, list[Node]]]:
        """Optimize the profiled graph and build its host program; ``build=False``: stop before
        the builds and return the graph and its groups (``families.py`` builds those of several
        graphs at once). None where profiling starts again (a layout plan)."""
        STATS["optimizations"] += 1
        self._record.apply()
        g = self._work
        jit_log_graph("profiling_graph_executor_impl", "Profiled Graph:", g)
        if getattr(self, "_conv_plan", None) is None:
            # the first round decides the convolutions' layout; a plan changes the graph's
            # layouts, so profiling starts again on the planned graph (passes/conv_layout.py)
            self._conv_plan = plan_conv_layouts(g) or False
            # and which attention patterns become SDPA (passes/attention.py: its result's layout
            # differs from the matmul's, so what follows is profiled again too)
            self._attention_plan = plan_attention(g, self._autocast is not None) or False
            # and which rotary embeddings lose their cat (passes/rotary.py): new nodes to profile
            self._rotary_plan = plan_rotary(g, self._captured.fixed_sizes) or False
            # and which permuted activations are made dense before rows of them are normalized
            # (passes/row_layout.py; none beside a channels-last plan, which makes its
            # convolutions' permuted results dense itself)
            self._row_plan = (not self._conv_plan and plan_row_layouts(g)) or False
            # and which SDPA calls run the math backend, written out to fuse (passes/sdpa_math.py)
            self._sdpa_math_plan = plan_sdpa_math(g) or False
            if self._conv_plan or self._attention_plan or self._rotary_plan or self._row_plan or self._sdpa_math_plan:
                self._reset()
                if not self._conv_plan:
                    # the other rewrites change no input or parameter layout: one more
                    # profiling call records the rewritten graph's types (a convolution plan
                    # changes layouts everywhere after it and profiles a full round again)
                    self._calls = max(0, config.profiling_runs - 1)
                return None
        fold_constant_ifs(g)
        fill_numbers(g)
        batch_norm_training(g)
        split_biases(g, self._module)
        route_bias_gradients(g)
        pad_gemms(g, padded_returns=self._captured.loose_output_strides)
        keep_weights(g, self._module, self._captured.static_inputs)
        batch_weight_casts(g, self._module, self._captured.static_inputs)
        functionalize(g)
        sink_views(g)
        materialize_broadcasts(g)
        bias_masks(g)
        dense_unbinds(g)
        jit_log_graph("graph_fuser", "Before Fusion:", g)
        groups = partition(g)
        write_running_stats_in_place(groups)
        insert_guards(g, groups)
        dce(g)
        verify(g)
        jit_log_graph("graph_fuser", "Before Compilation:", g)
        for group in groups:
            site = FusionSite(group, self)
            self._sites[group] = site
            self._register_fallbacks(group, site)
        if not build:
            return g, groups
        self._prebuild(groups)
        self._finish(g)
        return None

    def _finish(self, g: Graph) -> None:
        """Run ``g`` from now on: its host program (building the runners not built yet), and the
        backward graphs of its differentiable groups made a family (``families.py``)."""
        self._optimized = g
        self._rebuild()
        adopt(self)
        jit_log_graph("profiling_graph_executor_impl", "Optimized Graph:", g)

    def _prebuild(self, groups: list[Node]) -> None:
        """Build the runners of ``groups`` on threads before the host program is made (which
        would build them one after another): ``fusion.build_runners``."""
        todo = [gr for gr in groups if gr not in self._runners and gr.kind.endswith("FusionGroup")]
        for gr, runner in zip(todo, build_runners(todo) or ()):
            self._runners.setdefault(gr, runner)

    def _register_fallbacks(self, group: Node, site: FusionSite) -> None:
        ifn = group.owner.owner
        self._sites[ifn.blocks[1].nodes[-1]] = site

    def _special(self, node: Node) -> Optional[Callable]:
        kind = node.kind
        if kind.endswith("FusionGroup"):
            if node not in self._runners:
                self._runners[node] = make_group_runner(node)
            runner = self._runners[node]
            run = getattr(runner, "run", runner)      # a differentiable group: its entry function
            site = self._sites.get(node)
            return site.entry(node, run) if site is not None else run    # check_every / quarantine
        if kind.endswith("FusionGuard"):
            if not config.guard_mode:
                # the kernel holds profiled scalars as constants: those are checked regardless
                values = node.attrs.get("values")
                return make_guard(node.attrs["types"], 0, values=values, check_tensors=False) if values \
                    else always_true
            if node not in self._runners:
                group = node.owner.nodes[node.owner.nodes.index(node) + 1].blocks[0].nodes[0]
                rank = max((o.type.rank or 0) for o in group.subgraph.outputs)
                types = node.attrs["types"]
                known = None
                if self._known:
                    position = {v: i for i, v in enumerate(self._optimized.inputs)}
                    known = [self._known.get(position.get(v, -1)) for v in node.inputs[:len(types)]]
                self._runners[node] = make_guard(types, rank, input_axes(group.subgraph),
                                                 node.attrs.get("values", ()), known=known)
            return self._runners[node]
        if kind == "prim::FallbackGraph":
            site = self._sites.get(node)
            if site is None:
                from .fusion_eager import eager_runner

                return eager_runner(node.subgraph, "fallback")
            return site.fallback
        return None

    def _rebuild(self) -> None:
        self._program = build_program(self._optimized, name="forward", special=self._special,
                                      module=self._module)
        fn = self._program.fn
        self._fast = functools.partial(fn, self._module) if self._module is not None else fn
        self._build_checking()
        devices = {v.type.device.type for v in self._optimized.inputs
                   if isinstance(v.type, TensorType) and v.type.device is not None}
        if not self._replayable:
            self._replay = None
            return
        self._replay = make_replayer(self._optimized, self._module, self._captured.name,
                                     "cuda" if "cuda" in devices else None, self._captured.static_inputs)

    # -- re-specialization ---------------------------------------------------------------
    def request_respecialization(self, site: FusionSite, inputs: tuple, sig: tuple) -> None:
        self._pending.append((site, inputs, sig))

    def _respecialize(self) -> None:
        pending, self._pending = self._pending, []
        for site, inputs, sig in pending:
            sub = clone_graph(site.template)
            rec = ProfileRecord([])
            prog = build_program(sub, name="reprofile", profiler=lambda s, v: rec.record(s, v), tuple_return=True,
                                 scalars=profiled_args)
            rec.slots, rec.types, rec.seen = prog.slots, [None] * len(prog.slots), [False] * len(prog.slots)
            # on copies: the template runs some ops in place again, and its inputs are this
            # call's live tensors (a second write into an alias of an output would show)
            prog.fn(*[_same_layout_copy(i) for i in inputs])
            rec.apply()
            from ..ops import fusible
            from ..passes.group_fit import group_misfit

            functionalize(sub)   # the fallback runs some functionalized ops in place again
            members = [n for n in sub.block.nodes if n.kind not in ("prim::Constant", "prim::ListConstruct")]
            reasons = [fusible(n) for n in members]
            reasons = [r for r in reasons if r]
            if not reasons:
                # the same structural checks as the first partition (loop axes, broadcasts)
                misfit = group_misfit(members)
                reasons = [misfit] if misfit else []
            if reasons:
                jit_log("guard", 1, f"no specialization for new signature of {site.kind}: {reasons[0]}")
                site.rejected.add(sig)
                continue
            fb = next(n for n, s in self._sites.items() if s is site and n.kind == "prim::FallbackGraph"
                      and n.owner is not None)
            block = fb.owner
            group = self._optimized.create(site.kind, list(fb.inputs), [o.type for o in sub.outputs])
            group.subgraph = sub
            first = next((n for n, s in self._sites.items() if s is site and n.kind == site.kind), None)
            if first is not None:
                inherit_writes(group, first)
            block.insert_before(fb, group)
            for old, new in zip(fb.outputs, group.outputs):
                block.replace_return(old, new)
            block.remove(fb)
            del self._sites[fb]
            wrap_group(self._optimized, group, block)
            self._sites[group] = site
            self._register_fallbacks(group, site)
            site.n_specializations += 1
            STATS["respecializations"] += 1
            verify(self._optimized)
            jit_log_graph("profiling_graph_executor_impl", f"Re-specialized {site.kind}:", self._optimized)
        self._rebuild()


def _same_layout_copy(x: Any) -> Any:
    """A copy of tensor ``x`` with its sizes, strides and requires_grad (profiling reads them);
    other values as they are."""
    if not isinstance(x, torch.Tensor):
        return x
    with torch.no_grad():
        y = x.new_empty_strided(x.size(), x.stride())
        # broadcast (stride-0) dims hold one element: copy through a size-1 slice of each
        src, dst = x, y
        for d in range(x.dim()):
            if x.stride(d) == 0 and x.size(d) > 1:
                src, dst = src.narrow(d, 0, 1), dst.narrow(d, 0, 1)
        try:
            dst.copy_(src)
        except RuntimeError:      # another self-overlapping layout: profile on the tensor itself
            return x
    if not x.requires_grad:
        return y
    # a non-leaf with the same layout: the template may write into it in place, which a leaf
    # that requires grad refuses (a view of a non-leaf takes the write)
    flat = torch.empty(0, dtype=y.dtype, device=y.device).set_(y.untyped_storage())
    return flat.requires_grad_().clone().as_strided(y.size(), y.stride(), y.storage_offset())
