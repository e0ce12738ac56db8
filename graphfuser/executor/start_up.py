"""What a graph's first calls do once per process, off the steady path: the collector bracket
around profiling and optimization (``gc_paused``), and the start of the CUDA toolchain's warm-up
(``warm_cuda``, ``runtime/warm_up.py``)."""
from __future__ import annotations

import contextlib
import gc
import threading
from typing import Any, Iterator

import torch

_GC_LOCK = threading.Lock()
_gc_depth = 0


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic collector kept off the objects that existed before a graph is profiled and
    optimized. The passes make tens of thousands of short-lived IR objects and a profiling call
    records a type per value; the collections they trigger walked every object of a process that
    imported torch, transformers and Dynamo (a Mistral-like model's optimization spent 0.25 s of
    2.7 s in collections, GPT-2's first profiling call 0.26 of 0.51 s, on this project's 2-core
    CPU machine).

    ``gc.freeze()`` moves every tracked object to the permanent generation, which collections
    skip, and ``gc.unfreeze()`` at the end puts them back in the oldest one: in between the
    collector runs, over the new objects alone (their cycles are still freed), and nothing is
    leaked. Nested and concurrent uses share one freeze (the outermost exit unfreezes). Where the
    process froze objects itself (``gc.get_freeze_count()``: a server that forks), its freeze is
    left alone and the collector is switched off instead, as the caller had it afterwards."""
    global _gc_depth
    with _GC_LOCK:
        outer = _gc_depth == 0
        if outer and gc.get_freeze_count():
            mode = "disable"
        else:
            mode = "freeze"
            if outer:
                gc.freeze()
            _gc_depth += 1
    if mode == "disable":
        was = gc.isenabled()
        gc.disable()
        try:
            yield
        finally:
            if was:
                gc.enable()
        return
    try:
        yield
    finally:
        with _GC_LOCK:
            _gc_depth -= 1
            if _gc_depth == 0:
                gc.unfreeze()


def warm_cuda(values: Any) -> None:
    """Start the CUDA toolchain's warm-up (``runtime/warm_up.py``) for the device of the first
    CUDA tensor among ``values`` (a graph's first profiling call, the backend's example inputs)."""
    for v in values:
        if isinstance(v, torch.Tensor) and v.device.type == "cuda":
            from ..runtime.warm_up import warm_up

            warm_up(v.device.index if v.device.index is not None else torch.cuda.current_device())
            return
