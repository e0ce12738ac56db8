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
