"""Fusion sites: what runs for a fusion group, its fallback, and re-specialization on misses.

A ``FusionSite`` is one fused region of the original graph. It owns the eager fallback program,
the miss statistics per input signature, and the compiled runner of every specialization
(group node) made for it. A signature (tensor specializations plus the values of the scalars
the group was specialized on) that misses the guards twice gets its own specialization, up to
``max_specializations``; after that the site stays on the fallback and warns once, saying why.

Self-check (``check_every: N``, off by default). The host program calls what ``FusionSite.entry``
gives for each group node: the compiled runner itself, whether the knob is on or off. With N > 0
the executor also builds a checking host program, whose groups (``FusionSite.checking_entry``)
also run their eager program (its own subgraph, through aten) and compare (``compare``), and
runs it for every N-th call of the function: every group is checked once per N calls, and the
other calls are the steady state itself (CUDA graph replay included). Eager runs first, on the
same inputs: group subgraphs are functional (the running statistics a kernel writes into its
inputs are outputs of the eager program, written by the host program's copies after the group),
so neither run sees the other's writes. A group whose result is far from both eager's and a
float64 run's is quarantined: one warning naming it, a repro (``write_repro`` plus the call's
inputs and both results), and the executor's host program is rebuilt with the group's eager
program in the kernel's place, so the steady state never calls the kernel again and checks
nothing more per call. That call returns eager's result (run under the caller's grad mode, so
autograd sees it). The knob is read when a host program is built; ``refresh_checks`` rebuilds the
live ones (``graphfuser.set_check_every``).
"""
from __future__ import annotations

import math
import os
import weakref
from typing import Any, Callable, Optional

import torch

from ..config import config
from ..ir.graph import Node
from ..ir.types import TensorType
from ..log import jit_log, warn
from .fusion_eager import eager_runner


# Events a steady-state call never has (tests and tools/prof_zoo_train.py count them): calls that ran
# the profiling program, graphs optimized, fusion groups re-specialized, guard misses (fallbacks),
# self-checks run and sites quarantined (``check_every``).
STATS = {"profiling_calls": 0, "optimizations": 0, "respecializations": 0, "fallbacks": 0,
         "checks": 0, "quarantined": 0}


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
        self.quarantined = False
        self.suspect = False      # its last quick check disagreed: the next check is in full
        self._eager: dict[Node, Callable[..., tuple]] = {}   # group node -> its eager program
        _EXECUTORS.add(executor)

    def signature(self, inputs: tuple) -> tuple:
        return tuple(TensorType.of(inputs[i]).specialization() if isinstance(inputs[i], torch.Tensor) else None
                     for i in self.tensor_positions) + tuple(_hashable(inputs[i]) for i in self.value_positions)

    def fallback(self, *inputs: Any) -> tuple:
        out = self.fallback_fn(*inputs)
        STATS["fallbacks"] += 1
        if self.exhausted or self.quarantined or not config.guard_mode:
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


    # -- self-check ----------------------------------------------------------------------
    def entry(self, group: Node, run: Callable[..., tuple]) -> Callable[..., tuple]:
        """What the steady host program calls for ``group`` (whose compiled runner is ``run``):
        ``run`` itself, or the group's eager program once the site is quarantined."""
        return self.eager_of(group) if self.quarantined else run

    def checking_entry(self, group: Node, run: Callable[..., tuple]) -> Callable[..., tuple]:
        """What the checking host program (``check_every``: every N-th call of the function)
        calls for ``group``: ``run`` and the group's eager program, compared (``check``)."""
        if self.quarantined:
            return self.eager_of(group)
        flags = getattr(self.executor, "_check_flags", None)

        def checked(*inputs: Any) -> tuple:
            if self.suspect or flags is None:
                return self.check(group, run, inputs)
            return self.quick_check(group, run, inputs, flags)

        checked.checks = run     # what it wraps (tests, tools)
        return checked

    def eager_of(self, group: Node) -> Callable[..., tuple]:
        fn = self._eager.get(group)
        if fn is None:
            fn = self._eager[group] = eager_runner(group.subgraph, "checked_group")
        return fn

    def quick_check(self, group: Node, run: Callable[..., tuple], inputs: tuple, flags: list) -> tuple:
        """Run ``group`` fused and eagerly on ``inputs`` and return eager's result; whether the
        two agree (``close_flag``: a device tensor, no host sync) joins ``flags``, which the
        executor reads once at the end of the call. A site whose flag is false is suspect: the
        next call checks it in full (``check``: the float64 run, the quarantine)."""
        STATS["checks"] += 1
        try:
            want = self.eager_of(group)(*inputs)
        except Exception as e:  # noqa: BLE001 - eager raises too: no verdict, the kernel's result stands
            jit_log("executor", 1, f"check of {self.kind}: the eager program raised {type(e).__name__}: {e}")
            return run(*inputs)
        got = run(*inputs)
        try:
            flags.append((self, close_flag(tuple(got), tuple(want))))
        except Exception as e:  # noqa: BLE001 - a check never fails a call
            jit_log("executor", 1, f"check of {self.kind}: the comparison raised {type(e).__name__}: {e}")
        return want

    def check(self, group: Node, run: Callable[..., tuple], inputs: tuple) -> tuple:
        """Run ``group`` fused and eagerly on ``inputs``; quarantine the site on a disagreement."""
        STATS["checks"] += 1
        eager = self.eager_of(group)
        try:
            want = eager(*inputs)
        except Exception as e:  # noqa: BLE001 - eager raises too: no verdict, the kernel's result stands
            jit_log("executor", 1, f"check of {self.kind}: the eager program raised {type(e).__name__}: {e}")
            return run(*inputs)
        got = run(*inputs)
        try:
            verdict = compare(got, want, inputs, lambda: _run_float64(eager, inputs))
        except Exception as e:  # noqa: BLE001 - a check never fails a call
            jit_log("executor", 1, f"check of {self.kind}: the comparison raised {type(e).__name__}: {e}")
            return got
        if verdict is not None and not self.quarantined:
            self.quarantine(group, run, inputs, got, want, verdict)
        self.suspect = False
        return want if verdict is not None else got

    def quarantine(self, group: Node, run: Callable, inputs: tuple, got: tuple, want: tuple, why: str) -> None:
        """From now on ``group`` (every specialization of this site) runs its eager program."""
        from .compiled import write_repro

        self.quarantined = True
        STATS["quarantined"] += 1
        cg = getattr(run, "compiled", None) or getattr(getattr(run, "forward", None), "compiled", None)
        name = getattr(cg, "name", None) or f"{self.kind.split('::')[-1]}_{group.attrs.get('cache_id', 0)}"
        where = getattr(getattr(self.executor, "_captured", None), "name", None)
        title = f"{self.kind}[cache_id={group.attrs.get('cache_id')}] ({name})" + (f" of {where}" if where else "")
        error = GroupDisagreement(f"{title} disagrees with its eager program: {why}")
        try:
            path = write_repro(name, group.subgraph, getattr(cg, "source", ""), error)
            if _nbytes(inputs) + _nbytes(got) + _nbytes(want) <= _REPRO_VALUE_BYTES:
                torch.save({"inputs": _detached(inputs), "fused": _detached(got), "eager": _detached(want)},
                           path[:-4] + ".inputs.pt")
        except Exception as e:  # noqa: BLE001 - a repro must not turn a quarantine into a crash
            path = f"(not written: {type(e).__name__}: {e})"
        msg = f"graphfuser: {error}. Quarantined: it runs its eager program from now on. Repro written to {path}"
        if config.is_disabled("fallback"):
            raise FusionFailure(msg) from error
        warn(msg)
        rebuild = getattr(self.executor, "_rebuild", None)
        if rebuild is not None and getattr(self.executor, "_optimized", None) is not None:
            rebuild()          # the steady host program calls the eager program, not the kernel


class GroupDisagreement(RuntimeError):
    """A fused group's result was far from both eager's and a float64 run's (``check_every``)."""


# scripted functions with fusion sites: ``refresh_checks`` rebuilds their host programs
_EXECUTORS: "weakref.WeakSet[Any]" = weakref.WeakSet()


def live_fusion_groups() -> int:
    """Fusion groups of every live optimized scripted function: each Dynamo graph the backend
    compiled and each backward graph, not only the last one run (``last_executed_optimized_graph``)."""
    return sum(len(set(getattr(ex, "_sites", {}).values())) for ex in list(_EXECUTORS)
               if getattr(ex, "_optimized", None) is not None)


def refresh_checks() -> int:
    """Rebuild the host program of every live optimized scripted function, so a changed
    ``check_every`` applies to them; returns how many were rebuilt."""
    n = 0
    for ex in list(_EXECUTORS):
        if getattr(ex, "_optimized", None) is not None and getattr(ex, "_torchscript", None) is None:
            ex._rebuild()
            n += 1
    return n


# -- comparison ------------------------------------------------------------------------------
# Relative tolerances by output dtype: |fused - reference| <= rtol * (|reference| + S), with S
# the largest finite |reference| of the output (reductions and cancellations are judged against
# the output's scale). Generous: a group is condemned only when it is also far from the float64
# run, and a false alarm costs speed, never an answer.
RTOL = {torch.float64: 1e-6, torch.float32: 1e-3, torch.float16: 1e-2, torch.bfloat16: 4e-2}


def compare(got: tuple, want: tuple, inputs: tuple, float64: Callable[[], Optional[tuple]]) -> Optional[str]:
    """None where the fused outputs ``got`` agree with eager's ``want`` (or with the float64
    run that ``float64()`` makes on demand), else what disagrees. Floating outputs: within
    ``RTOL`` where both are finite, NaN where the reference is NaN, the same infinities;
    integers and bools: exact. An element that agrees with neither is a disagreement, except
    a NaN / inf / integer difference on a call with non-finite or huge inputs or a reference at
    the edge of overflow (ill-conditioned: fp32 intermediates, summation order and casts of
    NaN to integers legitimately differ there)."""
    got, want = tuple(got), tuple(want)
    if len(got) != len(want):
        return f"{len(got)} outputs where eager has {len(want)}"
    bad = [j for j, (g, w) in enumerate(zip(got, want)) if not _close(g, w)]
    if not bad:
        return None
    ref64 = float64()
    ill = _ill_conditioned(inputs)
    for j in bad:
        g, w = got[j], want[j]
        if not isinstance(g, torch.Tensor) or not isinstance(w, torch.Tensor):
            return f"output {j}: {g!r} where eager gives {w!r}"
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"output {j}: {g.dtype} {tuple(g.shape)} where eager gives {w.dtype} {tuple(w.shape)}"
        r64 = ref64[j] if ref64 is not None and j < len(ref64) and isinstance(ref64[j], torch.Tensor) \
            and ref64[j].shape == w.shape else None
        why = _disagreement(g.detach(), w.detach(), None if r64 is None else r64.detach(), ill)
        if why is not None:
            return f"output {j} ({g.dtype}, {tuple(g.shape)}): {why}"
    return None


def close_flag(got: tuple, want: tuple) -> Any:
    """``compare``'s cheap first test without a host sync: True / False, or a device bool
    tensor (False wherever a NaN or inf decides: the full check judges those)."""
    if len(got) != len(want):
        return False
    parts = []
    for g, w in zip(got, want):
        if not isinstance(g, torch.Tensor) or not isinstance(w, torch.Tensor):
            if not _close(g, w):
                return False
            continue
        if g.shape != w.shape or g.dtype != w.dtype:
            return False
        g, w = g.detach(), w.detach()
        if g.dtype.is_complex or g.numel() == 0:
            continue
        if not g.dtype.is_floating_point:
            parts.append((g == w).all())
            continue
        parts.append((g - w).abs_().amax() <= RTOL.get(g.dtype, 1e-3) * w.abs().amax())
    if not parts:
        return True
    return parts[0] if len(parts) == 1 else torch.stack([p.to(parts[0].device) for p in parts]).all()


def settle(flags: list) -> list:
    """The sites whose flags (``quick_check``) are false, with one host sync per device."""
    bad, pending = [], {}
    for site, flag in flags:
        if isinstance(flag, torch.Tensor):
            pending.setdefault(flag.device, []).append((site, flag))
        elif not flag:
            bad.append(site)
    for items in pending.values():
        values = torch.stack([f for _, f in items]).tolist()
        bad += [site for (site, _), ok in zip(items, values) if not ok]
    flags.clear()
    return bad


def _close(g: Any, w: Any) -> bool:
    """The cheap first test: exactly equal, or within tolerance everywhere (no float64 run)."""
    if not isinstance(g, torch.Tensor) or not isinstance(w, torch.Tensor):
        return type(g) is type(w) and (g == w or (isinstance(g, float) and math.isnan(g) and math.isnan(w)))
    if g.shape != w.shape or g.dtype != w.dtype:
        return False
    g, w = g.detach(), w.detach()
    if not (g.dtype.is_floating_point or g.dtype.is_complex):
        return torch.equal(g, w)
    if g.dtype.is_complex or g.numel() == 0:
        return True
    # three passes, one host sync: max |g - w| within RTOL of max |w| is sufficient for ``_agrees``
    # everywhere; a NaN or inf anywhere makes the test False, and the element rules decide.
    # (abs + amax: a tenth of the CPU time of vector_norm's inf norm)
    diff = (g - w).abs_().amax()
    return bool(diff <= RTOL.get(g.dtype, 1e-3) * w.abs().amax())


def _agrees(g: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Per element: ``g`` agrees with the reference ``ref`` (see ``compare``)."""
    rtol = RTOL.get(g.dtype, 1e-3)
    a, b = g.double(), ref.double()
    finite = torch.isfinite(a) & torch.isfinite(b)
    fb = b.abs().masked_fill(~torch.isfinite(b), 0)
    scale = fb.max() if fb.numel() else fb.new_zeros(())
    near = (a - b).abs() <= rtol * (fb + scale) + torch.finfo(g.dtype).tiny
    same = (torch.isnan(a) & torch.isnan(b)) | (a == b)
    return torch.where(finite, near, same)


def _disagreement(g: torch.Tensor, w: torch.Tensor, r64: Optional[torch.Tensor], ill: bool) -> Optional[str]:
    floating = g.dtype.is_floating_point
    ok = _agrees(g, w) if floating else g == w
    if r64 is not None:
        ok |= _agrees(g, r64.to(g.dtype)) if floating else g == r64.to(g.dtype)
        if floating:      # the float64 value itself (no rounding to g's dtype first)
            ok |= _agrees(g.double(), r64.double()) & torch.isfinite(r64.double())
    if ok.all():
        return None
    excused = torch.zeros_like(ok)
    if floating:
        nonfinite = ~torch.isfinite(g) | ~torch.isfinite(w)
        finfo = torch.finfo(g.dtype)
        edge = (w.double().abs().masked_fill(~torch.isfinite(w.double()), 0) >= finfo.max / 4)
        if r64 is not None:
            edge |= r64.double().abs() >= finfo.max / 4
        excused = nonfinite & (edge | ill)
        if r64 is None and g.dtype in (torch.float16, torch.bfloat16):
            excused |= nonfinite      # fp16 intermediates overflow in eager where fp32 ones do not
    elif ill:
        excused = ~ok
    wrong = ~ok & ~excused
    if not wrong.any():
        return None
    i = int(wrong.flatten().nonzero()[0])
    n = int(wrong.sum())
    extra = "" if r64 is None else f", float64 {r64.flatten()[i].item()}"
    return (f"{n} of {g.numel()} element(s) differ; first at flat index {i}: fused {g.flatten()[i].item()}, "
            f"eager {w.flatten()[i].item()}{extra}")


def _ill_conditioned(inputs: tuple) -> bool:
    """A floating input with a non-finite value or a magnitude above the square root of its
    dtype's largest value (where squares, sums and fp32 intermediates overflow differently)."""
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.dtype.is_floating_point and x.numel():
            x = x.detach()
            if not bool(torch.isfinite(x).all()):
                return True
            if float(x.abs().max()) > math.sqrt(torch.finfo(x.dtype).max):
                return True
        elif isinstance(x, float) and (not math.isfinite(x) or abs(x) > 1e150):
            return True
    return False


def _run_float64(eager: Callable[..., tuple], inputs: tuple) -> Optional[tuple]:
    """The group's eager program with its floating inputs in float64 (None where it cannot run)."""
    up = tuple(x.detach().double() if isinstance(x, torch.Tensor) and x.dtype.is_floating_point else x
               for x in inputs)
    try:
        with torch.no_grad():
            return tuple(eager(*up))
    except Exception:  # noqa: BLE001 - a dtype-specific op: no second opinion
        return None


def _detached(values: Any) -> Any:
    return tuple(v.detach().cpu() if isinstance(v, torch.Tensor) else v for v in values)


# the call's inputs and both results are saved with a repro up to this size (a model's
# activations can be large; the repro's text and script are written regardless)
_REPRO_VALUE_BYTES = 256 << 20


def _nbytes(values: tuple) -> int:
    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))


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


def compile_threads(groups: Optional[int] = None) -> int:
    """How many threads build ``groups`` runners at once (None: a number not known yet; the
    ``compile_threads`` knob; 1 while a dump is on, so that dumps come out in the graph's order)."""
    if groups is None:
        groups = 1 << 30
    if groups < 2 or config.as_dict()["dump"]:
        return 1
    n = int(config.compile_threads) or min(16, os.cpu_count() or 1)
    return max(1, min(n, groups))


def build_runners(groups: list[Node]) -> Optional[list[Callable]]:
    """The runners of ``groups``, built on ``compile_threads`` threads (None where that is fewer
    than two: the host program then builds each as it comes to it). NVRTC and the C++ compiler
    release the GIL, so forty kernels cost about the slowest few instead of their sum. A compile
    failure raises here as it would from the host program's build (fallback disabled)."""
    with BuildStream(len(groups)) as stream:
        stream.add(groups)
        return stream.finish()


class BuildStream:
    """Runners built on the compile threads while the caller goes on: ``add`` starts the builds
    of one graph's groups, one group of each kernel not seen before (reductions first,
    ``build_order``), and returns; ``finish`` starts the groups whose kernel an earlier one
    builds (they wait for it, and take it from the memory cache), waits, and returns every
    runner in the order the groups were added (None where fewer than two threads would build
    them: the host programs build each as they come to it).

    A family of backward graphs (``families.py``) adds each member's groups as soon as its
    passes are done: their NVRTC runs overlap the next members' passes, where before they waited
    for the last member's (a ViT training step: 37 members, 0.4 s of passes one after another
    on an H200 host, then 0.6 s of builds)."""

    def __init__(self, expected: Optional[int] = None) -> None:
        self.threads = compile_threads(expected)
        self._pool: Any = None
        self._futures: list = []        # per group added: its build's future (None until it starts)
        self._groups: list[Node] = []
        self._keys: set = set()
        self._later: list[int] = []
        self._device = torch.cuda.current_device() \
            if torch.cuda.is_available() and torch.cuda.is_initialized() else None

    def __enter__(self) -> "BuildStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=exc[0] is not None)
            from ..autodiff.function import settle_calling_thread

            settle_calling_thread()     # per-thread autograd settings a compile thread could not make here

    def _build(self, group: Node) -> Callable:
        if self._device is not None:
            # the calling thread's current CUDA device, which a new thread does not inherit
            torch.cuda.set_device(self._device)
        return make_group_runner(group)

    def add(self, groups: list[Node]) -> None:
        if self.threads < 2 or not groups:
            self._groups += groups
            return
        if self._pool is None:
            import concurrent.futures as cf

            from ..autodiff.function import COMPILE_THREAD_PREFIX

            self._pool = cf.ThreadPoolExecutor(self.threads, thread_name_prefix=COMPILE_THREAD_PREFIX)
        base = len(self._groups)
        self._groups += groups
        self._futures += [None] * len(groups)
        first, later = _first_of_each_kernel(groups, self._keys)
        for i in first:
            self._futures[base + i] = self._pool.submit(self._build, groups[i])
        self._later += [base + i for i in later]

    def finish(self) -> Optional[list[Callable]]:
        if self._pool is None:
            return None
        for i in self._later:
            self._futures[i] = self._pool.submit(self._build, self._groups[i])
        return [f.result() for f in self._futures]


def build_order(groups: list[Node]) -> list[int]:
    """The indices of ``groups`` in the order their builds start: one group of each kernel first,
    reductions (a render, then NVRTC, the longest builds) before pointwise groups, then the
    groups whose kernel another one builds (they wait for it and take it from the memory cache).

    In the graph's order, a ViT's twelve copies of each layer norm took the pool's threads to
    wait for the first copy's build, and a fourth distinct reduction started its build only when
    they were done: 0.9 s later, the last 0.6 s of a 1.6 s prebuild (H200 host)."""
    first, later = _first_of_each_kernel(groups, set())
    return first + later


def _first_of_each_kernel(groups: list[Node], seen: set) -> tuple[list[int], list[int]]:
    """(indices of the groups whose kernel key is not in ``seen``, one per key, reductions
    first; the indices of the others), adding the new keys to ``seen``."""
    from ..ops.axes import needs_axes
    from .compiled import canonical_key

    first: list[tuple[int, int]] = []
    rest: list[int] = []
    for i, group in enumerate(groups):
        sub = group.subgraph
        try:
            key = canonical_key(sub, "cuda" if group.kind == "prim::CudaFusionGroup" else "cpu")
        except Exception:  # noqa: BLE001 - an order is a heuristic: a group without a key goes first
            key = ("unkeyed", id(group))
        if key in seen:
            rest.append(i)
            continue
        seen.add(key)
        first.append((0 if needs_axes(sub.block.nodes) else 1, i))
    return [i for _, i in sorted(first)], rest


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
        from .families import join

        def script(graph: Any, name: str, known: Optional[dict[int, str]] = None, like: Any = None) -> Any:
            sf = ScriptedFunction.from_graph(graph, name, replay=False, known=known)
            if like is not None:
                join(sf, like)
            return sf

        _RUNNERS.append(GraphRunners(script, lambda sub: eager_runner(sub, "differentiable_fallback")))
    return _RUNNERS[0]
