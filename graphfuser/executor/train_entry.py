"""A captured training signature (``cuda_graphs_train.py``): its two CUDA graphs and static
buffers (``_TrainEntry``), the random-number base each replay reserves (``_set_base``), how a
replayed step and the graphs alone are timed against the host program (``_replay_seconds``,
``_graphs_seconds``), and the roots its backward graph is captured from (``_backward_roots``:
a padded GEMM's result is differentiated from its padded base)."""
from __future__ import annotations

import time
import weakref
from typing import Optional

import torch

from ..ops.philox import reserve


class _TrainEntry:
    """One captured signature: its two graphs and their static tensors."""

    __slots__ = ("fwd", "bwd", "inputs", "outputs", "treedef", "diff", "grad_outs", "params", "host",
                 "trials", "best", "generation", "node", "fn", "rng", "draws", "seed", "eager_draws",
                 "wanted", "lent", "lent_grads", "held", "__weakref__")

    def __init__(self) -> None:
        self.generation = 0
        self.rng: Optional[torch.Tensor] = None     # {seed, base} the recorded random ops read
        self.draws, self.seed = 0, None             # offsets one call takes; the seed in rng
        self.eager_draws = False                    # eager's random ops recorded in the graphs
        self.node: Optional[weakref.ref] = None
        self.trials, self.best = 0, float("inf")
        self.wanted: list[bool] = []                # per output requiring grad: the backward graph takes its gradient
        self.held = 0                               # calls and backwards that found lent buffers held

    def busy(self) -> bool:
        """An earlier replay's node is alive and its backward has not run."""
        node = self.node() if self.node is not None else None
        return node is not None and not getattr(node, "ran", True)


def _set_base(entry: _TrainEntry) -> tuple[int, int]:
    """Reserve a call's offsets from the generator and write {seed, base} where the recorded
    random ops read them (stream-ordered fills: nothing on the host is read by the device later)."""
    assert entry.rng is not None
    seed, base = reserve(entry.rng.device.index, entry.draws)
    if seed != entry.seed:
        entry.rng[:1].fill_(seed)
        entry.seed = seed
    entry.rng[1:].fill_(base)
    return seed, base


def _replay_seconds(entry: _TrainEntry, args: tuple) -> float:
    """Wall time of a replayed step as ``_Replay`` runs it: the input copies, the forward graph,
    the output clones, the incoming gradients' copies, the backward graph and the gradients'
    copies (the second of two). Replay is kept only where it beats a step of the host program
    measured the same way: the copies cost GPU time (a ResNet bottleneck block at batch 32 moves
    four 51 MB tensors per step), and a capture's kernels need not run as fast as the host
    program's (on an H100 one captured bottleneck block once took 5.0 ms per replayed step
    against 2.1 ms run normally)."""
    for _ in range(2):
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.no_grad():         # (as in ``_Replay.forward``: the static inputs are leaves requiring grad)
            _replay_once(entry, args)
        torch.cuda.synchronize()
    return time.perf_counter() - start


def _graphs_seconds(entry: _TrainEntry) -> float:
    """The GPU time of a step's kernels (the two graphs back to back, no copies): what a step of
    the host program takes in a loop where its host time is shorter. A host program step is
    judged by the longer of the two, its host time (launching everything, measured during the
    warm-up) and this: timed with a synchronization after it, a step of an MLP block whose host
    time is 0.8 ms and kernels' 1.0 ms took 1.1 ms and lost to a replayed step (1.09 ms, copies
    included), which in a loop ran 10% slower than the host program (H100)."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    entry.fwd.replay()
    entry.bwd.replay()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def _replay_once(entry: _TrainEntry, args: tuple) -> None:
    for s, a in zip(entry.inputs, args):
        if s is not None:
            s.copy_(a)
    entry.fwd.replay()
    outs = entry.lent.copies_only()
    diff = [o for o, d in zip(outs, entry.diff) if d]
    for s, o in zip(entry.grad_outs, [o for o, w in zip(diff, entry.wanted) if w]):
        s.copy_(o)                    # (as an incoming gradient would be: its values do not matter)
    entry.bwd.replay()
    entry.lent_grads.copies_only()


def _sliced_base(o: torch.Tensor) -> Optional[torch.Tensor]:
    """The dense tensor ``o`` slices its last dimension from (``base[..., :n]``), where that base
    requires grad: a padded GEMM's result (passes/gemm_pad.py). None otherwise."""
    b = o._base
    if b is None or not b.requires_grad or b.grad_fn is None or type(o.grad_fn).__name__ != "SliceBackward0":
        return None
    if b.dim() != o.dim() or o.shape[:-1] != b.shape[:-1] or o.stride() != b.stride() \
            or o.storage_offset() != b.storage_offset() or not b.is_contiguous():
        return None
    return b


def _backward_roots(diff: list) -> tuple[list, list, list]:
    """(roots, their static gradients, where each incoming gradient is copied) for capturing the
    backward of the outputs ``diff``. An output sliced from a padded base is differentiated from
    its base: its incoming gradient is copied into the columns it owns of a zeroed gradient of
    the base's size (the padding stays zero), in place of the slice's backward in the graph,
    which filled a zero gradient of the base's size and copied the gradient into it on every
    replay (GPT-2's logits: 0.4 GB each way per training step)."""
    roots, feeds, into = [], [], []
    for o in diff:
        base = _sliced_base(o)
        if base is None:
            s = torch.empty_like(o)
            roots.append(o), feeds.append(s), into.append(s)
        else:
            s = torch.zeros_like(base)
            roots.append(base), feeds.append(s), into.append(s[..., :o.shape[-1]])
    return roots, feeds, into
