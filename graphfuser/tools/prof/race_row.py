"""Kernel timeline of one race row (``tools/race.py``'s models and modes), each backend side by
side: kernels per call, GPU ms per call by category, the top kernels, and wall ms per call.

    python -m graphfuser prof race-row --rows gpt2:infer-bf16,llama:infer-bf16
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Optional

import torch

from ..race import _wrap, build, inputs, step_fn
from .common import sync
from .infer import kernel_profile, report_kernels


def replay_report() -> None:
    """Per live graphfuser graph: its fusion groups, whether steady calls replay a CUDA graph and
    why not, and how long its host program took last."""
    from ...executor import cuda_graphs
    from ...executor.fusion import _EXECUTORS

    for ex in list(_EXECUTORS):
        g = getattr(ex, "_optimized", None)
        if g is None:
            continue
        rep = getattr(ex, "_replay", None)
        why = cuda_graphs.ineligible_reason(g, getattr(ex, "_module", None) is not None)
        name = getattr(getattr(ex, "_captured", None), "name", "?")
        print(f"    {name}: {len(set(getattr(ex, '_sites', {}).values()))} groups, {len(list(g.all_nodes()))} nodes; "
              f"replay {'on' if rep is not None else 'off'} (ineligible: {why}), "
              f"{len(rep.entries) if rep is not None else 0} captured, "
              f"{len(rep.failed) if rep is not None else 0} failed")
    print("    replay stats: " + ", ".join(f"{k} {v}" for k, v in cuda_graphs.STATS.items()))


def group_report(names: list[str]) -> None:
    """What each of graphfuser's top kernels computes: its group's ops and the input types it
    was built for (kernels never specialize on sizes: the first group that built a kernel)."""
    from ...executor import compiled
    from ...ir.types import TensorType

    built = {}
    for runner in list(compiled._MEMORY.values()):
        cg = getattr(runner, "compiled", None)
        if cg is not None:
            built[cg.name] = cg.sub
    for kernel in names:
        group = next((g for g in built if kernel.startswith(g + "_") or kernel == g), None)
        if group is None:
            continue
        sub = built[group]
        ops = [n.kind.split("::")[-1] for n in sub.block.nodes if n.kind not in ("prim::Constant", "prim::ListConstruct")]
        ins = [f"{t.dtype}{list(t.sizes)}/{list(t.strides)}".replace("torch.", "")
               for t in (v.type for v in sub.inputs) if isinstance(t, TensorType) and t.sizes is not None]
        print(f"      {kernel[:40]}: {' '.join(ops)[:100]}")
        print(f"        inputs {'; '.join(ins)[:160]}")


def pipeline_report(label: str, fn, device: str, calls: int = 20) -> None:
    """Whether the host keeps ahead of the GPU: host ms per call enqueued without a sync against
    ms per call of ``calls`` calls and one sync at the end, the host's CUDA runtime calls that wait
    (synchronizations, blocking copies) per call, and the GPU's idle time inside a call's span."""
    from torch.profiler import ProfilerActivity, profile

    sync(device)
    t0 = time.perf_counter()
    hosts = []
    for _ in range(calls):
        t1 = time.perf_counter()
        fn()
        hosts.append(1e3 * (time.perf_counter() - t1))
    sync(device)
    piped = 1e3 * (time.perf_counter() - t0) / calls
    print(f"  [{label}] host {statistics.median(hosts):.3f} ms per call enqueued, {piped:.3f} ms per call "
          f"pipelined ({calls} calls, one sync)")
    if device != "cuda":
        return
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        for _ in range(3):
            fn()
        sync(device)
    waits: dict[str, list[float]] = {}
    busy, first, last = 0.0, None, None
    for e in p.events():
        if e.device_type.name == "CPU" and e.name.startswith("cuda") and any(
                w in e.name for w in ("Synchronize", "Memcpy", "Malloc", "Free", "Query")):
            w = waits.setdefault(e.name, [0, 0.0])
            w[0] += 1
            w[1] += e.cpu_time_total
        elif e.device_type.name == "CUDA":
            busy += e.device_time_total
            s0, s1 = e.time_range.start, e.time_range.end
            first = s0 if first is None else min(first, s0)
            last = s1 if last is None else max(last, s1)
    span = (last - first) / 3 if first is not None else 0.0
    print(f"  [{label}] GPU span {span / 1e3:.3f} ms per call, kernels busy {busy / 3e3:.3f} ms, host CUDA calls: " +
          (", ".join(f"{k} {n / 3:.1f}x {us / 3:.0f} us" for k, (n, us) in sorted(waits.items())) or "none that wait"))


def profile_row(name: str, mode: str, backends: list[str], device: str, top: int, warm: int) -> None:
    print(f"== {name} {mode}")
    for backend in backends:
        torch.manual_seed(0)
        model = build(name, device)
        model.train(mode.startswith("train"))
        x, y = inputs(name, mode, device, None)
        fn = step_fn(name, mode, model, _wrap(backend, model), x, y, device)
        for _ in range(warm):
            fn()
        sync(device)
        walls = []
        for _ in range(10):
            t0 = time.perf_counter()
            fn()
            sync(device)
            walls.append(1e3 * (time.perf_counter() - t0))
        print(f"  [{backend}] wall {statistics.median(walls):.3f} ms per call")
        pipeline_report(backend, fn, device)
        kernels, ops = kernel_profile(fn, device, calls=3)
        report = report_kernels(backend, kernels, ops, 3, top)
        if backend.startswith("graphfuser"):
            replay_report()
            ranked = sorted(report["names"].items(), key=lambda kv: -kv[1][1])[:top]
            group_report([k for k, _ in ranked])
        del model, fn
        torch._dynamo.reset()
        if device == "cuda":
            torch.cuda.empty_cache()


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--rows", default="gpt2:infer-bf16")
    p.add_argument("--backends", default="eager,inductor_ro,graphfuser_compile")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--warm", type=int, default=5)
    a = p.parse_args(argv)
    for row in a.rows.split(","):
        name, mode = row.split(":")
        profile_row(name, mode, a.backends.split(","), a.device, a.top, a.warm)
    return 0
