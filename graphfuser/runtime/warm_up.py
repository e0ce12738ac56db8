"""Warming the CUDA toolchain up while a process's first graph is still traced and profiled.

A process pays once for its first NVRTC compile (loading the compiler: 0.36 s, against 0.045 s
for the next kernel of the same size, H200 host), for its first module load, and, with an empty
kernel cache, for building the launch shim with the C compiler (``cuda_driver.shim_launchers``).
Paid inside the first optimization, all three sat on the cold start's critical path: the first
kernels' builds started together and each waited for them.

``warm_up(device)`` pays the first and the last on a daemon thread as soon as graphfuser first
sees a CUDA graph (the ``torch.compile`` backend's call, a scripted function's first profiling
call): one NVRTC compile of an empty kernel for the device's architecture, uncounted and
unlogged as a compile, and the launch shim. It makes no CUDA call (no module load), so that a
CUDA graph another thread captures in the global mode is never broken by it. NVRTC and the C
compiler run without the GIL, beside Dynamo's guards and the profiling calls. Once per device and process; any failure is logged and changes nothing
(the builds then pay as before).

Example::

    >>> from graphfuser.runtime.warm_up import warm_up
    >>> import torch
    >>> warm_up(0) if torch.cuda.is_available() else None   # doctest: +SKIP
"""
from __future__ import annotations

import threading
from typing import Optional

from ..log import jit_log

SOURCE = 'extern "C" __global__ void gf_warm_up(float* x) { if (x) x[threadIdx.x] = 0.0f; }'
_STARTED: set[int] = set()
_LOCK = threading.Lock()


def warm_up(device_index: int) -> Optional[threading.Thread]:
    """Start warming device ``device_index``'s toolchain up (the thread; None where it was started
    before)."""
    with _LOCK:
        if device_index in _STARTED:
            return None
        _STARTED.add(device_index)
    t = threading.Thread(target=warm, args=(device_index,), name="graphfuser-warm-up", daemon=True)
    t.start()
    return t


def warm(device_index: int) -> bool:
    """The warm-up itself, on the calling thread: True where the kernel compiled (and the launch
    shim is built, or cannot be)."""
    try:
        from . import cuda_driver, nvrtc

        ok, why = nvrtc.available()
        if not ok:
            jit_log("compile", 2, f"no CUDA warm-up: {why}")
            return False
        arch = nvrtc.clamp_arch(cuda_driver.device_arch(device_index))
        nvrtc._run_nvrtc(SOURCE, "gf_warm_up", nvrtc.build_options(arch), count=False)
        # no CUDA call from this thread (no module load, no current device): the calling thread
        # may be capturing a CUDA graph in the global mode, which other threads' calls break
        cuda_driver.shim_launchers()
        return True
    except Exception as e:  # noqa: BLE001 - a warm-up never fails anything
        jit_log("compile", 1, f"CUDA warm-up of device {device_index} skipped: {type(e).__name__}: {e}")
        return False
