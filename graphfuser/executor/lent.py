"""A CUDA graph's static buffers lent to callers without a copy, for as long as the caller gives
each back before the graph writes it again.

A replayed graph writes its outputs (and a training replay's backward its gradients) into the
same memory on every replay. Handing out copies keeps what a caller holds valid, but a copy per
call is GPU time: GPT-2's padded logits, a strided copy of 0.4 GB per training step (0.47 ms on an
H200), and its parameters' gradients, another 0.25 GB (0.28 ms). A training loop seldom keeps
them: ``loss = model(x, labels=y).loss`` drops the logits at once, and ``zero_grad()`` (which
sets ``.grad`` to None) drops the gradients before the next backward.

So each large buffer is lent: the caller gets an alias of the static tensor (``detach()``: the
same storage). Before the graph runs again, ``held`` counts the references to each lent buffer's
storage (``torch._C._storage_Use_Count``) against the count when nothing was lent: a storage no
caller references any more is simply written again. What the replayer does with a buffer still
held (the caller kept the tensor or a view of it, or autograd made it a parameter's ``.grad``)
is its own choice (cuda_graphs_train.py): never to write it while it is held.

A buffer is lent only where every reference to its storage is accounted for when lending starts
(its static tensor and this module's handle): otherwise, and for small buffers, it is handed out
as a copy. A caller that grows a lent tensor in place (``resize_``) moves the storage, and the
static tensor with it, away from the graph's memory: ``moved`` tells.
"""
from __future__ import annotations

from typing import Optional

import torch

_USE_COUNT = getattr(torch._C, "_storage_Use_Count", None)
LEND_BYTES = 1 << 16     # buffers smaller than this are copied (a launch either way; no bookkeeping)


class Lent:
    """The static tensors of one graph, some of them lent (see module doc). ``hand_out`` gives
    the caller's tensors (aliases where lent, copies elsewhere); ``held`` says which lent ones a
    caller still references."""

    __slots__ = ("tensors", "lend", "handles", "counts", "ptrs", "batched")

    def __init__(self, tensors: list[Optional[torch.Tensor]], batched: bool = False, lend: bool = True) -> None:
        self.tensors = list(tensors)
        # the copies of those not lent made by one ``_foreach_mul`` (a training step's small
        # gradients: biases and norm weights, dozens of them) rather than a launch each
        self.batched = batched
        self.lend = [lend and _USE_COUNT is not None and t is not None and t.untyped_storage().nbytes() >= LEND_BYTES
                     for t in tensors]
        self.handles: list = []         # per tensor: its storage's Python handle (lent ones), set by _start
        self.counts: list[int] = []     # the references to that storage when no caller holds it
        self.ptrs = [t.data_ptr() if t is not None else 0 for t in tensors]

    def _start(self) -> None:
        """Take the reference counts before anything is lent: a lent buffer's storage must be
        referenced by its static tensor and its handle only (a storage two static tensors
        share, or one something else holds, is handed out as copies)."""
        on: dict[int, int] = {}
        for t in self.tensors:
            if t is not None:
                p = t.untyped_storage().data_ptr()
                on[p] = on.get(p, 0) + 1
        self.handles = [t.untyped_storage() if lend else None for t, lend in zip(self.tensors, self.lend)]
        for i, h in enumerate(self.handles):
            if h is not None and (on[h.data_ptr()] != 1 or _USE_COUNT(h._cdata) != 2):
                self.lend[i], self.handles[i] = False, None
        self.counts = [_USE_COUNT(h._cdata) if h is not None else 0 for h in self.handles]

    def hand_out(self) -> list[Optional[torch.Tensor]]:
        """The caller's tensors: an alias of each lent buffer, a copy of each other one."""
        if not self.handles and any(self.lend):
            self._start()
        made = iter(self.copies_only())
        return [None if t is None else next(made).detach() if lend else next(made)
                for t, lend in zip(self.tensors, self.lend)]

    def copies_only(self) -> list[torch.Tensor]:
        """Per tensor (None left out): a copy of each buffer that is not lent, each lent one as it
        is (a replay timed before anything is lent pays for the copies a replay will make, and
        no more)."""
        kept = [t for t, lend in zip(self.tensors, self.lend) if t is not None and not lend]
        if self.batched and kept and all(t.is_floating_point() for t in kept):
            made = iter(torch._foreach_mul(kept, 1))
        else:
            made = iter([_copy_out(t) for t in kept])
        return [t if lend else next(made) for t, lend in zip(self.tensors, self.lend) if t is not None]

    def held(self) -> list[int]:
        """The lent buffers a caller still references (a tensor, a view, a ``.grad``)."""
        return [i for i, h in enumerate(self.handles) if h is not None and _USE_COUNT(h._cdata) > self.counts[i]]

    def holders(self, i: int) -> int:
        """How many references beyond the static tensor's the caller has to buffer ``i``."""
        return _USE_COUNT(self.handles[i]._cdata) - self.counts[i]

    def versions(self) -> list[int]:
        """The version counters of the lent buffers (a caller's in-place write to a lent tensor
        moves its buffer's)."""
        return [t._version for t, lend in zip(self.tensors, self.lend) if lend]

    def moved(self) -> bool:
        """A caller grew a lent tensor in place (``resize_``): the storage, and the static tensor
        with it, left the memory the graph writes."""
        return any(t is not None and t.data_ptr() != p for t, p in zip(self.tensors, self.ptrs))


def _dense(t: torch.Tensor) -> bool:
    return t.is_contiguous() or (t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last))


def clone_broadcast(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t`` with its strides: an expanded tensor's broadcast dims (stride 0, size > 1)
    stay expanded (the copy takes one element along each and expands back, moving no repeated
    bytes), and a padded one keeps its padding (``_copy_out``); ``clone`` would make either
    contiguous. A caller that compiled code for the strides it saw (Dynamo guards every tensor's
    strides) sees the same ones from a warm call as from a replay: GPT-2's padded logits, made
    contiguous by the warm calls, recompiled its loss function at the first replay (0.9 s of
    its training step's cold start on an H200). A view spanning more than twice its elements (a
    narrow slice of a wide tensor) is cloned compactly instead."""
    if t.numel() <= 1 or all(st != 0 or sz <= 1 for sz, st in zip(t.shape, t.stride())):
        return _copy_out(t) if _span(t) <= 2 * t.numel() else t.clone()
    one = t[tuple(slice(0, 1) if st == 0 and sz > 1 else slice(None) for sz, st in zip(t.shape, t.stride()))]
    return one.clone().expand(t.shape)


def _span(t: torch.Tensor) -> int:
    """Elements of the one run of memory ``t`` covers (a nonempty tensor)."""
    return 1 + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))


def _copy_out(t: torch.Tensor) -> torch.Tensor:
    """A copy of a replayed output with its strides (a padded GEMM's result keeps its padding:
    ``clone`` would make a non-dense tensor contiguous). A non-dense one is copied as the one run
    of memory it spans, padding and all: a copy between two padded layouts walks rows of odd
    width element by element (GPT-2's [8, 512, 50257] bf16 logits in rows of 50264: 0.47 ms on
    an H200), where a flat copy of the run is a vectorized one of about the same bytes."""
    if _dense(t) or t.numel() == 0:
        return t.clone()
    out = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
    span = _span(t)
    out.as_strided((span,), (1,), 0).copy_(t.as_strided((span,), (1,), t.storage_offset()))
    return out
