"""What the benchmarks and profilers share to time calls."""
from __future__ import annotations

from typing import Any, Callable

import torch


def sync(device: str) -> None:
    """Wait for the device's queued work (CUDA); nothing to wait for on the CPU."""
    if device == "cuda":
        torch.cuda.synchronize()


def cuda_ms_per_call(fn: Callable[[], Any], calls: int) -> float:
    """Mean ms per call of ``calls`` calls back to back, CUDA events around the block: a
    host-bound call shows its host time, a device-bound one its kernels' time."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls
