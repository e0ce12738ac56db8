"""The profiling executor: profiling runs, merged profiles, graph_for, the host program."""
import pytest
import torch

import graphfuser
from graphfuser.config import config
from graphfuser.ir import verify
from helpers import assert_in_order, fallback_counter, fusion_groups


def f(x, y):
    o = x + y
    o = o * 2.0
    return o.relu()


@pytest.mark.parametrize("runs", [1, 2, 3])
def test_profiling_runs_come_from_config(runs):
    config.set(profiling_runs=runs)
    sf = graphfuser.script(f)
    x, y = torch.rand(4, 8), torch.rand(4, 8)
    for _ in range(runs - 1):
        sf(x, y)
        assert sf._optimized is None
        assert "_P(" in sf.code                          # still the profiling program
    g = sf.graph_for(x, y)                               # call number `runs` optimizes
    assert fusion_groups(g)
    assert "_P(" not in sf.code


def test_profiling_runs_through_the_fuser_context():
    with graphfuser.fuser(profiling_runs=3):
        sf = graphfuser.script(f)
        x, y = torch.rand(4, 8), torch.rand(4, 8)
        sf(x, y)
        sf(x, y)
        assert sf._optimized is None
        sf(x, y)
        assert sf._optimized is not None


def test_profiles_merge_across_runs():
    sf = graphfuser.script(f)
    sf(torch.rand(4, 8), torch.rand(4, 8))
    g = sf.graph_for(torch.rand(7, 8), torch.rand(7, 8))
    group = fusion_groups(g)[0]
    assert [str(v.type) for v in group.subgraph.inputs] == [
        "Float(*, 8, strides=[8, 1], stride_order=[0, 1], contiguity=[1, 1], requires_grad=0, device=cpu)"] * 2
    assert str(g.inputs[0].type).startswith("Float(*, 8")
    counts = fallback_counter(sf)
    for b in (3, 100):
        x, y = torch.rand(b, 8), torch.rand(b, 8)
        torch.testing.assert_close(sf(x, y), f(x, y))
    assert counts["fallback"] == 0


def test_layout_change_during_profiling_is_not_fused():
    sf = graphfuser.script(f)
    sf(torch.rand(4, 8), torch.rand(4, 8))
    xt = torch.rand(8, 4).t()
    g = sf.graph_for(xt, torch.rand(4, 8))
    assert not fusion_groups(g)                   # the inputs' layout is unknown: nothing to guard
    verify(g)
    for _ in range(2):
        torch.testing.assert_close(sf(xt, torch.ones(4, 8)), f(xt, torch.ones(4, 8)))


def test_graph_for_and_last_executed_optimized_graph():
    sf = graphfuser.script(f)
    x, y = torch.rand(4, 8), torch.rand(4, 8)
    for _ in range(3):
        sf(x, y)
    g = sf.graph_for(x, y)
    assert graphfuser.last_executed_optimized_graph() is g
    text = str(g)
    assert_in_order(text, "prim::CpuFusionGuard[types=[Float(4, 8, strides=[8, 1]", "prim::If(",
                    "prim::CpuFusionGroup_0[cache_id=", "prim::FallbackGraph_1(",
                    "with prim::CpuFusionGroup_0 = graph(", "aten::add", "aten::mul", "aten::relu",
                    "with prim::FallbackGraph_1 = graph(")
    # the original graph is left as captured
    assert "FusionGroup" not in str(sf.graph)
    other = graphfuser.script(lambda_free)
    for _ in range(3):
        other(x)
    assert graphfuser.last_executed_optimized_graph() is other.graph_for(x)
    sf(x, y)
    assert graphfuser.last_executed_optimized_graph() is g


def lambda_free(x):
    return x.sin().cos()


def test_host_program_is_straight_line_python():
    sf = graphfuser.script(f)
    x, y = torch.rand(4, 8), torch.rand(4, 8)
    for _ in range(3):
        sf(x, y)
    code = sf.code
    assert code.startswith("def forward(")
    lines = code.strip().splitlines()
    assert len(lines) <= 10
    assert_in_order(code, "= _f", "if ", "= _f", "else:", "= _f", "return ")
    for word in ("for ", "while ", "kind", "node", "_P(", "getattr", "dict"):
        assert word not in code, word


def test_host_program_for_unfused_ops_calls_aten_directly():
    def h(x, w):
        return torch.mm(x, w).sum(1)

    sf = graphfuser.script(h)
    x, w = torch.rand(4, 8), torch.rand(8, 3)
    for _ in range(3):
        torch.testing.assert_close(sf(x, w), h(x, w))
    assert not fusion_groups(sf._optimized)
    assert_in_order(sf.code, "def forward(v0, v1):", "_op", "(v0, v1)", "_op", "return ")


def test_kwargs_and_defaults():
    def h(x, y, alpha: float = 2.0):
        return (x + y * alpha).relu()

    sf = graphfuser.script(h)
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    for _ in range(3):
        torch.testing.assert_close(sf(x, y), h(x, y))
        torch.testing.assert_close(sf(x, y=y, alpha=0.5), h(x, y, 0.5))
        torch.testing.assert_close(sf(x, y, 3.0), h(x, y, 3.0))


def test_multiple_outputs_and_tuples():
    def h(x, y):
        a = x * y
        return a.relu(), a.sigmoid(), x - y

    x, y = torch.randn(4, 8), torch.randn(4, 8)
    sf = graphfuser.script(h)
    for _ in range(3):
        out = sf(x, y)
        assert isinstance(out, tuple) and len(out) == 3
        torch.testing.assert_close(out, h(x, y))
    assert len(fusion_groups(sf._optimized)) == 1


def test_disabled_fusion_runs_unfused():
    graphfuser.set_enabled(False)
    sf = graphfuser.script(f)
    x, y = torch.rand(4, 8), torch.rand(4, 8)
    for _ in range(4):
        torch.testing.assert_close(sf(x, y), f(x, y))
    assert sf._optimized is None
    assert not fusion_groups(sf.graph_for(x, y))
    graphfuser.set_enabled(True)
    for _ in range(3):
        sf(x, y)
    assert fusion_groups(sf._optimized)


def test_threads_share_one_optimization():
    import threading

    sf = graphfuser.script(f)
    x, y = torch.rand(4, 8), torch.rand(4, 8)
    errors = []

    def work():
        try:
            for _ in range(20):
                torch.testing.assert_close(sf(x, y), f(x, y))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(fusion_groups(sf._optimized)) == 1


def test_host_program_of_a_graph_without_outputs():
    from graphfuser.executor.hostgen import build_program
    from helpers import parse

    g = parse("""graph(%x : Tensor):
  %1 : float = prim::Constant[value=0.5]()
  %2 : Tensor = aten::mul_(%x, %1)
  return ()""")
    x = torch.ones(3)
    assert build_program(g, tuple_return=True).fn(x) == ()
    assert build_program(g).fn(x) is None
    assert torch.equal(x, torch.full((3,), 0.25))
