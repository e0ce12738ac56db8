"""Where inference time goes: eager vs ``torch.jit.script`` vs graphfuser on zoo models.

    python -m graphfuser prof infer --device cuda --models regnet_y_800mf,timm:levit_128s
    python -m graphfuser prof infer --device cuda --models swin_t --launch-times

Per model (``eval()``, ``no_grad``, batch ``--batch``) and backend:

- ``wall``: ms per call, median of ``--rounds`` rounds that interleave the backends, each round
  ``--calls`` calls between two synchronizations;
- ``enqueue``: CPU ms per call of ``--calls`` calls without synchronization (host cost);
- kernels per call and GPU ms per call (``torch.profiler``), split into graphfuser kernels
  (``cuda_fusion*``), convolutions / GEMMs, layout conversions and copies, and the rest;
- the kernels with the most GPU time, and the aten ops the host ran per call.

With ``--host`` (any device; e.g. ``--device cpu --batch 1 --size 64``, where kernels are tiny
and a call is host-bound): the best and median ms per call of each backend, and graphfuser's host
time per call split by stubbing: the call with every unfused aten op of the host program returning
its recorded output (host program, guards, allocations, launches and fused kernels), and on the
CPU also with the fused kernels themselves stubbed (host time alone); then the kernel profile is
skipped. ``--size`` sets the input's height and width.

For graphfuser, a ``cProfile`` of ``--calls`` calls (each followed by a synchronization, so no
launch waits for a full launch queue), and with ``--launch-times`` the host microseconds of
every fused kernel's launch (``cuLaunchKernel`` included). Prints text only; never asserts.
"""
from __future__ import annotations

import argparse
import collections
import cProfile
import statistics
import sys
import time
import warnings
from typing import Any, Callable, Optional

import torch

import graphfuser

from ..zoo import build
from .common import cprofile_text, sync

warnings.filterwarnings("ignore")

_CONV = ("conv", "gemm", "cutlass", "sm90_", "sm80_", "xmma", "cudnn", "cublas", "implicit", "winograd",
         "fft", "dgrad", "wgrad", "_mma", "s16816", "s1688", "nvjet")
_COPY = ("copy", "nchwtonhwc", "nhwctonchw", "transpose", "cat", "contiguous", "permute")


def category(name: str) -> str:
    low = name.lower()
    if low.startswith("cuda_fusion"):
        return "graphfuser"
    if any(c in low for c in ("flash", "fmha", "attention")):
        return "attention"
    if any(c in low for c in _COPY):
        return "copy/layout"
    if any(c in low for c in _CONV):
        return "conv/gemm"
    return "other"


def wall_ms(fns: dict[str, Callable], device: str, rounds: int, calls: int) -> dict[str, float]:
    """Median over interleaved rounds of ms per call."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for label, fn in fns.items():
            sync(device)
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            sync(device)
            times[label].append(1e3 * (time.perf_counter() - t0) / calls)
    return {k: statistics.median(v) for k, v in times.items()}


def enqueue_ms(fn: Callable, device: str, calls: int) -> float:
    sync(device)
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    ms = 1e3 * (time.perf_counter() - t0) / calls
    sync(device)
    return ms


def kernel_profile(fn: Callable, device: str, calls: int = 3) -> tuple[list, collections.Counter]:
    """(GPU kernel events, aten op counts) of ``calls`` calls."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    sync(device)
    with profile(activities=acts) as p:
        for _ in range(calls):
            fn()
        sync(device)
    events = p.events()
    kernels = [e for e in events if e.device_type.name == "CUDA"]
    ops = collections.Counter(e.name for e in events if e.device_type.name == "CPU" and e.name.startswith("aten::"))
    return kernels, ops


def report_kernels(label: str, kernels: list, ops: collections.Counter, calls: int, top: int) -> dict:
    by_cat: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    by_name: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    for e in kernels:
        c = by_cat[category(e.name)]
        c[0] += 1
        c[1] += e.device_time_total
        n = by_name[e.name]
        n[0] += 1
        n[1] += e.device_time_total
    total_us = sum(e.device_time_total for e in kernels) / calls
    print(f"  [{label}] kernels {len(kernels) / calls:.0f} per call, GPU {total_us / 1e3:.3f} ms per call: " +
          ", ".join(f"{k} {v[0] / calls:.0f} ({v[1] / calls / 1e3:.3f} ms)" for k, v in sorted(by_cat.items())))
    for name, (n, us) in sorted(by_name.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"      {us / calls:9.1f} us {n / calls:5.1f}x  {name[:110]}")
    return {"ops": {k: v / calls for k, v in ops.items()}, "names": by_name}


def launch_timer() -> dict[str, list[float]]:
    """Wrap every CudaKernel launch built from now on with a host timer; returns the samples."""
    from graphfuser.runtime import cuda_driver

    samples: dict[str, list[float]] = collections.defaultdict(list)
    orig = cuda_driver.CudaKernel._build_launch

    def build(self):
        launch = orig(self)
        name = self.name + (" (cooperative)" if self.cooperative else "")

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            launch(*args, **kwargs)
            samples[name].append(1e6 * (time.perf_counter() - t0))
        return timed

    cuda_driver.CudaKernel._build_launch = build
    return samples


CLOCK = time.perf_counter    # --cpu-clock: time.thread_time (CPU time of this thread; a shared host)


def best_ms(fn: Callable, device: str, rounds: int, calls: int) -> tuple[float, float]:
    """(best, median) ms per call over ``rounds`` rounds of ``calls`` calls."""
    times = []
    for _ in range(rounds):
        sync(device)
        t0 = CLOCK()
        for _ in range(calls):
            fn()
        sync(device)
        times.append(1e3 * (CLOCK() - t0) / calls)
    return min(times), statistics.median(times)


def host_split(sf: Any, x: torch.Tensor, device: str, rounds: int, calls: int) -> None:
    """graphfuser's ms per call with the host program's aten ops stubbed (each returns what it
    returned on a recorded call), and on the CPU with the fused kernels stubbed too."""
    program = getattr(sf, "_program", None)
    if program is None:
        print("   host split: no optimized host program")
        return
    full = best_ms(lambda: sf(x), device, rounds, calls)
    ns = program.fn.__globals__
    ops = {k: v for k, v in ns.items() if k.startswith("_op")}
    recorded: dict[str, Any] = {}

    def recorder(k: str, f: Callable) -> Callable:
        def call(*a: Any, **kw: Any) -> Any:
            out = recorded[k] = f(*a, **kw)
            return out
        return call

    ns.update({k: recorder(k, f) for k, f in ops.items()})
    sf(x)
    ns.update({k: (lambda *a, _r=recorded.get(k), **kw: _r) for k in ops})
    launchers = {id(v): v for v in ns.values() if "_fn" in getattr(v, "namespace", {})}.values()
    kernels = {id(f): {n: f.namespace[n] for n in ("_fn", "_fn2") if n in f.namespace} for f in launchers}
    try:
        line = f"   host split, best / median ms per call: graphfuser {full[0]:.3f} / {full[1]:.3f}"
        no_ops = best_ms(lambda: sf(x), device, rounds, calls)
        line += f"; aten ops stubbed {no_ops[0]:.3f} / {no_ops[1]:.3f}"
        if kernels:
            for f in launchers:
                f.namespace.update({n: (lambda *a: None) for n in kernels[id(f)]})
            host = best_ms(lambda: sf(x), device, rounds, calls)
            line += f"; fused kernels stubbed too (host only) {host[0]:.3f} / {host[1]:.3f}"
        print(line)
    finally:
        ns.update(ops)
        for f in launchers:
            f.namespace.update(kernels[id(f)])


def replay_state(sf: Any, x: Any) -> None:
    """Whether graphfuser's steady calls replay a CUDA graph, and why not."""
    from graphfuser.executor import cuda_graphs

    g = getattr(sf, "_optimized", None)
    rep = getattr(sf, "_replay", None)
    why = cuda_graphs.ineligible_reason(g, getattr(sf, "_module", None) is not None) if g is not None else "no graph"
    chains = len(rep.chains) if rep is not None else 0
    print(f"   CUDA graph replay: {'on' if rep is not None else 'off'} (ineligible: {why}); "
          f"{len(rep.entries) if rep else 0} captured signatures, {chains} attribute chains in the key; stats "
          + ", ".join(f"{k} {v}" for k, v in cuda_graphs.STATS.items()))
    if rep is not None:
        t0 = time.perf_counter()
        for _ in range(100):
            rep._key((x,))
        print(f"   replay key: {1e4 * (time.perf_counter() - t0):.1f} us per call")


def profile_model(name: str, args: argparse.Namespace, samples: Optional[dict]) -> None:
    device = args.device
    torch.manual_seed(0)
    model, size = build(name)
    model = model.to(device)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    if args.size:
        size = size[:-2] + (args.size, args.size)
    x = torch.randn(args.batch, *size, device=device)
    if args.channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        jit = torch.jit.script(model)
        sf = graphfuser.script(model)
        fns = {"eager": lambda: model(x), "jit": lambda: jit(x), "graphfuser": lambda: sf(x)}
        plain = None
        if args.no_replay_too and device == "cuda":
            plain = graphfuser.script(model)
            fns["graphfuser_noreplay"] = lambda: plain(x)
        for fn in fns.values():
            for _ in range(6):
                fn()
        sync(device)
        if plain is not None:
            plain._replay = None       # the same steady host program, never replayed
        g = getattr(sf, "_optimized", None)
        groups = sum(1 for n in g.all_nodes() if n.kind.endswith("FusionGroup")) if g is not None else 0
        walls = wall_ms(fns, device, args.rounds, args.calls)
        print(f"== {name} batch {args.batch}: groups {groups}; wall ms (median of {args.rounds} interleaved rounds): "
              + ", ".join(f"{k} {v:.3f}" for k, v in walls.items()))
        if args.host:
            best = {k: best_ms(fn, device, args.rounds, args.calls) for k, fn in fns.items()}
            print("   best / median ms per call: " + ", ".join(f"{k} {b:.3f} / {m:.3f}" for k, (b, m) in best.items()))
            host_split(sf, x, device, args.rounds, args.calls)
        else:
            replay_state(sf, x)
        try:
            want = model(x)
            errs = {k: float(((fn() - want).abs().max() / want.abs().max().clamp_min(1e-30)).item())
                    for k, fn in fns.items() if k != "eager"}
            print("   max |out - eager| / max |eager|: " + ", ".join(f"{k} {v:.1e}" for k, v in errs.items()))
        except (TypeError, AttributeError) as e:        # outputs that are not one tensor
            print(f"   outputs not compared: {e}")
        print("   enqueue ms per call (no sync): " +
              ", ".join(f"{k} {enqueue_ms(fn, device, args.calls):.3f}" for k, fn in fns.items()))
        seen = {}
        for label, fn in fns.items() if not args.host else ():
            kernels, ops = kernel_profile(fn, device)
            seen[label] = report_kernels(label, kernels, ops, 3, args.top)
        # aten ops the host runs per call, where the backends differ
        keys = sorted(set().union(*(s["ops"] for s in seen.values())))
        diff = [(k, [seen[b]["ops"].get(k, 0) for b in fns]) for k in keys]
        diff = [(k, v) for k, v in diff if max(v) - min(v) >= 1]
        if diff:
            print("   aten ops per call where backends differ (eager / jit / graphfuser):")
            for k, v in sorted(diff, key=lambda kv: -max(kv[1]))[:args.top * 2]:
                print(f"      {k:45s} " + " / ".join(f"{c:.0f}" for c in v))
        # non-fused kernels graphfuser runs more of (or slower) than eager
        eag, gfn = (seen["eager"]["names"], seen["graphfuser"]["names"]) if seen else ({}, {})
        extra = []
        for kname, (n, us) in gfn.items():
            if kname.startswith("cuda_fusion"):
                continue
            en, eus = eag.get(kname, (0, 0.0))
            if us - eus > 3 * 5.0:      # more than 5 us per call
                extra.append((us - eus, n - en, kname))
        if extra:
            print("   non-fused kernels with more GPU time under graphfuser than eager (us per call, count diff):")
            for dus, dn, kname in sorted(extra, reverse=True)[:args.top]:
                print(f"      +{dus / 3:8.1f} us {dn / 3:+5.1f}x  {kname[:110]}")
        if args.cprofile:
            pr = cProfile.Profile()
            pr.enable()
            for _ in range(args.calls):
                sf(x)
                sync(device)
            pr.disable()
            text = cprofile_text(pr, args.top * 2)
            start = next((i for i, ln in enumerate(text) if "ncalls" in ln), 0)
            print(f"   cProfile of {args.calls} graphfuser calls (each synchronized), by tottime:")
            print("\n".join("      " + ln for ln in text[start - 3:start + args.top * 2 + 1] if ln.strip()))
        if samples is not None:
            for v in samples.values():
                v.clear()
            for _ in range(args.calls):
                sf(x)
                sync(device)
            rows = sorted(((sum(v), len(v), k) for k, v in samples.items() if v), reverse=True)
            print(f"   host us per fused launch over {args.calls} synchronized calls (total / count / median):")
            for tot, n, k in rows[:args.top * 2]:
                print(f"      {tot / args.calls:8.1f} us/call {n / args.calls:4.1f}x median {statistics.median(samples[k]):6.1f}"
                      f" max {max(samples[k]):7.1f}  {k}")
            for v in samples.values():
                v.clear()
            for _ in range(args.calls):
                sf(x)
            sync(device)
            rows = sorted(((statistics.median(v), len(v), k) for k, v in samples.items() if v), reverse=True)
            print("   the same, calls not synchronized (a full launch queue makes launches wait): median / max")
            for med, n, k in rows[:args.top]:
                print(f"      median {med:7.1f} max {max(samples[k]):8.1f}  {k}")
    del model, jit, sf
    if device == "cuda":
        torch.cuda.empty_cache()


NOOP = r"""
extern "C" __global__ void noop(const float* x, float* out, long long n, long long s0, long long s1) {
  if (threadIdx.x == 0 && blockIdx.x == 0 && n < 0) out[0] = x[s0 + s1];
}
"""


def launch_bench(n: int = 20000, cprofile: bool = False) -> None:
    """Host us per launch of an empty kernel (5 arguments) through each launch API, per
    ``torch.empty_strided``, and per call of a one-group fused function on 1k elements (guard,
    allocation, launch) against eager's two ops."""
    from graphfuser.runtime import cuda_driver, nvrtc

    cubin = nvrtc.compile_cubin(NOOP, "noop", cuda_driver.device_arch(0))
    x = torch.zeros(16, device="cuda")
    stream = cuda_driver.raw_stream(0)
    for api in cuda_driver.LAUNCH_APIS:
        k = cuda_driver.CudaKernel(cubin, "noop", 0, ["ptr", "ptr", "i64", "i64", "i64"], api=api)
        launch, p = k.launch, x.data_ptr()
        for _ in range(100):
            launch((1, 1, 1), (32, 1, 1), stream, p, p, 16, 1, 2)
        best = []
        for _ in range(5):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(n // 5):
                launch((1, 1, 1), (32, 1, 1), stream, p, p, 16, 1, 2)
            best.append(1e6 * (time.perf_counter() - t0) / (n // 5))
        print(f"   launch api {k.launch_api:8s}: {min(best):.2f} us per launch (best of 5 x {n // 5})")
    torch.cuda.synchronize()
    for label, stmt in (("empty_strided", lambda: torch.empty_strided((64, 96, 28, 28), (75264, 784, 28, 1),
                                                                    dtype=torch.float32, device=x.device)),
                        ("empty", lambda: torch.empty((64, 96, 28, 28), dtype=torch.float32, device=x.device))):
        t0 = time.perf_counter()
        for _ in range(n // 4):
            stmt()
        print(f"   {label}: {1e6 * (time.perf_counter() - t0) / (n // 4):.2f} us")

    def f(a, b):
        return (a + b).relu()

    a, b = torch.randn(1024, device="cuda"), torch.randn(1024, device="cuda")
    sf = graphfuser.script(f)
    for fn, label in ((lambda: f(a, b), "eager add+relu"), (lambda: sf(a, b), "graphfuser one group")):
        for _ in range(200):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n // 4):
            fn()
        us = 1e6 * (time.perf_counter() - t0) / (n // 4)
        torch.cuda.synchronize()
        print(f"   {label}: {us:.2f} us per call (enqueue)")
    if cprofile:
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(2000):
            sf(a, b)
        pr.disable()
        torch.cuda.synchronize()
        print("\n".join("      " + ln for ln in cprofile_text(pr, 12)[4:22] if ln.strip()))


def _softmax(a: torch.Tensor) -> torch.Tensor:
    return torch.softmax(a, -1)


def _add_layer_norm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.layer_norm(a + b, [a.size(-1)])


def _layer_norm(a: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.layer_norm(a, [a.size(-1)])


ROW_CASES = [
    # (label, function, input shapes): the short-row normalizations of window attention models
    ("softmax rows 49 (swin_t stage 1)", _softmax, [(4096, 3, 49, 49)]),
    ("softmax rows 49 (swin_t stage 3)", _softmax, [(256, 12, 49, 49)]),
    ("softmax rows 197 (vit)", _softmax, [(64, 6, 197, 197)]),
    ("add + layer_norm 96", _add_layer_norm, [(64, 56, 56, 96)] * 2),
    ("add + layer_norm 384", _add_layer_norm, [(64, 14, 14, 384)] * 2),
    ("layer_norm 768", _layer_norm, [(64, 7, 7, 768)]),
]


def row_bench(device: str, calls: int = 50) -> None:
    """ms per call of short-row softmax / layer norm, eager against graphfuser's kernels (CUDA
    events; replay off, so no static input copies or output clones; on the CPU a smoke test at
    1/64 of the batch)."""
    for label, fn, shapes in ROW_CASES:
        if device != "cuda":
            shapes = [(max(1, s[0] // 64),) + s[1:] for s in shapes]
            calls = 2
        xs = [torch.randn(s, device=device) for s in shapes]
        sf = graphfuser.script(fn)
        with torch.no_grad():
            res = {}
            for name, f in (("eager", fn), ("graphfuser", sf)):
                for _ in range(5):
                    f(*xs)
                sf._replay = None
                sync(device)
                t0 = time.perf_counter()
                for _ in range(calls):
                    f(*xs)
                sync(device)
                res[name] = 1e3 * (time.perf_counter() - t0) / calls
            err = (sf(*xs) - fn(*xs)).abs().max().item()
        gbs = (sum(x.numel() for x in xs) + xs[0].numel()) * 4 / res["graphfuser"] / 1e6
        print(f"   {label:36s} eager {res['eager']:.3f} ms, graphfuser {res['graphfuser']:.3f} ms "
              f"({gbs:.0f} GB/s), max err {err:.1e}")


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m graphfuser prof infer", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--models", default="mobilenet_v3_small,shufflenet_v2_x1_0,regnet_y_800mf,timm:levit_128s")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--top", type=int, default=12)
    p.add_argument("--size", type=int, default=0, help="input height and width (default: the model's)")
    p.add_argument("--host", action="store_true",
                   help="host time per call: best / median per backend and graphfuser's split (no kernel profile)")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--cprofile", action="store_true", help="cProfile of graphfuser calls")
    p.add_argument("--no-replay-too", action="store_true",
                   help="also time graphfuser with CUDA graph replay off (a second scripted copy)")
    p.add_argument("--launch-times", action="store_true", help="host time of every fused launch")
    p.add_argument("--launch-bench", action="store_true", help="host us per launch per API, allocation, one group")
    p.add_argument("--rows", action="store_true", help="short-row softmax / layer norm: eager against graphfuser")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (default: torch's)")
    p.add_argument("--cpu-clock", action="store_true",
                   help="--host times with the thread's CPU clock, not the wall clock (a host shared with other work; "
                        "one torch thread and kernels below the OpenMP threshold)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.cpu_clock:
        global CLOCK
        CLOCK = time.thread_time
    if args.rows:
        row_bench(args.device)
    if args.launch_bench and args.device == "cuda":
        launch_bench(cprofile=args.cprofile)
    samples = launch_timer() if args.launch_times and args.device == "cuda" else None
    for name in filter(None, args.models.split(",")):
        try:
            profile_model(name.strip(), args, samples)
        except Exception as e:  # noqa: BLE001 - one model's failure is its line
            print(f"== {name}: {type(e).__name__}: {str(e)[:300]}")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
