"""A graph's kernels compile on ``compile_threads`` threads when it is optimized
(executor._prebuild): the same runners and results as one after another, identical groups built
once, and the knob / dumps turn it off."""
import threading

import pytest
import torch

import graphfuser
from graphfuser.config import config
from graphfuser.executor import compiled, fusion


def blocks(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    # pointwise chains with matmuls between (groups the partition cannot merge): the first three
    # identical (one kernel for them), the last another
    a = torch.relu(x * 2.0 + 1.0) @ y
    b = torch.relu(a * 2.0 + 1.0) @ y
    c = torch.relu(b * 2.0 + 1.0) @ y
    return torch.tanh(c) + c * c


@pytest.mark.parametrize("threads", [1, 3])
def test_parallel_builds_match_sequential(threads, monkeypatch):
    seen: set = set()
    build = compiled._compile_group

    def recording(*a, **k):
        seen.add(threading.current_thread().name.startswith("graphfuser-compile"))
        return build(*a, **k)

    monkeypatch.setattr(compiled, "_compile_group", recording)
    compiled._MEMORY.clear()
    x, y = torch.randn(16, 16), torch.randn(16, 16)
    with config.override(compile_threads=threads):
        s = graphfuser.script(blocks)
        for _ in range(3):
            out = s(x, y)
    torch.testing.assert_close(out, blocks(x, y))
    assert seen == ({True} if threads > 1 else {False})


def test_identical_groups_build_once(monkeypatch):
    compiled._MEMORY.clear()
    before = compiled.STATS["builds"]
    x, y = torch.randn(16, 16), torch.randn(16, 16)
    with config.override(compile_threads=4):
        s = graphfuser.script(blocks)
        for _ in range(3):
            s(x, y)
    g = graphfuser.last_executed_optimized_graph()
    groups = [n for n in g.all_nodes() if n.kind.endswith("FusionGroup")]
    keys = {compiled.canonical_key(n.subgraph, "cpu") for n in groups}
    assert len(groups) > len(keys) >= 2
    assert compiled.STATS["builds"] - before == len(keys)


def test_threads_knob():
    assert fusion.compile_threads(1) == 1
    with config.override(compile_threads=1):
        assert fusion.compile_threads(10) == 1
    with config.override(compile_threads=4):
        assert fusion.compile_threads(10) == 4 and fusion.compile_threads(3) == 3
    with config.override(compile_threads=4, dump=["fusion_ir"]):
        assert fusion.compile_threads(10) == 1          # dumps keep the graph's order


def test_autograd_threading_is_set_on_the_calling_thread(monkeypatch):
    """Backward passes on the calling thread (autodiff/function.py) is a per-thread autograd
    setting: a compile thread defers it to the thread that called the graph."""
    from graphfuser.autodiff import function

    monkeypatch.setattr(function, "_calling_thread", [False])
    monkeypatch.setattr(function, "_deferred", [False])
    before = torch.autograd.is_multithreading_enabled()
    t = threading.Thread(target=function._backward_on_the_calling_thread,
                         name=f"{function.COMPILE_THREAD_PREFIX}_0")
    t.start()
    t.join()
    assert function._deferred[0] and not function._calling_thread[0]
    assert torch.autograd.is_multithreading_enabled() == before
    try:
        function.settle_calling_thread()
        assert function._calling_thread[0] and not torch.autograd.is_multithreading_enabled()
    finally:
        torch._C._set_multithreading_enabled(before)


def _groups_of(fn, *args):
    s = graphfuser.script(fn)
    for _ in range(3):
        s(*args)
    g = graphfuser.last_executed_optimized_graph()
    return [n for n in g.all_nodes() if n.kind.endswith("FusionGroup")]


def layers(x, w, b):
    # three identical layer-norm layers with pointwise groups between: reductions and pointwise
    # groups, each kind of group repeated
    d = w.diag()
    x = torch.relu(torch.tanh(torch.nn.functional.layer_norm(x, [24], w, b)) @ d * 2.0 + 1.0) @ d
    x = torch.relu(torch.tanh(torch.nn.functional.layer_norm(x, [24], w, b)) @ d * 2.0 + 1.0) @ d
    x = torch.relu(torch.tanh(torch.nn.functional.layer_norm(x, [24], w, b)) @ d * 2.0 + 1.0) @ d
    return x


def test_build_order_puts_one_group_of_each_kernel_first_reductions_leading():
    """The pool starts one build per kernel before any group that waits for another's kernel,
    reductions (the longest builds) first; every group is built once, in any case."""
    from graphfuser.ops.axes import needs_axes

    w = torch.randn(24)
    groups = _groups_of(layers, torch.randn(8, 24), w, torch.randn(24))
    keys = [compiled.canonical_key(n.subgraph, "cpu") for n in groups]
    assert len(set(keys)) < len(groups), "no repeated group"
    order = fusion.build_order(groups)
    assert sorted(order) == list(range(len(groups)))
    distinct = len(set(keys))
    firsts, waiting = order[:distinct], order[distinct:]
    assert len({keys[i] for i in firsts}) == distinct                  # one of each kernel first
    assert all(keys[i] in {keys[j] for j in firsts} for i in waiting)  # then the ones that wait
    red = [needs_axes(groups[i].subgraph.block.nodes) for i in firsts]
    assert any(red) and not all(red)
    assert red == sorted(red, reverse=True)                            # reductions lead


def test_parallel_build_returns_runners_in_the_groups_order(monkeypatch):
    """Built out of order, each runner still comes back at its group's place."""
    w = torch.randn(24)
    groups = _groups_of(layers, torch.randn(8, 24), w, torch.randn(24))
    monkeypatch.setattr(fusion, "make_group_runner", lambda g: ("runner", g))
    monkeypatch.setattr(fusion, "_first_of_each_kernel", lambda gs, seen: (list(reversed(range(len(gs)))), []))
    with config.override(compile_threads=4):
        runners = fusion.build_runners(groups)
    assert runners == [("runner", g) for g in groups]


_GC_BRACKET = """
import gc
from graphfuser.executor.start_up import gc_paused

start = gc.get_freeze_count()
if start:           # an import froze objects (not graphfuser: nothing of it runs before this)
    gc.unfreeze()
with gc_paused():
    frozen = gc.get_freeze_count()
    assert frozen > 0 and gc.isenabled()
    with gc_paused():
        assert gc.get_freeze_count() == frozen
    assert gc.get_freeze_count() == frozen
    cycle = []                         # a new object's cycle is still collected
    cycle.append(cycle)
    del cycle
    assert gc.collect() >= 1
assert gc.get_freeze_count() == 0 and gc.isenabled()
print("ok", start)
"""


def test_gc_bracket_freezes_the_old_objects_and_gives_them_back():
    """Profiling and optimizing run with the process's objects frozen (collections walk the new
    ones); nested brackets share one freeze; the last exit unfreezes. In a fresh process: this
    one may hold objects another library froze (then the bracket switches the collector off,
    the next test)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _GC_BRACKET], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.startswith("ok"), out.stderr[-2000:]


def test_gc_bracket_leaves_a_freeze_of_the_process_alone():
    import gc

    from graphfuser.executor.start_up import gc_paused

    before = gc.get_freeze_count()
    gc.freeze()
    try:
        mine = gc.get_freeze_count()
        assert mine > 0
        with gc_paused():
            assert not gc.isenabled() and gc.get_freeze_count() == mine
        assert gc.isenabled() and gc.get_freeze_count() == mine
    finally:
        if not before:          # (a freeze this process had before stays)
            gc.unfreeze()


def test_a_failed_build_raises_from_the_stream_and_stops_the_rest(monkeypatch):
    """A build that raises (fallback disabled) raises from ``finish``, in the groups' order; the
    builds not started yet are cancelled and the pool is shut down."""
    w = torch.randn(24)
    groups = _groups_of(layers, torch.randn(8, 24), w, torch.randn(24))
    bad = groups[0]

    def make(g):
        if g is bad:
            raise RuntimeError("no kernel for this group")
        return ("runner", g)

    monkeypatch.setattr(fusion, "make_group_runner", make)
    with config.override(compile_threads=2):
        stream = fusion.BuildStream()
        try:
            with stream:
                stream.add(groups[:2])
                stream.add(groups[2:])
                stream.finish()
        except RuntimeError as e:
            assert "no kernel for this group" in str(e)
        else:
            raise AssertionError("the failed build did not raise")
    assert stream._pool._shutdown
