"""CUDA graph replay of steady no-grad calls (graphfuser/executor/cuda_graphs.py): every replayed
result equals eager's, across new input values, parameters updated in place or replaced, module
flags, torch's TF32 flags and random ops (which must not be replayed)."""
import copy
from typing import Optional

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import graphfuser
from graphfuser.config import config
from graphfuser.executor.cuda_graphs import STATS
from helpers import fusion_groups, out_of_memory_once

pytestmark = pytest.mark.cuda


def _net(dropout=True):
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
                         nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.Hardswish(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2 if dropout else 0.0),
                         nn.Linear(8, 5)).cuda()


def _close(a, b):
    # the nets' convolutions run channels-last (passes/conv_layout.py): cuDNN's TF32 algorithms
    # round differently by layout; a stale weight (x1.5) would be off by far more
    torch.testing.assert_close(a, b, rtol=2e-3, atol=2e-3)


def test_replay_matches_eager_on_new_values_and_outputs_do_not_alias():
    m = _net().eval()
    sf = graphfuser.script(m)
    before = STATS["replays"]
    outs = []
    with torch.no_grad():
        for i in range(10):
            x = torch.randn(4, 3, 16, 16, device="cuda")
            got = sf(x)
            _close(got, m(x))
            outs.append((got, m(x)))
    assert STATS["replays"] > before, "steady calls were not replayed"
    for got, want in outs:          # earlier results were not overwritten by later replays
        _close(got, want)



def test_replayed_outputs_are_handed_out_uncopied_and_never_overwritten():
    # a caller holding the last result while making the next call gets two alternating sets of
    # static outputs; a result (or a view of it) still held is never written by a replay
    m = _net(dropout=False).eval()
    sf = graphfuser.script(m)
    variants = STATS.get("variants", 0)
    with torch.no_grad():
        prev, ptrs = None, []
        for _ in range(12):
            x = torch.randn(4, 3, 16, 16, device="cuda")
            y = sf(x)
            want = m(x)
            _close(y, want)
            if prev is not None:
                _close(*prev)          # the result held during this call is intact
            prev = (y, want)
            ptrs.append(y.data_ptr())
        assert ptrs[-1] == ptrs[-3] != ptrs[-2] == ptrs[-4], "replays should alternate between two output sets"
        assert STATS.get("variants", 0) == variants + 1
        x = torch.randn(4, 3, 16, 16, device="cuda")
        kept, kept_want = sf(x)[1], m(x)[1]     # only a view of the result is kept
        for _ in range(4):
            x = torch.randn(4, 3, 16, 16, device="cuda")
            _close(sf(x), m(x))
        _close(kept, kept_want)
        grown = sf(x)
        grown.resize_(4096)             # a caller grows its result: its storage moves
        del grown
        for _ in range(4):
            x = torch.randn(4, 3, 16, 16, device="cuda")
            _close(sf(x), m(x))


class _WithAux(nn.Module):
    """googlenet / inception_v3 in eval: a named tuple whose aux outputs are None."""

    def __init__(self):
        super().__init__()
        self.net = _net(dropout=False)

    def forward(self, x):
        y = self.net(x)
        aux: Optional[torch.Tensor] = None
        return y, aux, y.size(0)


def test_outputs_that_are_not_tensors_are_replayed_as_captured():
    m = _WithAux().eval()
    sf = graphfuser.script(m)
    before = STATS["replays"]
    with torch.no_grad():
        for _ in range(8):
            x = torch.randn(4, 3, 16, 16, device="cuda")
            y, aux, n = sf(x)
            _close(y, m(x)[0])
            assert aux is None and n == 4
    assert STATS["replays"] > before, "steady calls were not replayed"


def test_parameters_updated_in_place_or_replaced_and_flags():
    m = _net(dropout=False).eval()     # nn.Dropout's p is a TorchScript constant: 0 from the start
    twin = copy.deepcopy(m)
    sf = graphfuser.script(m)
    x = torch.randn(2, 3, 8, 8, device="cuda")
    with torch.no_grad():
        for _ in range(6):
            _close(sf(x), twin(x))
        for a in (m, twin):                           # in place: same address
            a[0].weight.mul_(1.5)
        for _ in range(3):
            _close(sf(x), twin(x))
        w = torch.randn_like(m[3].weight)             # replaced: new address
        m[3].weight = nn.Parameter(w.clone())
        twin[3].weight = nn.Parameter(w.clone())
        for _ in range(4):
            _close(sf(x), twin(x))
        m.train(), twin.train()                        # batch statistics, running stats updated in place
        for _ in range(5):
            y = torch.randn(4, 3, 8, 8, device="cuda")
            _close(sf(y), twin(y))
        _close(m[1].running_mean, twin[1].running_mean)
        _close(m[4].running_var, twin[4].running_var)
        assert int(m[1].num_batches_tracked) == int(twin[1].num_batches_tracked)


def test_dropout_in_training_is_never_replayed():
    m = nn.Sequential(nn.Linear(64, 64), nn.Dropout(0.5)).cuda().train()
    sf = graphfuser.script(m)
    x = torch.randn(32, 64, device="cuda")
    with torch.no_grad():
        outs = [sf(x) for _ in range(8)]
    masks = [(o == 0) for o in outs[3:]]
    assert all(not torch.equal(masks[0], k) for k in masks[1:]), "dropout masks repeat"


def test_write_into_an_input_runs_the_host_program():
    def f(x):
        y = torch.relu(x) * 2.0
        x.add_(1.0)
        return y

    sf = graphfuser.script(f)
    with torch.no_grad():
        for _ in range(6):
            a = torch.randn(100, device="cuda")
            b = a.clone()
            got = sf(a)
            want = f(b)
            _close(got, want)
            _close(a, b)


def test_host_read_of_a_device_value_is_not_captured():
    def f(x):
        y = x * 2.0 + 1.0
        if bool(y.sum() > 0):
            return y.relu()
        return y.neg()

    sf = graphfuser.script(f)
    with torch.no_grad():
        for i in range(8):
            x = torch.randn(64, device="cuda") + (3.0 if i % 2 else -3.0)
            _close(sf(x), f(x))


def test_tf32_flag_change_captures_anew():
    m = nn.Sequential(nn.Linear(256, 256), nn.GELU()).cuda().eval()
    sf = graphfuser.script(m)
    x = torch.randn(64, 256, device="cuda")
    old = torch.backends.cuda.matmul.allow_tf32
    try:
        with torch.no_grad():
            for flag in (True, False, True, False):
                torch.backends.cuda.matmul.allow_tf32 = flag
                for _ in range(4):
                    got = sf(x)
                want = m(x)
                _close(got, want)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def test_knob_turns_replay_off():
    with config.override(disable=["cuda_graphs"]):
        m = _net().eval()
        sf = graphfuser.script(m)
        before = STATS["replays"]
        x = torch.randn(2, 3, 8, 8, device="cuda")
        with torch.no_grad():
            for _ in range(6):
                _close(sf(x), m(x))
        assert STATS["replays"] == before


def test_grad_mode_calls_are_not_replayed():
    m = _net().eval()
    sf = graphfuser.script(m)
    before = STATS["replays"]
    x = torch.randn(2, 3, 8, 8, device="cuda")
    for _ in range(6):
        out = sf(x)
        assert out.requires_grad
    assert STATS["replays"] == before


def test_backward_graphs_are_not_replayed():
    """A training step's backward graphs run without grad, but are never captured: replay would
    copy every input into static buffers and clone every output, a second pass over tensors that
    are fresh every step."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.GELU(), nn.Linear(32, 4)).cuda()
    sf = graphfuser.script(m)
    x = torch.randn(8, 16, device="cuda")
    before = dict(STATS)
    for _ in range(8):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = sf(x)
        out.float().square().mean().backward()
    assert STATS["captures"] == before["captures"] and STATS["replays"] == before["replays"], STATS
    from graphfuser.autodiff.function import live_groups

    groups = [dg for dg in live_groups() if dg.backward._fast is not None]
    assert groups and all(dg.backward._replay is None for dg in groups)


def _scale_relu(x):
    return (x * 2.0).relu() + 1.0


def _scale_relu_cumsum(x):
    """Two launches (the fused group and eager's cumsum): a call replay can be worth it for."""
    y = (x * 2.0).relu() + 1.0
    return y, torch.cumsum(y, 0)


def test_one_launch_functions_have_no_replayer():
    """A call that launches one fused kernel and nothing else keeps launching it: a replay would
    put its input copies and the graph launch in the place of that one launch, and computing the
    replay key alone cost about 1 us of the call's 10 on an H200 host."""
    sf = graphfuser.script(_scale_relu)
    with torch.no_grad():
        for _ in range(6):
            x = torch.randn(64, device="cuda")
            _close(sf(x), _scale_relu(x))
    assert fusion_groups(sf._optimized) and sf._replay is None
    two = graphfuser.script(_scale_relu_cumsum)
    with torch.no_grad():
        for _ in range(6):
            _close(two(x), _scale_relu_cumsum(x))
    assert two._replay is not None


def test_copy_bound_calls_are_not_captured():
    """Little host work over large tensors (a training step's backward program has this shape):
    a replay's input copies and output clones would cost more GPU time than the host time it
    saves, so the host program keeps running; small calls still replay."""
    sf = graphfuser.script(_scale_relu_cumsum)
    big = torch.randn(64 * 1024 * 1024, device="cuda")
    before = dict(STATS)
    with torch.no_grad():
        for _ in range(6):
            _close(sf(big), _scale_relu_cumsum(big))
    assert STATS["replays"] == before["replays"] and STATS["captures"] == before["captures"]
    assert STATS["copy_bound"] == before["copy_bound"] + 1
    small = torch.randn(64, device="cuda")
    with torch.no_grad():
        for _ in range(6):
            _close(sf(small), _scale_relu_cumsum(small))
    assert STATS["replays"] > before["replays"]


class _BiasCache(nn.Module):
    """LeViT's attention biases: a per-device cache in a dict attribute, filled on the first call
    and cleared when the module goes back to training."""
    cache: dict[str, torch.Tensor]

    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(4, 6))
        self.register_buffer("idx", torch.tensor([0, 2, 4, 5]), persistent=False)
        self.cache = {}

    def forward(self, x):
        if self.training:
            return x * self.bias[:, self.idx]
        key = str(x.device)
        if key not in self.cache:
            self.cache[key] = self.bias[:, self.idx]
        return x * self.cache[key]

    def train(self, mode=True):
        super().train(mode)
        if mode:
            self.cache = {}
        return self


def test_module_dict_cache_replays_and_follows_a_refilled_cache():
    m = _BiasCache().cuda().eval()
    sf = graphfuser.script(m)
    before = STATS["replays"]
    with torch.no_grad():
        for _ in range(6):
            x = torch.randn(3, 4, 4, device="cuda")
            _close(sf(x), x * m.bias[:, m.idx])
        assert STATS["replays"] > before, "the cached module was not replayed"
        assert list(m.cache) == ["cuda:0"]
        # a new cache (training, then eval with new weights): the replay must not read the old one
        m.train()
        m.bias.data = torch.randn(4, 6, device="cuda")
        m.eval()
        for _ in range(6):
            x = torch.randn(3, 4, 4, device="cuda")
            _close(sf(x), x * m.bias[:, m.idx])
        assert list(m.cache) == ["cuda:0"]


@pytest.mark.parametrize("host, kept", [(0.0, False), (10.0, True)])
def test_replays_slower_than_the_host_program_are_dropped(monkeypatch, host, kept):
    """The first replays of a signature are timed against the host program's time (here set to
    0 s or 10 s in place of the measured one): a graph that enqueues no faster is dropped and the
    host program runs from then on; one that does is kept without further timing."""
    from graphfuser.executor import cuda_graphs

    capture = cuda_graphs.GraphReplayer._capture
    monkeypatch.setattr(cuda_graphs.GraphReplayer, "_capture",
                        lambda self, fast, args, key, _host: capture(self, fast, args, key, host))
    sf = graphfuser.script(_scale_relu_cumsum)
    before = dict(STATS)
    with torch.no_grad():
        for _ in range(14):
            y = torch.randn(64, device="cuda")
            _close(sf(y), _scale_relu_cumsum(y))
    replays = STATS["replays"] - before["replays"]
    assert STATS["captures"] == before["captures"] + 1
    if kept:
        assert replays > cuda_graphs.REPLAY_TRIALS and STATS["slower_replays"] == before["slower_replays"]
    else:
        assert replays == cuda_graphs.REPLAY_TRIALS and STATS["slower_replays"] == before["slower_replays"] + 1
    assert sf._replay.off is not kept       # dropped: later calls skip the replayer's key


def test_out_of_memory_gives_the_captured_graphs_back():
    # the zoo's vit_h_14: its first bf16 call ran out of memory with 38 GiB held in captured
    # graphs' pools. The graphs are dropped and the call runs again.
    from graphfuser.executor import cuda_graphs

    m = _net().eval()
    sf = graphfuser.script(m)
    with torch.no_grad():
        x = torch.randn(4, 3, 16, 16, device="cuda")
        for _ in range(8):
            sf(x)
        before = dict(STATS)
        sf(x)
        assert STATS["replays"] > before["replays"], "steady calls were not replayed"
        # (no in-place ReLU: a call that may have written module state is not run again)
        other = graphfuser.script(nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.GELU(), nn.Conv2d(8, 8, 3),
                                                nn.Hardswish(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                                nn.Linear(8, 5)).cuda().eval())
        for _ in range(8):
            other(x)
        calls = out_of_memory_once(other)
        want = other._module(x)
        _close(other(x), want)
        assert len(calls) >= 2 and other._torchscript is None     # ran again, never through TorchScript
        assert not any(r.entries for r in cuda_graphs._LIVE)        # every graph given back
        replays = STATS["replays"]
        _close(sf(x), m(x))
        assert STATS["replays"] == replays                           # and not captured again


def test_autocast_weight_casts_are_captured_not_read_from_the_cache():
    """Under autocast, the capture runs with autocast's cast cache off: the warm-up run in the
    same autocast region had filled it, the capture then read the cached bf16 copy of each weight
    (no cast in the graph), and every replay reused that copy, stale once the weight changed."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 8)).cuda().eval()
    twin = copy.deepcopy(m)
    sf = graphfuser.script(m)
    x = torch.randn(32, 64, device="cuda")
    before = STATS["replays"]
    with torch.no_grad():
        for _ in range(10):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                out, ref = sf(x), twin(x)
            torch.testing.assert_close(out, ref, rtol=2e-2, atol=2e-2)
            for a in (m, twin):
                a[0].weight.mul_(1.25)               # (an optimizer step between evaluations)
                a[2].weight.mul_(0.9)
    assert STATS["replays"] > before, STATS


def test_backend_graphs_update_running_stats_in_place_when_replayed():
    """The torch.compile backend's graph takes the module's buffers as arguments: batch norm in
    training under no_grad writes them (running stats, num_batches_tracked += 1); a replay writes
    the module's own buffers, as the host program does, and the capture's warm-up call leaves no
    extra update behind."""
    from graphfuser.frontend.dynamo import graphfuser_backend

    m = _net(dropout=False).train()
    twin = copy.deepcopy(m)
    torch._dynamo.reset()
    f = torch.compile(m, backend=graphfuser_backend)
    before = STATS["replays"]
    with torch.no_grad():
        for _ in range(8):
            y = torch.randn(4, 3, 8, 8, device="cuda")
            _close(f(y), twin(y))
    assert STATS["replays"] > before, STATS
    for a, b in zip(m.buffers(), twin.buffers()):
        _close(a.float(), b.float())
    assert int(m[1].num_batches_tracked) == int(twin[1].num_batches_tracked) == 8


def test_padded_gemm_outputs_replay_as_padded_views_and_their_copies_keep_the_padding():
    # through torch.compile a misaligned head's logits leave as a view of the padded GEMM output
    # (passes/gemm_pad.py); replay hands that view out, and the copies made for a caller that
    # keeps every result keep its strides
    from graphfuser.frontend.dynamo import registered_backend

    torch.manual_seed(0)
    torch._dynamo.reset()
    m = nn.Sequential(nn.LayerNorm(256), nn.Linear(256, 4099, bias=False)).cuda().eval()
    f = torch.compile(m, backend=registered_backend())
    before = STATS["replays"]
    kept = []
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        for i in range(12):
            x = torch.randn(4, 64, 256, device="cuda")
            out = f(x)
            ref = m(x)
            torch.testing.assert_close(out, ref, rtol=2e-2, atol=2e-2)
            if i >= 4:      # (profiling calls run the program as captured)
                assert out.stride() == (64 * 4104, 4104, 1), (i, out.stride())   # 4099 bf16 columns padded to 4104
            if i >= 6:
                kept.append((out, ref))       # held results: the signature turns to copies
    assert STATS["replays"] > before, dict(STATS)
    for out, ref in kept:
        torch.testing.assert_close(out, ref, rtol=2e-2, atol=2e-2)
