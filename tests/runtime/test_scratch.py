"""The scratch buffers of split reductions (runtime/scratch.py), on CPU tensors: one pair per
(stream, barriers), reused while large enough, grown by doubling, counters zero when handed out
(once for single-pass kernels, before every launch for barrier kernels), per-call buffers while
a capture is under way."""
from __future__ import annotations

import torch

from graphfuser.runtime import scratch
from graphfuser.runtime.scratch import SplitScratch


def _counters(s: SplitScratch, stream: int, barriers: bool) -> torch.Tensor:
    return s._buffers[(stream, barriers)][3]


def test_buffers_are_reused_per_stream_and_grown_by_doubling(monkeypatch):
    monkeypatch.setattr(scratch, "_memset_d32", lambda: None)
    s = SplitScratch(torch.device("cpu"))
    w1, c1, keep = s.get(7, 100, 10, False)
    assert keep == () and s.get(7, 256, 256, False)[:2] == (w1, c1)        # reused while it fits
    w2, c2, _ = s.get(8, 100, 10, False)
    assert (w2, c2) != (w1, c1)                                           # another stream: its own
    w3, _, _ = s.get(7, 300, 10, False)
    assert w3 != w1 and s._buffers[(7, False)][2] == 512                  # doubled past the need
    assert s.get(7, 5000, 10, False) and s._buffers[(7, False)][2] == 5000
    assert s._buffers[(7, False)][5] == 256


def test_counters_are_zero_when_handed_out(monkeypatch):
    monkeypatch.setattr(scratch, "_memset_d32", lambda: None)
    s = SplitScratch(torch.device("cpu"))
    s.get(0, 8, 8, True)
    _counters(s, 0, True).fill_(5)            # a barrier kernel's counters only grow
    s.get(0, 8, 8, True)
    assert not _counters(s, 0, True)[:8].any()
    s.get(0, 8, 8, False)
    assert not _counters(s, 0, False).any()   # fresh single-pass counters start at zero
    assert _counters(s, 0, False).data_ptr() != _counters(s, 0, True).data_ptr()


def test_capture_gets_buffers_of_its_own(monkeypatch):
    s = SplitScratch(torch.device("cpu"))
    cached = s.get(0, 8, 8, False)[:2]
    s._capturing = lambda: True
    w, c, keep = s.get(0, 8, 8, False)
    assert len(keep) == 2 and (w, c) != cached and keep[0].numel() == 8 and not keep[1].any()
    assert s._buffers[(0, False)][1] == cached[0]                 # the cached pair is left as it was


def test_a_capture_takes_its_counters_from_one_block(monkeypatch):
    """Launches captured into one graph get slices of one zeroed block (one fill, replayed with
    the graph), each its own; another capture a block of its own; a launch needing more than a
    block, a block of its size."""
    monkeypatch.setattr(scratch, "GRAPH_COUNTERS", 64)
    s = SplitScratch(torch.device("cpu"))
    fills = []
    real_zeros = torch.zeros
    monkeypatch.setattr(scratch.torch, "zeros", lambda *a, **k: fills.append(a) or real_zeros(*a, **k))
    s._capturing = lambda: True
    s._capture_id = lambda stream: 11
    _, c1, k1 = s.get(0, 8, 8, False)
    _, c2, k2 = s.get(0, 8, 16, True)
    assert k1[1] is k2[1] and c2 == c1 + 8 * 4 and len(fills) == 1 and not k1[1].any()
    assert s.get(0, 8, 0, False)[1] == 0 and len(fills) == 1   # no counters: no block
    _, c3, k3 = s.get(0, 8, 48, False)              # 8 + 16 + 48 > 64: a new block
    assert k3[1] is not k1[1] and len(fills) == 2
    s._capture_id = lambda stream: 12                # another capture
    _, c4, k4 = s.get(0, 8, 4, False)
    assert k4[1] is not k3[1] and len(fills) == 3
    _, c5, k5 = s.get(0, 8, 100, False)             # more than a block
    assert k5[1].numel() == 100
    s._capture_id = lambda stream: None              # no id: a block per launch
    assert s.get(0, 8, 4, False)[2][1] is not s.get(0, 8, 4, False)[2][1]
