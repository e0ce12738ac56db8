"""Philox4x32-10 with torch ops, and where its (seed, offset) come from.

The kernels compute ``gf_philox_uniform_*`` (``codegen/dialects.py``); this module computes the
same numbers with int64 tensor arithmetic for the fallback (eager) path, so a group that runs
its fallback draws exactly what its kernel would have drawn, and a backward that recomputes a
dropout mask gets the forward's mask whichever path either of them took.

Element ``i`` of a random op's output (row-major linear index) draws from the Philox block of
key ``seed`` and counter ``(c, offset)`` (64 bits each: ``c`` in words 0-1, ``offset`` in words
2-3), so two calls with different offsets draw from disjoint streams whatever their sizes. A
float uniform uses the top 24 bits of word ``i % 4`` of block ``c = i // 4`` (four elements per
evaluation: the ten rounds are most of a dropout kernel's arithmetic), a double uniform 53 bits
of words 0-1 of block ``c = i``.

Where (seed, offset) come from (``philox_state``), per call, without a device sync:

- CUDA: the device's default generator, as eager's own Philox kernels use it:
  ``seed = gen.initial_seed()``, ``offset = gen.get_offset()``, then ``gen.set_offset(offset +
  n)`` with ``n`` the number of values drawn rounded up to a multiple of 4 (the generator's
  offset unit). Both are host-side reads and writes of the generator's state.
- CPU: the CPU generator (mt19937) has no offset, and reading its full state per call
  (``get_state``, 5 KB) costs more than drawing from it: the call draws one 63-bit number from
  the default generator and uses it as the seed, with offset 0. This advances the generator as
  any eager random op does, so ``torch.manual_seed(s)`` reproduces the sequence.

Either way the numbers are not those of eager's ``dropout`` / ``rand_like`` (different streams):
same seed -> same masks as graphfuser's earlier runs, not as eager's.

Inside a CUDA graph (``executor/cuda_graphs_train.py``) a kernel's arguments are the ones
recorded, so a replay would draw the recorded numbers again. While a training call is captured
(``philox_capture``) ``philox_state`` leaves the generator alone and hands out offsets counted
from 0 within the call, marked by bit 63, with the address of a two-element int64 device tensor
as the seed; the kernels then read {seed, base} from that tensor when they run
(``gf_rng_base``, ``codegen/dialects.py``). Before each replay the replayer reserves the call's
offsets from the generator as the host program would (``reserve``) and writes the generator's
seed and the reserved base there: a replayed call draws what the host program would have drawn
in its place. ``philox_fixed`` hands out the offsets of one earlier replay again (the backward
that recomputes a replayed call). A group's fallback cannot read the device tensor: it raises
during a capture, which then fails (the call keeps running its host program).
"""
from __future__ import annotations

import contextlib
from typing import Iterator, Optional

import torch

_M0, _M1 = 0xD2511F53, 0xCD9E8D57
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_LO = 0xFFFFFFFF


_MARK = -(2 ** 63)        # bit 63 of an int64: the offset counts from a base in device memory


class _Capture:
    """Offsets within one call, counted from 0 (see module doc)."""

    def __init__(self, seed: Optional[int], base: int, device: int) -> None:
        self.seed, self.base, self.used, self.device = seed, base, 0, device

    def take(self, n: int) -> tuple[int, int]:
        rel = self.used
        self.used += (n + 3) // 4 * 4
        if self.seed is None:       # capturing: the seed slot holds the address of {seed, base}
            return self.base, _MARK + rel
        return self.seed, self.base + rel


_ACTIVE: list[_Capture] = []


@contextlib.contextmanager
def philox_capture(rng: torch.Tensor) -> Iterator[_Capture]:
    """While a call is recorded into a CUDA graph: offsets relative to the {seed, base} that
    ``rng`` (int64, two elements, on the device) holds when the graph runs."""
    c = _Capture(None, rng.data_ptr(), rng.device.index)
    _ACTIVE.append(c)
    try:
        yield c
    finally:
        _ACTIVE.remove(c)


@contextlib.contextmanager
def philox_fixed(seed: int, base: int, device: int) -> Iterator[_Capture]:
    """The offsets one replay drew from (seed, base) on CUDA device ``device``, handed out again
    in the same order."""
    c = _Capture(seed, base, device)
    _ACTIVE.append(c)
    try:
        yield c
    finally:
        _ACTIVE.remove(c)


def signed_seed(gen: torch.Generator) -> int:
    """The generator's seed (unsigned 64 bits) as the int64 of its bits, as kernels take it."""
    seed = gen.initial_seed()
    return seed - 2 ** 64 if seed >= 2 ** 63 else seed


def reserve(device_index: int, n: int) -> tuple[int, int]:
    """(seed, offset) of ``n`` offsets (a multiple of 4) taken from CUDA device
    ``device_index``'s generator: one random op's draws (``philox_state``), or a replayed call's."""
    gen = torch.cuda.default_generators[device_index]
    offset = gen.get_offset()
    gen.set_offset(offset + n)
    return signed_seed(gen), offset


def philox_state(x: torch.Tensor, n: int) -> tuple[int, int]:
    """(seed, offset) for a random op drawing ``n`` values on ``x``'s device; advances the
    device's default generator past them."""
    if x.device.type == "cuda":
        idx = x.device.index if x.device.index is not None else torch.cuda.current_device()
        if _ACTIVE:
            c = _ACTIVE[-1]
            if idx == c.device:
                return c.take(n)
            if c.seed is None:
                raise RuntimeError("graphfuser: a random op on another device in a call captured into a CUDA graph")
        return reserve(idx, (n + 3) // 4 * 4)
    seed = int(torch.randint(-2 ** 63, 2 ** 63 - 1, (), dtype=torch.int64))
    return seed, 0


def _philox_block(seed: int, offset: int, index: torch.Tensor) -> list[torch.Tensor]:
    """The four words of the Philox4x32-10 block of counter ``(index, offset)`` and key
    ``seed``, per element of ``index`` (int64 tensors holding unsigned 32-bit values)."""
    c0, c1 = index & _LO, (index >> 32) & _LO
    c2 = torch.full_like(c0, offset & _LO)
    c3 = torch.full_like(c0, (offset >> 32) & _LO)
    k0, k1 = seed & _LO, (seed >> 32) & _LO
    for _ in range(10):
        # int64 products of two 32-bit values wrap modulo 2**64; the bits are the unsigned ones
        p0, p1 = c0 * _M0, c2 * _M1
        n0 = ((p1 >> 32) & _LO) ^ c1 ^ k0
        n2 = ((p0 >> 32) & _LO) ^ c3 ^ k1
        c1, c3, c0, c2 = p1 & _LO, p0 & _LO, n0, n2
        k0, k1 = (k0 + _W0) & _LO, (k1 + _W1) & _LO
    return [c0, c1, c2, c3]


def philox_words(seed: int, offset: int, shape, device, packed: bool = False) -> list[torch.Tensor]:
    """Random words of every element of ``shape`` (int64 tensors holding unsigned 32-bit values):
    words 0 and 1 of element ``i``'s own block (the fp64 draws), or (``packed``) the one word
    ``i % 4`` of block ``i // 4``: four elements share a block, as the kernels' fp32 draws do
    (one Philox evaluation per four elements)."""
    n = 1
    for s in shape:
        n *= s
    index = torch.arange(n, dtype=torch.int64, device=device)
    if not packed:
        c0, c1, _, _ = _philox_block(seed, offset, index)
        return [c0.view(shape), c1.view(shape)]
    words = _philox_block(seed, offset, index >> 2)
    lane = index & 3
    w = torch.where(lane == 0, words[0], torch.where(lane == 1, words[1], torch.where(lane == 2, words[2], words[3])))
    return [w.view(shape)]


def philox_uniform(seed: int, offset: int, shape, device, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Uniform numbers in [0, 1) as the kernels draw them: fp32 (24 bits) or fp64 (53 bits)."""
    if offset < 0:
        raise RuntimeError("graphfuser: a fusion group's fallback drew random numbers while a CUDA graph was "
                           "captured (only its kernel reads the graph's random base)")
    if dtype == torch.float64:
        w0, w1 = philox_words(seed, offset, shape, device)
        bits = ((w0 << 21) | (w1 >> 11))                  # 53 bits, non-negative in int64
        return bits.to(torch.float64) * 2.0 ** -53
    (w,) = philox_words(seed, offset, shape, device, packed=True)
    return (w >> 8).to(torch.float32) * 2.0 ** -24
