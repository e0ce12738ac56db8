"""Profiled scalars: a reduction's dims / keepdim / dtype / correction / eps passed as arguments.

Profiling records the values of the non-tensor arguments of reduction and normalization rows.
A value that was the same on every profiling run becomes a constant of the fusion group, and the
guard in front of the group checks it (``values=[...]``); another value at run time takes the
eager fallback. A value that changed during profiling keeps the node unfused, with a reason.
"""
import logging
from typing import List, Optional

import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.config import config
from graphfuser.executor.guards import guard_source
from graphfuser.ir import TensorType, verify
from helpers import DEVICES, check, fallback_counter, fusion_groups, roundtrip


def _x(*shape, device="cpu", dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype=dtype, device=device)


def _kinds_in_groups(g) -> list:
    return [n.kind for grp in fusion_groups(g) for n in grp.subgraph.block.nodes]


def _guards(g) -> list:
    return [n for n in g.all_nodes() if n.kind.endswith("FusionGuard")]


def _optimized(fn, *args):
    sf = graphfuser.script(fn)
    for _ in range(config.profiling_runs):
        sf(*args)
    assert sf._optimized is not None
    return sf


# -- the functions under test ------------------------------------------------------------------
def sum_dim_keep(x, dim: int, keep: bool):
    return (x * 2).sum(dim, keep) + 1


def mean_dims_dtype(x, dims: List[int], dt: torch.dtype):
    return (x - 1.0).mean(dims, dtype=dt) * 3.0


def amax_two_dims(x, d0: int, d1: int, keep: bool):
    return (x * 2.0).amax([d0, d1], keep) - 1.0


def var_correction(x, dim: int, c: int, keep: bool):
    return (x + 1.0).var(dim, correction=c, keepdim=keep) * 2.0


def var_unbiased(x, dim: int, unbiased: bool):
    return (x * 1.5).var([dim], unbiased) + 1.0


def softmax_dim(x, dim: int):
    return torch.softmax(x * 2.0, dim) + 1.0


def softmax_dim_dtype(x, dim: int, dt: Optional[torch.dtype]):
    return torch.softmax(x * 2.0, dim, dtype=dt)


def log_softmax_dim(x, dim: int):
    return torch.log_softmax(x - 0.5, dim) * 2.0


def layer_norm_eps(x, w, b, eps: float):
    return F.layer_norm(x * 2.0, [x.size(-1)], w, b, eps) + 1.0


def computed_dim(x):
    d = x.dim() - 1
    return (x * 2.0).sum(d) + 1.0


def batch_norm_flags(x, rm, rv, training: bool, eps: float):
    return F.batch_norm(x * 2.0, rm, rv, None, None, training, 0.1, eps).relu()


CASES = {
    "sum_dim_keep": (sum_dim_keep, lambda d: (_x(4, 6, 8, device=d), -1, True), "aten::sum"),
    "sum_dim_nokeep": (sum_dim_keep, lambda d: (_x(4, 6, 8, device=d), 1, False), "aten::sum"),
    "mean_dims_dtype": (mean_dims_dtype, lambda d: (_x(4, 6, 8, device=d), [0, 2], torch.float64), "aten::mean"),
    "amax_two_dims": (amax_two_dims, lambda d: (_x(4, 6, 8, device=d), 0, -1, True), "aten::amax"),
    "var_correction": (var_correction, lambda d: (_x(4, 6, 8, device=d), -1, 0, False), "aten::var"),
    "var_correction_2": (var_correction, lambda d: (_x(4, 6, 8, device=d), 1, 2, True), "aten::var"),
    "var_unbiased": (var_unbiased, lambda d: (_x(4, 6, 8, device=d), 2, False), "aten::var"),
    "softmax_dim": (softmax_dim, lambda d: (_x(4, 6, 8, device=d), -1), "aten::softmax"),
    "softmax_dim_0": (softmax_dim, lambda d: (_x(4, 6, 8, device=d), 0), "aten::softmax"),
    "softmax_dtype": (softmax_dim_dtype, lambda d: (_x(4, 8, device=d), 1, torch.float64), "aten::softmax"),
    "softmax_dtype_none": (softmax_dim_dtype, lambda d: (_x(4, 8, device=d), 1, None), "aten::softmax"),
    "log_softmax_dim": (log_softmax_dim, lambda d: (_x(4, 6, 8, device=d), 1), "aten::log_softmax"),
    "layer_norm_eps": (layer_norm_eps, lambda d: (_x(4, 6, 8, device=d), _x(8, device=d, seed=1),
                                                  _x(8, device=d, seed=2), 1e-3), "aten::layer_norm"),
    "computed_dim": (computed_dim, lambda d: (_x(4, 6, 8, device=d),), "aten::sum"),
    "batch_norm_flags": (batch_norm_flags, lambda d: (_x(2, 3, 4, 5, device=d), _x(3, device=d, seed=1),
                                                      _x(3, device=d, seed=2).abs() + 0.5, False, 1e-3),
                         "aten::batch_norm"),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", list(CASES))
def test_profiled_arguments_fuse(case, device):
    fn, make, kind = CASES[case]
    args = make(device)
    sf = check(fn, *args)                       # == eager on every call, fused, no fallback
    g = sf._optimized
    assert kind in _kinds_in_groups(g), f"{kind} not fused:\n{g}"
    guards = [gd for gd in _guards(g) if "values" in gd.attrs]
    assert guards, f"no guard checks the profiled scalars:\n{g}"
    for gd in guards:
        checked = gd.inputs[len(gd.attrs["types"]):]
        assert len(checked) == len(gd.attrs["values"])
    for grp in fusion_groups(g):
        assert not set(grp.inputs) & {v for gd in guards for v in gd.inputs[len(gd.attrs["types"]):]}, \
            f"a checked scalar is still an input of the group:\n{g}"


def test_graph_prints_the_checked_values_and_round_trips():
    x = _x(4, 8)
    sf = _optimized(sum_dim_keep, x, -1, True)
    g = sf._optimized
    text = roundtrip(g)
    assert "values=[-1, 1]](%x.1, %dim.1, %keep.1)" in text
    assert "prim::CpuFusionGroup_0[cache_id=" in text and "](%x.1)" in text
    assert "prim::FallbackGraph_1(%x.1, %dim.1, %keep.1)" in text
    group = fusion_groups(g)[0]
    consts = [n.attrs.get("value") for n in group.subgraph.block.nodes if n.kind == "prim::Constant"]
    assert -1 in consts and True in consts
    fb = next(n for n in g.all_nodes() if n.kind == "prim::FallbackGraph")
    assert [v.name for v in fb.subgraph.inputs] == ["x.1", "dim.1", "keep.1"]


def test_dtype_argument_becomes_a_scalar_type_constant():
    x = _x(4, 6, 8)
    sf = _optimized(mean_dims_dtype, x, [0, 2], torch.float64)
    g = sf._optimized
    group = fusion_groups(g)[0]
    consts = {str(n.output.type): n.attrs.get("value") for n in group.subgraph.block.nodes
              if n.kind == "prim::Constant" and "value" in n.attrs}
    assert consts.get("int[]") == [0, 2]
    assert 7 in [n.attrs.get("value") for n in group.subgraph.block.nodes]   # ScalarType Double
    assert _guards(g)[0].attrs["values"] == [[0, 2], torch.float64]
    out = sf(x, [0, 2], torch.float64)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, mean_dims_dtype(x, [0, 2], torch.float64))


@pytest.mark.parametrize("device", DEVICES)
def test_other_values_later_run_the_fallback(device):
    x = _x(4, 6, 8, device=device)
    sf = _optimized(sum_dim_keep, x, -1, True)
    counts = fallback_counter(sf)
    torch.testing.assert_close(sf(x, -1, True), sum_dim_keep(x, -1, True))
    assert counts["fallback"] == 0
    for k, (dim, keep) in enumerate([(0, True), (-1, False), (1, False)]):
        out = sf(x, dim, keep)
        torch.testing.assert_close(out, sum_dim_keep(x, dim, keep))
        assert counts["fallback"] == k + 1
    torch.testing.assert_close(sf(x, -1, True), sum_dim_keep(x, -1, True))
    assert counts["fallback"] == 3


def test_other_dtype_eps_and_correction_later_run_the_fallback():
    x = _x(4, 6, 8)
    sf = _optimized(mean_dims_dtype, x, [0, 2], torch.float64)
    counts = fallback_counter(sf)
    for dims, dt in ([[0, 2], torch.float32], [[1], torch.float64], [[0, 2], None], ((0, 2), torch.float64)):
        out = sf(x, dims, dt)
        torch.testing.assert_close(out, mean_dims_dtype(x, dims, dt))
        assert out.dtype == (dt or torch.float32)
    assert counts["fallback"] == 4

    w, b = _x(8, seed=1), _x(8, seed=2)
    sf = _optimized(layer_norm_eps, x, w, b, 1e-3)
    counts = fallback_counter(sf)
    torch.testing.assert_close(sf(x, w, b, 1e-3), layer_norm_eps(x, w, b, 1e-3))
    torch.testing.assert_close(sf(x, w, b, 0.5), layer_norm_eps(x, w, b, 0.5))
    assert counts["fallback"] == 1

    sf = _optimized(var_correction, x, -1, 0, False)
    counts = fallback_counter(sf)
    torch.testing.assert_close(sf(x, -1, 1, False), var_correction(x, -1, 1, False))
    torch.testing.assert_close(sf(x, 0, 0, True), var_correction(x, 0, 0, True))
    assert counts["fallback"] == 2


def test_a_new_value_seen_twice_gets_its_own_specialization():
    x = _x(4, 6, 8)
    sf = _optimized(softmax_dim, x, -1)
    counts = fallback_counter(sf)
    for _ in range(2):
        torch.testing.assert_close(sf(x, 0), softmax_dim(x, 0))
    assert counts["fallback"] == 2
    g = graphfuser.last_executed_optimized_graph()
    assert len(fusion_groups(g)) == 2
    assert sorted(gd.attrs["values"] for gd in _guards(g)) == [[-1], [0]]
    verify(g)
    counts = fallback_counter(sf)
    for dim in (0, -1, 0, -1):
        torch.testing.assert_close(sf(x, dim), softmax_dim(x, dim))
    assert counts["fallback"] == 0
    torch.testing.assert_close(sf(x, 1), softmax_dim(x, 1))      # a third value: fallback again
    assert counts["fallback"] == 1


def test_new_tensor_signature_respecializes_with_the_current_values():
    x = _x(4, 6, 8)
    sf = _optimized(sum_dim_keep, x, -1, True)
    xd = x.double()
    for _ in range(3):
        torch.testing.assert_close(sf(xd, 0, False), sum_dim_keep(xd, 0, False))
    g = graphfuser.last_executed_optimized_graph()
    assert sorted(gd.attrs["values"] for gd in _guards(g)) == [[-1, True], [0, False]]
    counts = fallback_counter(sf)
    torch.testing.assert_close(sf(xd, 0, False), sum_dim_keep(xd, 0, False))
    torch.testing.assert_close(sf(x, -1, True), sum_dim_keep(x, -1, True))
    assert counts["fallback"] == 0
    torch.testing.assert_close(sf(xd, -1, True), sum_dim_keep(xd, -1, True))   # mixed: no specialization
    assert counts["fallback"] == 1


@pytest.mark.parametrize("fn, first, second, arg", [
    (sum_dim_keep, (-1, True), (0, True), "dim"),
    (sum_dim_keep, (-1, True), (-1, False), "keepdim"),
    (var_correction, (-1, 0, False), (-1, 1, False), "correction"),
    (softmax_dim, (-1,), (0,), "dim"),
    (mean_dims_dtype, ([0, 2], torch.float64), ([0, 2], torch.float32), "dtype"),
])
def test_values_that_vary_during_profiling_are_not_specialized(caplog, fn, first, second, arg):
    caplog.set_level(logging.INFO, logger="graphfuser")
    x = _x(4, 6, 8)
    sf = graphfuser.script(fn)
    with config.override(log_level=">partition"):
        for extra in (first, second) + (first,) * 3:
            torch.testing.assert_close(sf(x, *extra), fn(x, *extra))
    g = sf._optimized
    assert g is not None
    reduction = {"sum_dim_keep": "aten::sum", "var_correction": "aten::var", "softmax_dim": "aten::softmax",
                 "mean_dims_dtype": "aten::mean"}[fn.__name__]
    assert reduction not in _kinds_in_groups(g)
    assert not any("values" in gd.attrs for gd in _guards(g))
    assert f"argument '{arg}' of {reduction} must be a constant (its value changed between profiling runs" \
        in caplog.text


def test_value_varying_inside_a_loop_is_not_specialized(caplog):
    caplog.set_level(logging.INFO, logger="graphfuser")

    def loop(x, n: int):
        acc = x * 0.0
        for i in range(n):
            acc = acc + torch.softmax(x * 2.0, i % 2)
        return acc

    x = _x(4, 4)
    sf = graphfuser.script(loop)
    with config.override(log_level=">partition"):
        for _ in range(3):
            torch.testing.assert_close(sf(x, 3), loop(x, 3))
    assert "aten::softmax" not in _kinds_in_groups(sf._optimized)
    assert "argument 'dim' of aten::softmax must be a constant (its value changed" in caplog.text


def test_scalar_used_pointwise_elsewhere_stays_a_runtime_argument():
    def f(x, d: int):
        return (x * d).sum(d) + 1.0

    x = _x(4, 6, 8)
    sf = check(f, x, 1)
    counts = fallback_counter(sf)
    torch.testing.assert_close(sf(x, 2), f(x, 2))
    assert counts["fallback"] == 1

    def g(x, y, d: int):
        s = (x * 2.0).sum(d, True)          # its own group: d specialized there
        return s + (y * d).relu()           # pointwise group: d stays a kernel argument

    y = _x(4, 1, 8, seed=3)
    sf = check(g, x, y, 1, min_groups=1)
    for grp in fusion_groups(sf._optimized):
        if "aten::sum" not in [n.kind for n in grp.subgraph.block.nodes]:
            assert any(v.type.name == "int" for v in grp.subgraph.inputs)
    torch.testing.assert_close(sf(x, y, 2), g(x, y, 2))


def test_guard_source_checks_values_first():
    t = TensorType.of(torch.rand(4, 8))
    src, ns = guard_source([t], 2, values=[-1, True, [0, 1], torch.float64, None, 1e-5])
    assert src.startswith("def guard(x0, y0, y1, y2, y3, y4, y5):\n    return ((y0 == -1 and y0.__class__ is int) and\n")
    assert "y1 is True" in src and "y2 == _v2" in src and "y3 == _v3" in src and "y4 is None" in src
    assert "y5 == 1e-05" in src
    assert ns["_v2"] == [0, 1] and ns["_v3"] is torch.float64
    plain, _ = guard_source([t], 2)
    assert plain.startswith("def guard(x0):\n")


def test_list_argument_is_copied_when_profiled():
    x = _x(4, 6, 8)
    dims = [0, 2]
    sf = _optimized(mean_dims_dtype, x, dims, torch.float32)
    dims.append(1)        # the caller's list changes after profiling: the guard must see it
    torch.testing.assert_close(sf(x, dims, torch.float32), mean_dims_dtype(x, dims, torch.float32))
    assert _guards(sf._optimized)[0].attrs["values"][0] == [0, 2]


def test_guard_mode_off_still_checks_the_values():
    graphfuser.set_guard_mode(False)
    x = _x(4, 6, 8)
    sf = _optimized(sum_dim_keep, x, -1, True)
    counts = fallback_counter(sf)
    xr = x.clone().requires_grad_(True)
    with torch.no_grad():
        torch.testing.assert_close(sf(xr, -1, True), sum_dim_keep(x, -1, True))   # tensors unchecked
    assert counts["fallback"] == 0
    torch.testing.assert_close(sf(x, 0, False), sum_dim_keep(x, 0, False))       # values checked
    assert counts["fallback"] == 1


def sum_to_shape_of(g, x):
    return (g * 2).sum_to_size(x.shape)


def test_sum_to_size_target_is_guarded():
    """The size list (here another tensor's shape) decides which dims are summed: it is checked
    by the guard, so a new target shape runs the fallback instead of the old kernel."""
    g, x1, x2 = torch.randn(5, 6), torch.randn(5, 1), torch.randn(5, 6)
    sf = graphfuser.script(sum_to_shape_of)
    for _ in range(4):
        torch.testing.assert_close(sf(g, x1), sum_to_shape_of(g, x1))
    assert "values=[[5, 1]]" in str(sf.graph_for(g, x1))
    for x in (x2, torch.randn(1, 6), x1):
        out = sf(g, x)
        assert out.shape == sum_to_shape_of(g, x).shape
        torch.testing.assert_close(out, sum_to_shape_of(g, x))
