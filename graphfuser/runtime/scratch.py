"""Scratch memory of split reductions, kept across launches.

A reduction split across ``gridDim.y`` blocks takes two buffers besides its tensors (see
``codegen/dialects.py``): 8-byte slots for the blocks' partials, which every launch writes before
it reads them, and unsigned counters, which must be zero when the kernel starts. Allocating both
per call (``torch.empty`` + ``torch.zeros``: two allocator calls and a fill kernel) cost a
training step of a ConvNeXt some 50 of each. Instead each (device, stream) keeps one buffer of
each, grown by doubling, never shrunk:

- Kernels on one stream run one after the other, so one launch's partials never meet
  another's. Another stream gets buffers of its own (its key), allocated on it.
- Single-pass split kernels (``gf_grid_last``) leave their counters at zero: the row's last block
  resets its counter. Their counters are zeroed once, when allocated.
- Kernels with grid barriers (``gf_grid_sync``, launched cooperatively) only ever add to their
  counters: they get a buffer of their own, zeroed before every launch on the stream
  (``cuMemsetD32Async``; ``Tensor.zero_`` where the driver library cannot be opened).
- While the current stream is being captured into a CUDA graph the buffers are allocated per
  call as before: a graph keeps the addresses it captured, and a cached buffer that grows later
  would free memory the graph still writes.

The buffers never leave the launcher (no output aliases them), so nothing else can hold them.
"""
from __future__ import annotations

import ctypes
import functools
from typing import Callable, Optional

import torch

from .cuda_driver import driver_library


@functools.lru_cache(maxsize=None)
def _memset_d32() -> Optional[Callable]:
    """``cuMemsetD32Async`` of the driver library through ctypes (None where it cannot be opened)."""
    lib = driver_library()
    if lib is None:
        return None
    fn = getattr(lib, "cuMemsetD32Async", None)
    if fn is None:
        return None
    fn.argtypes = [ctypes.c_uint64, ctypes.c_uint, ctypes.c_size_t, ctypes.c_void_p]
    fn.restype = ctypes.c_int
    return fn


class SplitScratch:
    """The scratch buffers of one device's split reductions: ``get(stream, slots, counters,
    barriers)`` returns ``(slots pointer, counters pointer)`` for a launch on ``stream``."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        # (stream, barriers) -> (slots tensor, its pointer, its length, counters tensor, pointer, length)
        self._buffers: dict[tuple[int, bool], tuple] = {}
        cuda = device.type == "cuda" and torch.cuda.is_available()
        self._capturing = torch._C._cuda_isCurrentStreamCapturing if cuda else _never

    def get(self, stream: int, slots: int, counters: int, barriers: bool) -> tuple[int, int, tuple]:
        """Pointers to ``slots`` float64 slots and ``counters`` zeroed counters, and what keeps
        them alive until the launch (a tuple of tensors, empty for the cached buffers)."""
        e = self._buffers.get((stream, barriers))
        if e is None or e[2] < slots or e[5] < counters or self._capturing():
            e = self._grow(stream, slots, counters, barriers, e)
            if len(e) == 2:                     # capturing: per-call buffers
                return e[0].data_ptr(), e[1].data_ptr(), e
        if barriers:
            self._zero(e[3], e[4], counters, stream)
        return e[1], e[4], ()

    def columns(self, stream: int, nbytes: int, zero: bool) -> tuple[int, tuple]:
        """A workspace of ``nbytes`` for column-sum partials (``column_sums.py``), zeroed when the
        kernel adds into memory (``zero``); the slots buffer of the stream's split kernels, which
        run before or after on the stream, never at once. Returns (pointer, what keeps it alive)."""
        n = (nbytes + 7) // 8
        wp, _, keep = self.get(stream, n, 0, False)
        if zero:
            buf = keep[0] if keep else self._buffers[(stream, False)][0]
            self._zero(buf.view(torch.int32), wp, 2 * n, stream)
        return wp, keep

    def _grow(self, stream: int, slots: int, counters: int, barriers: bool, old: Optional[tuple]) -> tuple:
        if self._capturing():
            return (torch.empty(max(slots, 1), dtype=torch.float64, device=self.device),
                    torch.zeros(max(counters, 1), dtype=torch.int32, device=self.device))
        n_slots = _size(slots, old[2] if old else 0)
        n_counters = _size(counters, old[5] if old else 0)
        ws = torch.empty(n_slots, dtype=torch.float64, device=self.device)
        sem = torch.zeros(n_counters, dtype=torch.int32, device=self.device)
        e = (ws, ws.data_ptr(), n_slots, sem, sem.data_ptr(), n_counters)
        self._buffers[(stream, barriers)] = e
        return e

    @staticmethod
    def _zero(sem: torch.Tensor, ptr: int, n: int, stream: int) -> None:
        memset = _memset_d32()
        if memset is None or memset(ptr, 0, n, stream):
            sem[:n].zero_()


def _never() -> bool:
    return False


def _size(need: int, old: int) -> int:
    """The length of a grown buffer: at least ``need``, doubling (so a slowly growing need
    reallocates a few times only), never below 256 elements."""
    return max(need, 256, old, 2 * old if need > old else 0)


@functools.lru_cache(maxsize=None)
def split_scratch(device: torch.device) -> SplitScratch:
    """The one :class:`SplitScratch` of ``device``."""
    return SplitScratch(device)
