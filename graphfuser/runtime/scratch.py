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
- While the current stream is being captured into a CUDA graph the slots are allocated per
  call: a graph keeps the addresses it captured, and a cached buffer that grows later would
  free memory the graph still writes. The counters of one capture come from one block of
  ``GRAPH_COUNTERS`` (or more where a launch needs more), each launch its own slice of it,
  zeroed by one fill at the block's first use: the fill is captured too, so every replay starts
  with every counter of the graph at zero, barrier kernels' included. One fill kernel per
  replayed graph where each captured split launch filled its own counters before (GPT-2's
  training step replayed 61 such fills; logs/prof-race-row-cuda-H200-gpt2-train-n.txt). The
  block is kept until another capture takes one (a capture is told apart by its id): freed
  during the capture, its memory could go to a later tensor of the same graph.

The buffers never leave the launcher (no output aliases them), so nothing else can hold them.
"""
from __future__ import annotations

import ctypes
import functools
from typing import Callable, Optional

import torch

from .cuda_driver import driver_library

GRAPH_COUNTERS = 1 << 14        # counters of one capture's block (64 KiB)


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
        self._capture_id = _capture_id if cuda else _no_id
        self._graph_counters: Optional[list] = None     # [capture id, block, slices handed out]

    def get(self, stream: int, slots: int, counters: int, barriers: bool) -> tuple[int, int, tuple]:
        """Pointers to ``slots`` float64 slots and ``counters`` zeroed counters, and what keeps
        them alive until the launch (a tuple of tensors, empty for the cached buffers)."""
        if self._capturing():
            return self._captured(stream, slots, counters)
        e = self._buffers.get((stream, barriers))
        if e is None or e[2] < slots or e[5] < counters:
            e = self._grow(stream, slots, counters, barriers, e)
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

    def _captured(self, stream: int, slots: int, counters: int) -> tuple[int, int, tuple]:
        """A launch being captured: slots of its own, counters from the capture's block."""
        ws = torch.empty(max(slots, 1), dtype=torch.float64, device=self.device)
        if counters == 0:
            return ws.data_ptr(), 0, (ws,)
        cid = self._capture_id(stream)
        c = self._graph_counters
        if cid is None or c is None or c[0] != cid or c[2] + counters > c[1].numel():
            block = torch.zeros(max(GRAPH_COUNTERS, counters), dtype=torch.int32, device=self.device)
            c = self._graph_counters = [cid, block, 0]
            if cid is None:                     # (no id to tell captures apart: a block per launch)
                self._graph_counters = None
        ptr = c[1].data_ptr() + 4 * c[2]
        c[2] += counters
        return ws.data_ptr(), ptr, (ws, c[1])

    def _grow(self, stream: int, slots: int, counters: int, barriers: bool, old: Optional[tuple]) -> tuple:
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


def _no_id(stream: int) -> Optional[int]:
    return None


def _capture_id(stream: int) -> Optional[int]:
    """The id of the capture under way on ``stream`` (``cuStreamGetCaptureInfo``), None where the
    driver bindings cannot say."""
    try:
        from .cuda_driver import _driver

        drv = _driver()
        res = drv.cuStreamGetCaptureInfo(drv.CUstream(stream))
    except Exception:  # noqa: BLE001 - no bindings, or another signature: no id
        return None
    return int(res[2]) if len(res) > 2 and int(res[0]) == 0 else None


def _size(need: int, old: int) -> int:
    """The length of a grown buffer: at least ``need``, doubling (so a slowly growing need
    reallocates a few times only), never below 256 elements."""
    return max(need, 256, old, 2 * old if need > old else 0)


@functools.lru_cache(maxsize=None)
def split_scratch(device: torch.device) -> SplitScratch:
    """The one :class:`SplitScratch` of ``device``."""
    return SplitScratch(device)
