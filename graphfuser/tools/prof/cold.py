"""Cold start by phase: where the seconds of a race row's first calls through graphfuser go.

    python -m graphfuser prof cold --device cuda --rows gpt2:train-bf16,llama:infer-bf16

Each row runs in a process of its own with an empty kernel cache. Eager runs the row twice first
(CUDA, cuBLAS and cuDNN initialized, as in the race, where eager goes first); then
``torch.compile(model, backend="graphfuser")`` wraps the model and the race's window of calls
runs, synchronized. Printed per row: the cold seconds (to the end of the first steady call, as
the race counts them: ``race.cold_seconds``), when each call ended, what each call did (the
changes of graphfuser's counters: profiling calls, optimizations, kernel builds, NVRTC compiles,
CUDA graph captures), and the seconds of each phase on the
calling thread (the build threads' own time is not counted; ``profiling calls`` holds
``optimize``, which holds ``prebuild``), the calling thread's NVRTC runs, Python's cyclic
collections (any thread), and last Dynamo alone (``backend="eager"``, compiled afterwards in the
same process: what a backend cannot shorten). ``--dynamo-first`` runs Dynamo alone before
graphfuser instead (as Inductor goes before it in the race); ``--timeline`` prints the build steps
of every thread (renders, NVRTC runs, module loads) in order; ``--cprofile DIR`` writes a cProfile
of the cold window. Never asserts.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import gc
import os
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Optional

import torch

# phase -> (module, class or None, attribute)
PHASES = {
    "profiling calls": ("graphfuser.executor.executor", "ScriptedFunction", "_profile_call"),
    "optimize": ("graphfuser.executor.executor", "ScriptedFunction", "_optimize"),
    "prebuild": ("graphfuser.executor.executor", "ScriptedFunction", "_prebuild"),
    "host programs": ("graphfuser.executor.executor", "ScriptedFunction", "_rebuild"),
    "FX capture": ("graphfuser.frontend.dynamo", None, "capture"),
    "NVRTC (calling thread)": ("graphfuser.runtime.nvrtc", None, "_run_nvrtc"),
}


# build steps on every thread, for ``--timeline``: (module, class or None, attribute) -> label
STEPS = {
    ("graphfuser.frontend.dynamo", None, "capture"): "FX capture",
    ("graphfuser.executor.executor", "ScriptedFunction", "_optimize"): "optimize",
    ("graphfuser.executor.executor", "ScriptedFunction", "_prebuild"): "prebuild",
    ("graphfuser.executor.executor", None, "partition"): "partition",
    ("graphfuser.executor.fusion", None, "make_group_runner"): "group",
    ("graphfuser.executor.compiled_reduction", "ReductionGroup", "__init__"): "reduction render",
    ("graphfuser.executor.compiled_reduction", None, "_compile_expected_variant"): "forecast",
    ("graphfuser.runtime.nvrtc", None, "_run_nvrtc"): "NVRTC",
    ("graphfuser.runtime.cuda_driver", "CudaKernel", "__init__"): "module load",
    ("graphfuser.runtime.warm_up", None, "warm"): "warm-up",
}


def _patch(targets: Any, wrap: Callable[[str, Callable], Callable]) -> list[Callable[[], None]]:
    """Replace each ``(label, module, class or None, attribute)`` of ``targets`` by ``wrap(label,
    function)``; returns what puts the originals back (a missing attribute is skipped)."""
    import importlib

    undo = []
    for label, mod, cls, attr in targets:
        owner = importlib.import_module(mod)
        owner = getattr(owner, cls) if cls else owner
        fn = getattr(owner, attr, None)
        if fn is None:
            continue
        setattr(owner, attr, wrap(label, fn))
        undo.append(functools.partial(setattr, owner, attr, fn))
    return undo


class Timeline:
    """Start and length of each build step of ``STEPS`` on any thread, while installed: what runs
    at once during an optimization (the compile pool) and what waits for what."""

    def __init__(self) -> None:
        self.events: list[tuple[float, float, str, str, str]] = []
        self.t0 = time.perf_counter()
        self._undo: list[Callable[[], None]] = []

    def _wrap(self, label: str, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                what = args[1] if label == "NVRTC" and len(args) > 1 else ""
                self.events.append((t - self.t0, time.perf_counter() - t, threading.current_thread().name,
                                    label, str(what)))
        return timed

    def __enter__(self) -> "Timeline":
        self._undo += _patch(((label, *where) for where, label in STEPS.items()), self._wrap)
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        for undo in reversed(self._undo):
            undo()

    def lines(self, shortest: float = 0.02) -> list[str]:
        """Steps of ``shortest`` seconds or more (and every optimization), in order of start."""
        keep = [e for e in sorted(self.events) if e[1] >= shortest or e[3] in ("optimize", "prebuild")]
        return [f"   {t:7.3f} s +{d:6.3f} {th[-12:]:>12} {label:16s} {what}" for t, d, th, label, what in keep]


class PhaseClock:
    """Seconds and calls per phase while installed: the functions of ``PHASES`` wrapped (calls on
    the calling thread only), and a ``gc.callbacks`` entry for the cyclic collector."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.calls: collections.Counter = collections.Counter()
        self._undo: list[Callable[[], None]] = []
        self._gc_start = 0.0

    def _wrap(self, label: str, fn: Callable) -> Callable:
        main = threading.main_thread()

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if threading.current_thread() is not main:
                return fn(*args, **kwargs)
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[label] += time.perf_counter() - t0
                self.calls[label] += 1
        return timed

    def _collector(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter()
        else:
            self.seconds["cyclic GC"] += time.perf_counter() - self._gc_start
            self.calls["cyclic GC"] += 1

    def __enter__(self) -> "PhaseClock":
        self._undo += _patch(((label, *where) for label, where in PHASES.items()), self._wrap)
        gc.callbacks.append(self._collector)
        return self

    def __exit__(self, *exc: Any) -> None:
        gc.callbacks.remove(self._collector)
        for undo in reversed(self._undo):
            undo()

    def line(self) -> str:
        order = sorted(self.seconds, key=lambda k: -self.seconds[k])
        return ", ".join(f"{k} {self.seconds[k]:.2f} s ({self.calls[k]})" for k in order)


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def counters() -> dict[str, float]:
    """graphfuser's counters (executor, kernel builds, NVRTC and its disk cache, CUDA graphs) by
    name: what a call did is the difference of two snapshots."""
    from ...executor import compiled, cuda_graphs, fusion
    from ...runtime import cache

    out = {}
    for prefix, stats in (("executor", fusion.STATS), ("builds", compiled.STATS), ("nvrtc", cache.STATS),
                          ("graphs", cuda_graphs.STATS)):
        out.update({f"{prefix}.{k}": v for k, v in stats.items() if isinstance(v, (int, float))})
    return out


def cold_calls(make_step: Callable[[], Callable[[], Any]], device: str, calls: Optional[int] = None,
               did: Optional[list] = None) -> tuple[float, list[float]]:
    """(seconds to the end of the first steady call of the step ``make_step()`` returns, as the
    race counts them, and each call's end; ``calls``: the window, the race's by default).
    ``did`` receives each call's changes of ``counters()``."""
    from ..race import COLD_WINDOW, cold_seconds

    _sync(device)
    t0 = time.perf_counter()
    step = make_step()
    wrap = time.perf_counter() - t0
    ends = []
    before = counters()
    for _ in range(calls or COLD_WINDOW):
        step()
        _sync(device)
        ends.append(time.perf_counter() - t0)
        if did is not None:
            now = counters()
            did.append({k: round(v - before.get(k, 0), 3) for k, v in now.items() if v != before.get(k, 0)})
            before = now
    each = [b - a for a, b in zip([wrap] + ends[:-1], ends)]
    return cold_seconds(wrap, each)[0], ends


def profile_row(name: str, mode: str, device: str, dynamo_first: bool = False,
                cprofile: Optional[str] = None, show_timeline: bool = False) -> None:
    """One row's cold start by call and phase. ``dynamo_first``: Dynamo alone runs before
    graphfuser (as Inductor does in the race, so Dynamo's own first-use costs fall before it);
    ``cprofile``: a directory that gets the calling thread's cProfile of graphfuser's cold window
    (``<row>.pstats`` and the top functions by cumulative time, ``<row>.txt``); ``show_timeline``:
    print the build steps on every thread (``Timeline``)."""
    import torch._dynamo

    from ...frontend.dynamo import registered_backend
    from ..race import build, inputs, step_fn

    torch.manual_seed(0)
    model = build(name, device)
    model.train(mode.startswith("train"))
    x, y = inputs(name, mode, device, None)
    for _ in range(2):
        step_fn(name, mode, model, model, x, y, device)()
    def dynamo_alone() -> float:
        torch._dynamo.reset()
        return cold_calls(lambda: step_fn(name, mode, model, torch.compile(model, backend="eager"), x, y, device),
                          device)[0]

    dynamo = dynamo_alone() if dynamo_first else 0.0
    torch._dynamo.reset()
    did: list = []
    prof = None
    if cprofile:
        import cProfile

        prof = cProfile.Profile()
    timeline = Timeline() if show_timeline else contextlib.nullcontext()
    with PhaseClock() as clock, timeline:
        if prof is not None:
            prof.enable()
        cold, ends = cold_calls(lambda: step_fn(name, mode, model, torch.compile(model, backend=registered_backend()),
                                                x, y, device), device, did=did)
        if prof is not None:
            prof.disable()
    if not dynamo_first:
        dynamo = dynamo_alone()
    if prof is not None:
        _write_profile(prof, cprofile, f"{name}-{mode}")
    print(f"== {name} {mode}: cold {cold:.2f} s, calls end at {', '.join(f'{e:.2f}' for e in ends)}")
    for i, (start, end, changes) in enumerate(zip([0.0] + ends[:-1], ends, did)):
        print(f"   call {i + 1}: {end - start:.3f} s " + ", ".join(f"{k} +{v:g}" for k, v in changes.items()))
    print(f"   {clock.line()}")
    print(f"   Dynamo alone (backend='eager', compiled {'first' if dynamo_first else 'second'}): {dynamo:.2f} s")
    if show_timeline:
        print("   build steps (seconds from the wrap, length, thread, step):")
        print("\n".join(timeline.lines()))


def _write_profile(prof: Any, directory: str, stem: str) -> None:
    import io
    import pstats

    os.makedirs(directory, exist_ok=True)
    prof.dump_stats(os.path.join(directory, f"{stem}.pstats"))
    text = io.StringIO()
    stats = pstats.Stats(prof, stream=text).sort_stats("cumulative")
    stats.print_stats(120)
    stats.sort_stats("tottime").print_stats(60)
    with open(os.path.join(directory, f"{stem}.txt"), "w") as f:
        f.write(text.getvalue())


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--rows", default="gpt2:train-bf16,llama:infer-bf16")
    p.add_argument("--in-process", action="store_true", help="run the rows here (default: a process per row)")
    p.add_argument("--dynamo-first", action="store_true",
                   help="run Dynamo alone before graphfuser, as Inductor goes first in the race")
    p.add_argument("--cprofile", metavar="DIR", help="write a cProfile of each row's cold window here")
    p.add_argument("--timeline", action="store_true", help="print the build steps of every thread in order")
    a = p.parse_args(argv)
    rows = a.rows.split(",")
    if a.in_process or len(rows) == 1:
        os.environ.setdefault("GRAPHFUSER_CACHE_DIR", tempfile.mkdtemp(prefix="graphfuser-cold-"))
        for row in rows:
            name, mode = row.split(":")
            profile_row(name, mode, a.device, a.dynamo_first, a.cprofile, a.timeline)
        return 0
    extra = (["--dynamo-first"] if a.dynamo_first else []) + (["--cprofile", a.cprofile] if a.cprofile else []) \
        + (["--timeline"] if a.timeline else [])
    for row in rows:
        env = dict(os.environ, GRAPHFUSER_CACHE_DIR=tempfile.mkdtemp(prefix="graphfuser-cold-"))
        subprocess.run([sys.executable, "-m", "graphfuser", "prof", "cold", "--device", a.device, "--rows", row]
                       + extra, env=env, check=False)
    return 0
