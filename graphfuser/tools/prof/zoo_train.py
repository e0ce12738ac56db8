"""Host time of a training step, eager vs graphfuser: where graphfuser's step spends its time.

    python -m graphfuser prof zoo-train --device cuda --models resnet50,timm:convnext_tiny --top 30
    python -m graphfuser prof zoo-train --device cpu --slim      # narrow models, 32 px: kernels cost little

Per model and backend, after ``--warmup`` steps: wall ms per step (synchronized each step), host
ms per step (the step enqueued without a synchronization: zero_grad, forward under autocast, loss,
backward, SGD step; then one synchronize outside the timing), and for graphfuser what happened
after warm-up that should not (profiling calls, compiles, re-specializations, guard misses: the
executor's ``STATS``), a cProfile of a few steps (``--top`` rows by own time) and, on CUDA, the
host-device synchronizations a step makes (``torch.cuda.set_sync_debug_mode``). ``--kernels N``
adds, for both backends on CUDA, the device time per step under ``torch.profiler`` and its ``N``
slowest kernels (graphfuser's own kernels summed apart).

``--host`` compares the host time of a step where kernels cost little (CPU: one thread, the
narrow ``--slim`` models at 32 px, batch 2, denormals flushed, since the C++ kernels' scalar
loops pay for every denormal that eager's vector kernels pay for once per vector): eager and
graphfuser steps alternate over ``--rounds`` rounds, and per backend it prints wall ms per step
(the median of the rounds' medians, and the fastest step), the calling thread's CPU time per step
(median: on a shared machine it leaves out the time the thread waited for a core), function calls
and Python frames per step under cProfile, and for graphfuser its autograd groups per step::

    python -m graphfuser prof zoo-train --host --amp none            # CPU, fp32
    python -m graphfuser prof zoo-train --host --device cuda --models timm:convnext_tiny --batch 64
"""
from __future__ import annotations

import argparse
import copy
import cProfile
import os
import pstats
import statistics
import time
import warnings
from typing import Optional

import torch
import torch.nn.functional as F

import graphfuser

from ..zoo_train import _amp, _build
from .common import cprofile_text, kernel_us_per_step, sync as _sync

# narrow versions of the zoo's training models (--slim): the same graph structure, tiny kernels
SLIM = {"timm:resnet50": dict(channels=(8, 16, 32, 64), stem_width=8, num_classes=10),
        "timm:vit_small_patch16_224": dict(embed_dim=48, num_heads=6, num_classes=10),
        "timm:convnext_tiny": dict(dims=(8, 16, 32, 64), num_classes=10)}


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m graphfuser prof zoo-train", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--models", default=None)
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--image-size", type=int, default=None)
    p.add_argument("--amp", default="bf16")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=6)
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--profile-eager", action="store_true", help="cProfile eager's steps too")
    p.add_argument("--kernels", type=int, default=0, help="on CUDA: the N slowest kernels per step")
    p.add_argument("--slim", action="store_true", help="narrow timm models (SLIM), 32 px, batch 2")
    p.add_argument("--host", action="store_true", help="host time per step, eager and graphfuser alternating "
                   "(CPU: --slim, one thread, denormals flushed)")
    p.add_argument("--rounds", type=int, default=5, help="--host: rounds of --steps steps per backend")
    a = p.parse_args(argv)
    dev = a.device
    if a.host:
        if dev == "cpu":
            a.slim = True
            torch.set_num_threads(1)
            torch.set_flush_denormal(True)
        return host_table(a)
    batch = a.batch or (2 if a.slim else 32)
    size = a.image_size or (32 if a.slim else None)
    from graphfuser.autodiff import STATS as AUTODIFF
    from graphfuser.executor.compiled import STATS as BUILDS
    from graphfuser.executor.executor import STATS as EXEC

    def counts() -> dict:
        return {**EXEC, "kernel_builds": BUILDS["builds"], **{f"autodiff_{k}": v for k, v in AUTODIFF.items()}}

    for name in _models(a):
        model, x, y = _model_data(a, name, batch, size)
        for mode in ("eager", "graphfuser"):
            fn, opt = _backend(model, mode)

            phases = [0.0, 0.0, 0.0]

            def step():
                t0 = time.perf_counter()
                opt.zero_grad(set_to_none=True)
                with _amp(dev, a.amp):
                    out = fn(x)
                loss = F.cross_entropy(out.float(), y)
                t1 = time.perf_counter()
                loss.backward()
                t2 = time.perf_counter()
                opt.step()
                phases[0] += t1 - t0
                phases[1] += t2 - t1
                phases[2] += time.perf_counter() - t2
                return loss

            for _ in range(a.warmup):
                step().item()
            before = counts()
            wall, host = [], []
            for _ in range(a.steps):
                _sync(dev)
                t0 = time.perf_counter()
                step().item()
                wall.append(1e3 * (time.perf_counter() - t0))
            phases[:] = [0.0, 0.0, 0.0]
            for _ in range(a.steps):
                _sync(dev)
                t0 = time.perf_counter()
                step()
                host.append(1e3 * (time.perf_counter() - t0))
                _sync(dev)
            fwd, bwd, upd = (1e3 * t / a.steps for t in phases)
            print(f"== {name} [{mode}] wall {statistics.median(wall):.2f} ms/step (min {min(wall):.2f}), "
                  f"host {statistics.median(host):.2f} ms/step (min {min(host):.2f}): forward + loss {fwd:.2f}, "
                  f"backward {bwd:.2f}, optimizer {upd:.2f}", flush=True)
            if dev == "cuda" and a.kernels:
                _kernels(step, a.kernels)
            if mode != "graphfuser" and not a.profile_eager:
                continue
            if mode != "graphfuser":
                _profile(step, dev, a.top)
                continue
            after = counts()
            print(f"   after warm-up, per step over {2 * a.steps} steps:",
                  {k: (after[k] - before[k]) / (2 * a.steps) for k in after})
            if dev == "cuda":
                with warnings.catch_warnings(record=True) as w:
                    warnings.simplefilter("always")
                    torch.cuda.set_sync_debug_mode(1)
                    try:
                        step()
                    finally:
                        torch.cuda.set_sync_debug_mode(0)
                print(f"   synchronizations in one step (loss.item() excluded): {len(w)}",
                      "; ".join(sorted({str(x.message).splitlines()[0][:100] for x in w})))
            _profile(step, dev, a.top)
    return 0


def _models(a) -> list[str]:
    return (a.models or ",".join(SLIM if a.slim else ("resnet50", "timm:vit_small_patch16_224",
                                                      "timm:convnext_tiny"))).split(",")


def _model_data(a, name: str, batch: int, size) -> tuple:
    """The model in training mode on ``a.device``, a fixed batch and its labels."""
    torch.manual_seed(0)
    model, shape, classes = _build(name, size, SLIM.get(name, {}) if a.slim else {})
    model = model.to(a.device).train()
    x = torch.randn(batch, *shape, device=a.device)
    y = torch.randint(0, classes, (batch,), device=a.device)
    return model, x, y


def _backend(model: torch.nn.Module, mode: str) -> tuple:
    """A copy of ``model`` run eagerly or through graphfuser, and its SGD optimizer."""
    m = copy.deepcopy(model)
    return (graphfuser.script(m) if mode == "graphfuser" else m), torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)


def _counts(step, steps: int = 3) -> tuple[float, float]:
    """Function calls and Python frames (calls of functions written in Python) per step."""
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(steps):
        step()
    pr.disable()
    st = pstats.Stats(pr)
    frames = sum(nc for (f, _, _), (_, nc, *_rest) in st.stats.items() if f != "~")
    return st.total_calls / steps, frames / steps


def host_table(a) -> int:
    """``--host``: eager and graphfuser steps alternating, one line per model and backend."""
    from graphfuser.autodiff import STATS as AUTODIFF

    dev = a.device
    batch = a.batch or (2 if a.slim else 32)
    size = a.image_size or (32 if a.slim else None)
    print(f"host time per training step on {dev} (batch {batch}, amp {a.amp}, threads {torch.get_num_threads()}): "
          "wall ms/step median (fastest), thread CPU ms/step, calls and Python frames per step")
    for name in _models(a):
        model, x, y = _model_data(a, name, batch, size)
        steps = {}
        for mode in ("eager", "graphfuser"):
            fn, opt = _backend(model, mode)

            def step(fn=fn, opt=opt):
                opt.zero_grad(set_to_none=True)
                with _amp(dev, a.amp):
                    out = fn(x)
                loss = F.cross_entropy(out.float(), y)
                loss.backward()
                opt.step()
                return loss
            steps[mode] = step
            for _ in range(a.warmup):
                step().item()
        times: dict = {k: [] for k in steps}
        cpu: dict = {k: [] for k in steps}
        for _ in range(a.rounds):
            for mode, step in steps.items():
                ts, cs = [], []
                for _ in range(a.steps):
                    _sync(dev)
                    t0, c0 = time.perf_counter(), time.thread_time()
                    step()
                    _sync(dev)
                    ts.append(1e3 * (time.perf_counter() - t0))
                    cs.append(1e3 * (time.thread_time() - c0))
                times[mode].append(ts)
                cpu[mode].append(cs)
        base = None
        for mode, step in steps.items():
            med = statistics.median(statistics.median(ts) for ts in times[mode])
            fastest = min(min(ts) for ts in times[mode])
            on_cpu = statistics.median(statistics.median(cs) for cs in cpu[mode])
            before = AUTODIFF["forward"]
            calls, frames = _counts(step)
            extra = ""
            if mode == "graphfuser":
                extra = f", {(AUTODIFF['forward'] - before) / 3:.0f} autograd groups/step"
            ratio = "" if base is None else f"  ({on_cpu / base:.2f}x eager's thread time)"
            base = base or on_cpu
            print(f"{name:32s} {mode:10s} {med:8.2f} ms ({fastest:.2f}) thread {on_cpu:6.2f} ms {calls:6.0f} calls "
                  f"{frames:5.0f} frames{extra}{ratio}", flush=True)
    return 0


def _kernels(step, top: int, steps: int = 5) -> None:
    """Device time per step under torch.profiler: the total, graphfuser's kernels, the slowest."""
    kernels: dict = {}
    total = kernel_us_per_step(step, steps, warm=0, kernels=kernels) / 1e3
    ours = sum(us for k, (us, _) in kernels.items() if k.startswith("cuda_fusion")) / 1e3
    n = round(sum(c for _, c in kernels.values()))
    print(f"   device time {total:.2f} ms/step in {n} kernels/step; graphfuser kernels {ours:.2f} ms/step")
    for k, (us, c) in sorted(kernels.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"   {us / 1e3:8.3f} ms  x{int(c):<4d} {k[:100]}")


def _profile(step, dev: str, top: int) -> None:
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(5):
        step()
    _sync(dev)
    pr.disable()
    text = "\n".join(cprofile_text(pr, top)).replace(os.path.dirname(torch.__file__), "torch")
    print("   cProfile of 5 steps:\n" + "\n".join("   " + ln for ln in text.splitlines()[2:] if ln.strip()))


if __name__ == "__main__":
    raise SystemExit(main())
