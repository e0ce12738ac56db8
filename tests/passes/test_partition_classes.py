"""Partition defect classes: dead groups, horizontal siblings and their guards, reductions that
a kernel would recompute per element, dtype-only arguments, and values read only for their shape.

Every scripted function here is also checked for the guard invariant: after profiling, calls
with the very inputs it was profiled on take the fused path (no fallback runs).
"""
import time

import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.config import config
from helpers import check, fallback_counter, fusion_groups, make_input


def _group_outputs(sf):
    return [len(g.subgraph.outputs) for g in fusion_groups(sf._optimized)]


# -- class 7: a group nobody reads ----------------------------------------------------------
def _dead_layer_norm(x):
    y = F.layer_norm(x, [8])
    return x + 1.0


def _dead_chain(x):
    a = (x * 2.0).sigmoid()
    b = a.sum(1)
    return x.relu() - 1.0


def _dead_softmax_next_to_live(x):
    s = F.softmax(x, dim=-1)
    return (x * 3.0).tanh()


@pytest.mark.parametrize("fn", [_dead_layer_norm, _dead_chain, _dead_softmax_next_to_live])
def test_dead_code_makes_no_group(fn):
    with config.override(disable=["fallback"]):     # a group that fails to compile raises here
        sf = check(fn, make_input(4, 8), fused=None)
    assert all(n > 0 for n in _group_outputs(sf))


# -- class 8: horizontal siblings -----------------------------------------------------------
def _unrelated(x, y):
    return x + 1.0, y - 1.0


def _unrelated_alpha(x, y):
    return torch.add(x, 1.0, alpha=1), torch.sub(y, 2.0, alpha=1)


def _siblings(x, y):
    return (x + 1.0).relu(), (x * 2.0).sigmoid()


@pytest.mark.parametrize("shapes", [((2, 5), (3,)), ((2, 5), (5,)), ((4, 1), (3, 4)), ((2, 5), (2, 5))])
@pytest.mark.parametrize("fn", [_unrelated, _unrelated_alpha])
def test_unrelated_outputs_are_not_merged_and_guards_hit(fn, shapes):
    with config.override(horizontal_mode=True, single_node_mode=True):
        sf = check(fn, torch.rand(*shapes[0]), torch.rand(*shapes[1]), fused=True)
        counts = fallback_counter(sf)
        before = len(fusion_groups(sf._optimized))
        for _ in range(3):
            sf(torch.rand(*shapes[0]), torch.rand(*shapes[1]))
        assert counts["fallback"] == 0
        assert len(fusion_groups(sf._optimized)) == before   # no new specializations either


def test_siblings_of_a_shared_tensor_merge():
    with config.override(horizontal_mode=True):
        sf = check(_siblings, torch.rand(4, 8), torch.rand(4, 8))
        assert len(fusion_groups(sf._optimized)) == 1


def test_siblings_of_different_shapes_are_not_merged():
    def f(x, y):
        return (x + 1.0).relu(), (x + y).sigmoid()

    with config.override(horizontal_mode=True):
        check(f, torch.rand(8), torch.rand(3, 8), fused=None)


# -- class 9: O(elements) --------------------------------------------------------------------
def _amin_broadcast(a, b):
    return (torch.amin(b) + a) * 2.0


def _sum_broadcast(a, b):
    return (b.sum() * a).relu()


def _row_sum_other_axis(a, b):
    return (b.sum(1) + a) * 2.0       # b: [N, K], a: [M, N]


def _softmax_and_half(a, h):
    return F.softmax(a, 1), h.half()


@pytest.mark.parametrize("fn,shapes", [
    (_amin_broadcast, ((300, 300), (300, 300))),
    (_sum_broadcast, ((300, 300), (300, 300))),
    (_row_sum_other_axis, ((300, 200), (200, 300))),
    (_softmax_and_half, ((300, 300), (300, 300))),
])
def test_fused_calls_are_linear_in_elements(fn, shapes):
    a, b = torch.rand(*shapes[0]), torch.rand(*shapes[1])
    with config.override(horizontal_mode=True):
        sf = check(fn, a, b, fused=None, rtol=1e-4, atol=1e-4)
        t = time.perf_counter()
        sf(a, b)
        fused = time.perf_counter() - t
    t = time.perf_counter()
    fn(a, b)
    eager = time.perf_counter() - t
    # 90,000 elements: a per-element reduction would be ~10^10 operations (seconds)
    assert fused < max(50 * eager, 0.25), (fused, eager)


def test_full_reduction_broadcast_splits_with_a_reason(caplog):
    import logging

    caplog.set_level(logging.INFO, logger="graphfuser")
    with config.override(log_level=">partition"):
        check(_amin_broadcast, torch.rand(6, 7), torch.rand(6, 7), fused=None)
    assert "no reduction in the group walks" in caplog.text


# -- class 10: dtype-only arguments -----------------------------------------------------------
def _type_as_reduced(x, s):
    m = x.amax(0)
    return (s * 2.0).type_as(m)


def _to_other(x, s):
    m = x.sum(1)
    return (s + 1.0).to(m) * 3.0


def _type_as_pointwise(x, s):
    return (s * 2.0).type_as(x + 1.0).relu()


@pytest.mark.parametrize("fn", [_type_as_reduced, _to_other, _type_as_pointwise])
@pytest.mark.parametrize("xdtype", [torch.float32, torch.float64, torch.float16])
def test_dtype_only_argument_has_no_dims(fn, xdtype):
    x, s = torch.rand(4, 8, dtype=xdtype), torch.rand(3, 5)
    sf = check(fn, x, s, fused=True)
    # a new shape of the dtype-only argument still hits the guard
    counts = fallback_counter(sf)
    torch.testing.assert_close(sf(torch.rand(4, 8, dtype=xdtype), s), fn(x, s))
    assert counts["fallback"] == 0


# -- class 11: values read only for their shape ---------------------------------------------
def _size_only(x):
    y = x * 2.0
    z = y.relu()
    return z + 1.0, y.size(0), y.dim(), y.numel()


def _size_of_cast(x):
    y = (x * 2.0).double()
    z = y.sigmoid()
    return z, y.size(-1)


def _size_after_batch_norm(x, w, b, m, v):
    # torchvision's conv -> bn -> hardswish_ -> squeeze-excite reads the activation's shape
    # (adaptive_avg_pool2d's dim check): it reaches back past the batch norm, never a group output
    y = F.batch_norm(x, m, v, w, b, False, 0.1, 1e-5)
    z = F.hardswish(y, inplace=True)
    return z * 2.0, z.dim(), z.size(1)


def _size_after_softmax(x):
    y = F.softmax(x * 2.0, dim=-1)
    z = y.sigmoid()
    return z + 1.0, z.size(-1), y.numel()


@pytest.mark.parametrize("fn", [_size_only, _size_of_cast, _size_after_batch_norm, _size_after_softmax])
def test_output_used_only_for_its_shape_is_not_a_group_output(fn):
    if fn is _size_after_batch_norm:
        c = 8
        params = [make_input(c), make_input(c), make_input(c), make_input(c).abs() + 0.5]
        sf = check(fn, make_input(4, c, 5, 3), *params, fused=True)
        assert _group_outputs(sf) == [1]
        for shape in [(3, c, 2, 7), (1, c, 1, 1)]:
            x = make_input(*shape)
            got, want = sf(x, *params), fn(x, *params)
            torch.testing.assert_close(got[0], want[0])
            assert got[1:] == want[1:]
        return
    sf = check(fn, make_input(4, 8), fused=True)
    assert _group_outputs(sf) == [1]
    for shape in [(3, 5), (1, 8), (6, 1)]:
        x = make_input(*shape)
        assert sf(x) [1:] == fn(x)[1:]


def test_dtype_only_argument_whose_rank_changed_while_profiling():
    # the group's guard is built from its inputs' types: an incomplete one made
    # "TypeError: 'NoneType' object is not iterable" when the guard was generated
    def f(x, m):
        return ((x * 2.0).type_as(m) + 1.0).relu()

    sf = graphfuser.script(f)
    for m in [torch.rand(3), torch.rand(2, 2), torch.rand(5, 1, 1), torch.rand(3), torch.rand(2, 2, dtype=torch.float64)]:
        x = torch.rand(4, 8)
        out = sf(x, m)
        torch.testing.assert_close(out, f(x, m))
        assert out.dtype == m.dtype
