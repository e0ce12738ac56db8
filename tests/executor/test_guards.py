"""Guards: hit, miss, re-specialization, the specialization limit, guard mode, what is checked."""
import logging
import re
import warnings

import pytest
import torch

import graphfuser
from graphfuser.config import config
from graphfuser.executor.guards import guard_source
from graphfuser.ir import TensorType
from helpers import fallback_counter, fusion_groups


def f(x, y):
    return (x + y).relu() * 2.0


def g(x):
    return (x * 2.0).sigmoid() + 1.0


def optimized(fn, *inputs):
    """Script ``fn``, run it through profiling on ``inputs``; returns (sf, fallback counter)."""
    sf = graphfuser.script(fn)
    for _ in range(config.profiling_runs):
        sf(*inputs)
    assert sf._optimized is not None and fusion_groups(sf._optimized)
    return sf, fallback_counter(sf)


def test_guard_hit_runs_the_fused_path():
    x, y = torch.rand(4, 8), torch.rand(4, 8)
    sf, counts = optimized(f, x, y)
    for _ in range(3):
        torch.testing.assert_close(sf(x, y), f(x, y))
    assert counts["fallback"] == 0
    assert len(fusion_groups(graphfuser.last_executed_optimized_graph())) == 1


def test_guard_miss_runs_the_fallback(caplog):
    caplog.set_level(logging.INFO, logger="graphfuser")
    x, y = torch.rand(4, 8), torch.rand(4, 8)
    sf, counts = optimized(f, x, y)
    xd, yd = x.double(), y.double()
    with config.override(log_level=">guard"):
        out = sf(xd, yd)
    torch.testing.assert_close(out, f(xd, yd))
    assert out.dtype == torch.float64
    assert counts["fallback"] == 1
    assert "guard miss on prim::CpuFusionGroup" in caplog.text


def test_repeated_signature_gets_its_own_specialization():
    x, y = torch.rand(4, 8), torch.rand(4, 8)
    sf, counts = optimized(f, x, y)
    xt = torch.rand(8, 4).t()
    for _ in range(2):
        torch.testing.assert_close(sf(xt, y), f(xt, y))
    assert counts["fallback"] == 2
    graph = graphfuser.last_executed_optimized_graph()
    assert len(fusion_groups(graph)) == 2
    text = str(graph)
    assert "prim::CpuFusionGroup_0" in text and "prim::CpuFusionGroup_1" in text
    assert "strides=[1, 4]" in text
    # both signatures now take a fused path
    for _ in range(3):
        torch.testing.assert_close(sf(xt, y), f(xt, y))
        torch.testing.assert_close(sf(x, y), f(x, y))
    assert counts["fallback"] == 2


def test_signature_seen_once_is_not_specialized():
    x, y = torch.rand(4, 8), torch.rand(4, 8)
    sf, counts = optimized(f, x, y)
    sf(x.double(), y.double())
    sf(x, y)
    assert len(fusion_groups(graphfuser.last_executed_optimized_graph())) == 1


def test_max_specializations_limit_warns_once_then_stays_on_fallback():
    config.set(max_specializations=2)
    x, y = torch.rand(4, 8), torch.rand(4, 8)
    sf, counts = optimized(f, x, y)
    xd, yd = x.double(), y.double()
    sf(xd, yd)
    sf(xd, yd)                                       # second specialization (the limit)
    assert len(fusion_groups(graphfuser.last_executed_optimized_graph())) == 2
    xh, yh = x.half(), y.half()
    sf(xh, yh)
    with pytest.warns(RuntimeWarning, match="max_specializations=2"):
        sf(xh, yh)
    with warnings.catch_warnings():
        warnings.simplefilter("error")               # no second warning
        for _ in range(4):
            torch.testing.assert_close(sf(xh, yh), f(xh, yh))
            torch.testing.assert_close(sf(x.bfloat16(), y.bfloat16()), f(x.bfloat16(), y.bfloat16()))
    assert len(fusion_groups(graphfuser.last_executed_optimized_graph())) == 2
    fallbacks = counts["fallback"]
    torch.testing.assert_close(sf(xd, yd), f(xd, yd))  # the specializations made still run fused
    torch.testing.assert_close(sf(x, y), f(x, y))
    assert counts["fallback"] == fallbacks


def test_max_specializations_one_means_no_respecialization():
    config.set(max_specializations=1)
    x, y = torch.rand(4, 8), torch.rand(4, 8)
    sf, counts = optimized(f, x, y)
    xd, yd = x.double(), y.double()
    sf(xd, yd)
    with pytest.warns(RuntimeWarning, match="reached max_specializations=1"):
        sf(xd, yd)
    for _ in range(3):
        torch.testing.assert_close(sf(xd, yd), f(xd, yd))
    assert len(fusion_groups(graphfuser.last_executed_optimized_graph())) == 1
    assert counts["fallback"] == 5


def test_guard_mode_off():
    assert graphfuser.set_guard_mode(False) is True
    x = torch.rand(4, 8)
    sf, counts = optimized(g, x)
    with torch.no_grad():
        xr = torch.rand(4, 8, requires_grad=True)   # would miss the requires_grad check
        torch.testing.assert_close(sf(xr), g(xr))
    assert counts["fallback"] == 0
    assert len(fusion_groups(graphfuser.last_executed_optimized_graph())) == 1


def test_guard_mode_on_misses_the_same_call():
    x = torch.rand(4, 8)
    sf, counts = optimized(g, x)
    xr = torch.rand(4, 8, requires_grad=True)
    with torch.no_grad():       # requires_grad counts under the grad mode only: a hit
        torch.testing.assert_close(sf(xr), g(xr))
    assert counts["fallback"] == 0
    torch.testing.assert_close(sf(xr), g(xr))        # under grad: the plain group misses
    assert counts["fallback"] == 1


BASE = lambda: torch.rand(4, 8)  # noqa: E731

MISSES = {
    "dtype": lambda: torch.rand(4, 8, dtype=torch.float64),
    "dtype_half": lambda: torch.rand(4, 8).half(),
    "rank": lambda: torch.rand(2, 4, 8),
    "broadcast_dim": lambda: torch.rand(1, 8),
    "stride_order": lambda: torch.rand(8, 4).t(),
    "contiguity": lambda: torch.rand(4, 16)[:, ::2],
}


@pytest.mark.parametrize("name", list(MISSES))
def test_guard_checks(name):
    sf, counts = optimized(g, BASE())
    x = MISSES[name]()
    torch.testing.assert_close(sf(x), g(x))
    assert counts["fallback"] == 1, name


def test_guard_checks_device():
    sf, counts = optimized(g, BASE())
    x = torch.rand(4, 8, device="meta")
    out = sf(x)
    assert out.device.type == "meta" and out.shape == (4, 8)
    assert counts["fallback"] == 1


def test_guard_checks_requires_grad_under_grad_mode():
    sf, counts = optimized(g, BASE())
    x = torch.rand(4, 8, requires_grad=True)
    out = sf(x)
    torch.testing.assert_close(out, g(x))
    out.sum().backward()                              # the fallback kept autograd
    assert x.grad is not None
    assert counts["fallback"] == 1


def test_grad_mode_misses_do_not_respecialize():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(8))

        def forward(self, x):
            return (x * self.w).tanh() + 1.0

    m = M()
    sm = graphfuser.script(m)
    x = torch.randn(4, 8)
    for _ in range(6):
        out = sm(x)
        torch.testing.assert_close(out, m(x))
        assert out.requires_grad
    # only the profiled specialization: a second one would never pass its guard either
    assert len(fusion_groups(graphfuser.last_executed_optimized_graph())) == 1
    out.sum().backward()
    assert m.w.grad is not None
    with torch.no_grad():                               # inference: the fused path runs
        counts = fallback_counter(sm)
        torch.testing.assert_close(sm(x), m(x))
        assert counts["fallback"] == 0


def test_guard_never_checks_concrete_sizes():
    sf, counts = optimized(g, torch.rand(4, 8))
    for shape in [(16, 8), (3, 5), (4, 100), (2, 2)]:
        x = torch.rand(*shape)
        torch.testing.assert_close(sf(x), g(x))
    assert counts["fallback"] == 0
    assert len(fusion_groups(graphfuser.last_executed_optimized_graph())) == 1


def test_new_batch_size_with_broadcast_hits_the_guard():
    sf, counts = optimized(f, torch.rand(4, 1, 8), torch.rand(4, 6, 8))
    for b in (2, 7, 32):
        x, y = torch.rand(b, 1, 8), torch.rand(b, 6, 8)
        torch.testing.assert_close(sf(x, y), f(x, y))
    assert counts["fallback"] == 0
    x, y = torch.rand(4, 6, 8), torch.rand(4, 6, 8)    # dim 1 no longer broadcast: miss
    torch.testing.assert_close(sf(x, y), f(x, y))
    assert counts["fallback"] == 1


def test_broadcast_mismatch_raises_like_eager():
    sf, counts = optimized(f, torch.rand(4, 8), torch.rand(4, 8))
    x, y = torch.rand(4, 8), torch.rand(5, 8)
    with pytest.raises(RuntimeError) as eager:
        f(x, y)
    with pytest.raises(RuntimeError) as ours:
        sf(x, y)
    assert str(ours.value) == str(eager.value)


@pytest.mark.parametrize("t", [torch.rand(4, 8), torch.rand(4, 1, 8), torch.rand(8, 6, 4).permute(2, 1, 0),
                               torch.rand(4, 6, 16)[:, :, ::2], torch.rand(4, 1).expand(4, 8),
                               torch.rand(2, 3, 4, 5).to(memory_format=torch.channels_last)],
                         ids=["dense", "broadcast", "permuted", "sliced", "expanded", "channels_last"])
def test_guard_source_has_no_concrete_sizes(t):
    ty = TensorType.of(t)
    src, _ = guard_source([ty], ty.rank)
    for m in re.finditer(r"s\d+\[\d+\] (==|!=) (\d+)", src):
        assert m.group(2) == "1", src
    assert f"len(s0 := x0.shape) == {ty.rank}" in src and "dtype is _dt0" in src and "is_cpu" in src
    assert "requires_grad" in src
    other = TensorType.of(torch.rand(*[s * 3 if s != 1 else 1 for s in t.shape]))
    if ty.stride_order == other.stride_order and all(ty.contiguity) and all(other.contiguity):
        assert guard_source([other], other.rank)[0] == src


def test_respecialization_passes_the_partition_structural_checks(caplog):
    # profiled with size-1 reduced dims both sums fit one kernel; with [5, 8] and [8, 3] they
    # reduce different axes: the new signature gets no specialization (and no compile failure)
    def k(a, b):
        return (a.sum(0) + b.sum(1)) * 2.0

    caplog.set_level(logging.INFO, logger="graphfuser")
    with config.override(single_node_mode=True, disable=["fallback"]):
        sf, counts = optimized(k, torch.rand(1, 8), torch.rand(8, 1))
        with config.override(log_level=">guard"):
            for _ in range(4):
                a, b = torch.rand(5, 8), torch.rand(8, 3)
                torch.testing.assert_close(sf(a, b), k(a, b))
    assert "no specialization for new signature" in caplog.text
    assert "different axes" in caplog.text
    assert len(fusion_groups(sf._optimized)) == 1


def _unrelated_pair(x, y):
    return x + 1.0, y - 1.0


def _broadcast_siblings(x, y):
    return (x * y).relu(), x.sigmoid()


def _row_scale(x, y):
    return (x.sum(1, keepdim=True) * y).tanh()


def _softmax_siblings(x, y):
    return x.softmax(-1) + y, x.relu() * 2.0


@pytest.mark.parametrize("horizontal", [False, True])
@pytest.mark.parametrize("fn,shapes", [
    (_unrelated_pair, ((2, 5), (3,))),
    (_broadcast_siblings, ((4, 1), (3, 4, 6))),
    (_row_scale, ((4, 6), (4, 6))),
    (_softmax_siblings, ((3, 7), (7,))),
])
def test_guard_hits_on_the_signature_it_was_built_from(fn, shapes, horizontal):
    # the invariant, over groups of several partition shapes: the profiled inputs pass the guard
    args = [torch.rand(*s) for s in shapes]
    scripted = graphfuser.script(fn)
    with config.override(horizontal_mode=horizontal, single_node_mode=True):
        for _ in range(config.profiling_runs):
            scripted(*args)
        assert fusion_groups(scripted._optimized)
        counts = fallback_counter(scripted)
        for _ in range(3):
            torch.testing.assert_close(scripted(*args), fn(*args))
    assert counts["fallback"] == 0, str(scripted._optimized)


def _aten_calls(fn, *args):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as p:
        fn(*args)
    return [e.name for e in p.events() if e.name.startswith("aten::")]


def test_parameters_under_no_grad_do_not_require_grad():
    """Eval under ``torch.no_grad()``: a BatchNorm's weight and bias have requires_grad set, but
    nothing needs a gradient, so the group runs as a plain fused kernel (as TorchScript's
    profiling records requires_grad under the grad mode), never as an eager fallback."""
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU()).eval()
    x = torch.randn(2, 3, 9, 9)
    sf = graphfuser.script(m)
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(sf(x), m(x))
        calls = _aten_calls(sf, x)
        out = sf(x)
    assert "aten::batch_norm" not in calls and "aten::relu" not in calls, calls
    assert not out.requires_grad
    # the same scripted module under grad: the output requires grad and matches eager
    for _ in range(3):
        y = sf(x)
    assert y.requires_grad
    torch.testing.assert_close(y, m(x))
    with torch.no_grad():
        torch.testing.assert_close(sf(x), m(x))


def test_profiled_scalar_checks_tell_signed_zeros_and_bools_apart():
    """A kernel holding 0.0 must not take -0.0 (nor -0.0 take 0.0), and one holding 1 must not
    take True: each differs from the other in some op (1 / x, a bool's type promotion)."""
    import math

    from graphfuser.executor.guards import _value_check

    def passes(value, probe):
        ns: dict = {}
        return eval(_value_check(0, value, ns), dict(ns, y0=probe))

    assert passes(0.0, 0.0) and not passes(0.0, -0.0)
    assert passes(-0.0, -0.0) and not passes(-0.0, 0.0)
    assert passes(True, True) and not passes(True, 1)
    assert passes(1, 1) and not passes(1, True)
    assert passes(2.5, 2.5) and not passes(2.5, 2.0)
    assert passes(math.inf, math.inf) and not passes(math.inf, -math.inf)


def _bn_eval(x, m, v, w):
    return torch.nn.functional.batch_norm(x, m, v, w, None, False, 0.1, 0.1)


def test_a_strided_profile_misses_on_a_contiguous_input():
    """An input profiled strided in the default order (a sliced one) misses the guard when it
    comes contiguous. Eager may compute that call another way: its CPU batch norm takes its fast
    path, x * (invstd * w) + ..., where the general path's (x - mean) * invstd overflows first (a
    bf16 3e38 gave inf where eager gives 7.2e37: fuzz graph 397 of CPU seed 33917)."""
    torch.manual_seed(0)
    m, v, w = torch.randn(3).bfloat16(), torch.rand(3).bfloat16() + 0.01, (torch.rand(3) * 0.1).bfloat16()
    sliced = torch.randn(16, 6, 1).bfloat16()[:, ::2]
    sf, counts = optimized(_bn_eval, sliced, m, v, w)
    torch.testing.assert_close(sf(sliced, m, v, w), _bn_eval(sliced, m, v, w))
    assert counts["fallback"] == 0
    dense = torch.randn(16, 3, 1).bfloat16()
    dense[2, 1, 0] = 3e38
    out = sf(dense, m, v, w)
    assert counts["fallback"] == 1
    ref = _bn_eval(dense, m, v, w)
    assert bool(ref.isfinite().all()) and torch.equal(out, ref)
    assert "not x0.is_contiguous()" in guard_source([TensorType.of(sliced)], 3)[0]
