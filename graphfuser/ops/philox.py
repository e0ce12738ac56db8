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
"""
from __future__ import annotations

import torch

_M0, _M1 = 0xD2511F53, 0xCD9E8D57
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_LO = 0xFFFFFFFF


def philox_state(x: torch.Tensor, n: int) -> tuple[int, int]:
    """(seed, offset) for a random op drawing ``n`` values on ``x``'s device; advances the
    device's default generator past them."""
    if x.device.type == "cuda":
        gen = torch.cuda.default_generators[x.device.index if x.device.index is not None
                                            else torch.cuda.current_device()]
        offset = gen.get_offset()
        gen.set_offset(offset + (n + 3) // 4 * 4)
        seed = gen.initial_seed()            # unsigned 64 bits: passed as the int64 of its bits
        return seed - 2 ** 64 if seed >= 2 ** 63 else seed, offset
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
    if dtype == torch.float64:
        w0, w1 = philox_words(seed, offset, shape, device)
        bits = ((w0 << 21) | (w1 >> 11))                  # 53 bits, non-negative in int64
        return bits.to(torch.float64) * 2.0 ** -53
    (w,) = philox_words(seed, offset, shape, device, packed=True)
    return (w >> 8).to(torch.float32) * 2.0 ** -24
