"""What the profilers share: synchronization, cProfile listings, CUDA kernel times."""
from __future__ import annotations

import collections
import cProfile
import io
import pstats
from typing import Any, Optional

import torch

from ..timing import sync

__all__ = ["cprofile_text", "cuda_kernel_times", "kernel_us_per_step", "sync"]


def cprofile_text(pr: cProfile.Profile, rows: int) -> list[str]:
    """The lines of ``pr``'s ``rows`` functions with the most own time, header included."""
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(rows)
    return s.getvalue().splitlines()


def cuda_kernel_times(prof: Any) -> tuple[dict[str, float], collections.Counter]:
    """(device us, launches) per CUDA kernel name of a ``torch.profiler.profile``."""
    times: dict[str, float] = collections.defaultdict(float)
    counts: collections.Counter = collections.Counter()
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            times[ev.name] += ev.device_time_total
            counts[ev.name] += 1
    return times, counts


def kernel_us_per_step(step: Any, calls: int, warm: int = 4, kernels: Optional[dict] = None) -> float:
    """CUDA kernel microseconds per call of ``step()`` (every kernel torch.profiler records over
    ``calls`` calls), after ``warm`` calls (profiling runs, compiles, first fused calls). Where
    ``kernels`` is a dict, it receives (us per call, launches per call) by kernel name."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(warm):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            step()
        torch.cuda.synchronize()
    times, counts = cuda_kernel_times(prof)
    if kernels is not None:
        kernels.update({k: (t / calls, counts[k] / calls) for k, t in times.items()})
    return sum(times.values()) / calls
