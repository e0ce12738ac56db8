"""Reductions and normalizations fused into one kernel: scripted == eager on the CPU, and NVRTC
compiles the CUDA source of every group these tests build (every variant of it).

Each case is run by ``run_case``: fallback disabled (a lowering or compile error fails the
test), the group count asserted, every call compared with eager, then the group's CUDA source
rendered and compiled for sm_90. GPU execution of the same matrix is in
``tests/cuda/test_cuda_reductions.py``.
"""
from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.config import config
from graphfuser.executor.compiled_reduction import ReductionGroup
from graphfuser.runtime import nvrtc

from helpers import cuda_compiles, fallback_counter, fusion_groups, make_input

FLOATS = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
TOL = {torch.float16: dict(rtol=5e-3, atol=5e-3), torch.bfloat16: dict(rtol=2e-2, atol=2e-2),
       torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-9, atol=1e-9)}
_COMPILED: set[str] = set()


def nvrtc_compile(sf: graphfuser.ScriptedFunction) -> int:
    """Compile the CUDA source of every fusion group of ``sf``; returns how many were compiled."""
    ok, why = nvrtc.available()
    if not ok:
        pytest.skip(f"NVRTC unavailable: {why}")
    n = 0
    for g in fusion_groups(sf._optimized):
        cg = ReductionGroup(g.subgraph, "cuda", torch.device("cuda", 0), "k")
        if cg.source not in _COMPILED:
            cuda_compiles(cg.source, cg.variants[0][0], 90)
            _COMPILED.add(cg.source)
        n += 1
    return n


def _flat(x) -> list:
    return [t for e in x for t in _flat(e)] if isinstance(x, (tuple, list)) else [x]


def run_case(fn, *inputs, groups: int = 1, tol=None, cuda: bool = True) -> graphfuser.ScriptedFunction:
    expected = fn(*inputs)
    if tol is None:
        dts = [t.dtype for t in _flat(expected)]
        tol = max((TOL.get(d, dict(rtol=0, atol=0)) for d in dts), key=lambda t: t["rtol"])
    sf = graphfuser.script(fn)
    counts = None
    with config.override(disable=["fallback"]):
        for i in range(4):
            torch.testing.assert_close(sf(*inputs), expected, **tol, msg=lambda m: f"call {i}: {m}")
            if counts is None and sf._optimized is not None:
                counts = fallback_counter(sf)
    assert counts["fallback"] == 0, f"the guards missed on identical inputs:\n{sf._optimized}"
    found = fusion_groups(sf._optimized)
    assert len(found) == groups, f"expected {groups} group(s):\n{sf._optimized}"
    if cuda:
        nvrtc_compile(sf)
    return sf


def make(*shape, dtype=torch.float32, layout="dense", low=None):
    return make_input(*shape, dtype=dtype, layout=layout, low=low)


# -- everything over the last dim: one horizontal group per dtype and layout -------------------
def last_dim_all(x, w, b):
    n = x.shape[-1]
    return (x.sum(-1), x.mean(-1, keepdim=True), x.amax(-1), x.amin(-1), x.var(-1), x.std(-1, unbiased=False),
            torch.softmax(x, -1), torch.log_softmax(x, -1), F.layer_norm(x, [n], w, b, 1e-5),
            F.layer_norm(x, [n], None, None, 1e-3), x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w)


@pytest.mark.parametrize("dtype,layout", [(dt, "dense") for dt in FLOATS] + [
    (torch.bfloat16, "transposed"), (torch.float32, "sliced")])
def test_last_dim_rows(dtype, layout):
    """Every row reducing the last dim, on ragged rows (37: no multiple of any vector width)."""
    run_case(last_dim_all, make(5, 37, dtype=dtype, layout=layout), make(37, dtype=dtype), make(37, dtype=dtype))


def first_dim_keep(x):
    return (x.sum(0, keepdim=True), x.mean(0), x.amax(0, keepdim=True), x.var(0, keepdim=True),
            torch.softmax(x, 0), torch.log_softmax(x, 0))


@pytest.mark.parametrize("dtype,layout", [(torch.float32, "dense"), (torch.bfloat16, "transposed")])
def test_first_dim_keepdim(dtype, layout):
    run_case(first_dim_keep, make(33, 19, dtype=dtype, layout=layout))


def reds_two(x):
    return x.sum([0, 2]), x.mean([-1, 0]), x.amin([0, 2]), torch.var_mean(x, [0, 2], correction=0)


def reds_all(x):
    return x.sum(), x.mean(), x.amax(), torch.std_mean(x), x.prod()


def test_two_dims_all_dims_and_size_one():
    run_case(reds_two, make(6, 5, 7, dtype=torch.float16))
    run_case(reds_all, make(3, 1, 41, low=0.5))
    run_case(last_dim_all, make(4, 1, 1), make(1), make(1), tol=dict(rtol=1e-5, atol=1e-5, equal_nan=True))


def int_reds(x):
    return x.sum(-1), x.amax(-1), x.prod(-1), x.sum(-1, dtype=torch.float32)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_integer_reductions(dtype):
    sf = run_case(int_reds, make(6, 5, dtype=dtype))
    assert sf(make(6, 5, dtype=dtype))[0].dtype == torch.int64


def bool_sum(x):
    return (x > 0).sum(-1), (x > 0).sum(0)


def test_bool_sum_is_int64():
    run_case(bool_sum, make(7, 9), groups=1)      # the column sum in the row kernel (passes/column_sums.py)


def nan_max(x):
    return x.amax(-1), x.amin(-1), x.sum(-1)


def test_nan_propagates():
    x = make(4, 21)
    x[1, 5] = float("nan")
    x[2, 0] = float("inf")
    run_case(nan_max, x, tol=dict(rtol=1e-5, atol=1e-5, equal_nan=True))


# -- normalizations -----------------------------------------------------------------------
def softmax_float(x):
    return torch.softmax(x, -1, dtype=torch.float32), torch.log_softmax(x, 1, dtype=torch.float32)


def native_ln(x, w, b):
    return torch.native_layer_norm(x, [x.shape[-2], x.shape[-1]], w, b, 1e-5)


def rms_builtin(x, w):
    return F.rms_norm(x, [x.shape[-1]], w, 1e-6)


def rms_chain(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def test_softmax_dtype_native_layer_norm_rms_norm():
    run_case(softmax_float, make(5, 30, dtype=torch.bfloat16))
    run_case(native_ln, make(4, 3, 10), make(3, 10), make(3, 10))
    run_case(rms_builtin, make(6, 50, dtype=torch.float16), make(50, dtype=torch.float16))
    sf = run_case(rms_chain, make(6, 50), make(50))
    assert "aten::mean" in str(fusion_groups(sf._optimized)[0].subgraph)   # a chain, not a pattern


def bn_eval(x, rm, rv, w, b):
    return F.batch_norm(x, rm, rv, w, b, False, 0.1, 1e-5)


@pytest.mark.parametrize("dtype,layout", [(torch.float32, "contiguous"), (torch.float32, "3d"),
                                          (torch.float16, "channels_last")])
def test_batch_norm_inference(dtype, layout):
    shape = (2, 6, 5, 3) if layout != "3d" else (4, 6, 7)
    x = make(*shape, dtype=dtype)
    if layout == "channels_last":
        x = x.to(memory_format=torch.channels_last)
    rm, rv = make(6, dtype=dtype), make(6, dtype=dtype, low=0.5)
    run_case(bn_eval, x, rm, rv, make(6, dtype=dtype), make(6, dtype=dtype))


def inorm(x, w, b):
    return F.instance_norm(x, None, None, w, b, True, 0.1, 1e-5)


def grad_sum(g, x):
    return (g * 2.0).sum_to_size(x.shape)


def test_instance_norm_and_sum_to_size():
    run_case(inorm, make(2, 3, 5, 7), make(3), make(3))
    run_case(grad_sum, make(4, 5, 6), make(5, 1))


# -- fusion around reductions ---------------------------------------------------------------
def bias_softmax_cast(x, b):
    return torch.softmax(x + b, -1).to(torch.float16)


def broadcast_sum(t0, t1):
    return ((t0 + t1) * 3).sum(-1)


def manual_softmax(x):
    m = x.amax(-1, keepdim=True)
    e = (x - m).exp()
    return e / e.sum(-1, keepdim=True)


def two_domains(x):
    return x.sum(-1).sum(-1)


def transposed_broadcast(x):
    return x - x.sum(1)


def test_producers_and_consumers_fuse():
    run_case(bias_softmax_cast, make(6, 33), make(33))
    run_case(broadcast_sum, make(4, 1, 40), make(4, 7, 40))
    run_case(manual_softmax, make(5, 70))


def test_split_when_one_kernel_cannot_hold_it(caplog):
    caplog.set_level(logging.INFO, logger="graphfuser")
    run_case(two_domains, make(3, 4, 5), groups=0)   # two lone reductions: not fused alone
    with config.override(single_node_mode=True, log_level=">partition"):
        run_case(two_domains, make(3, 4, 5), groups=2)
        run_case(transposed_broadcast, make(6, 6), groups=2)
    log = caplog.text
    assert "not merged with group 0: reductions over different axes cannot share one kernel" in log
    assert "would walk one loop axis with two of its dims" in log


def softmaxes(x):
    return torch.softmax(x, -1), torch.log_softmax(x, -1)


def test_wide_rows_and_new_sizes_reuse_the_kernel():
    sf = run_case(softmaxes, make(3, 70000))
    from graphfuser.executor import compiled

    builds = compiled.STATS["builds"]
    for shape in [(5, 333), (1, 1000)]:
        x = make(*shape)
        torch.testing.assert_close(sf(x), softmaxes(x), **TOL[torch.float32])
    assert compiled.STATS["builds"] == builds


def two_pass_var(x):
    d = x - x.mean(-1, keepdim=True)
    return (d * d).sum(-1) * 0.5


def test_online_softmax_pass(monkeypatch):
    """The GPU multi-pass schedule folds softmax's max and sum into one online pass and the
    variance into Welford's update; run those rewrites on the CPU too (NaN, +-inf and all -inf
    rows; a large mean for the variance) to check their arithmetic."""
    from dataclasses import replace

    from graphfuser.codegen.reduction import pairs as reduction_pairs
    from graphfuser.executor import compiled_reduction

    monkeypatch.setattr(reduction_pairs, "FUSED_KINDS", ("softmax", "variance"))
    real = compiled_reduction.reduction_variants
    monkeypatch.setattr(compiled_reduction, "reduction_variants",
                        lambda k, t, *a: [replace(p, online=True) for p in real(k, t, *a)])
    x = make(6, 300)
    x[1, 3], x[2, 7], x[3, :] = float("nan"), float("inf"), float("-inf")
    x[4, :100] = float("-inf")
    sf = run_case(softmaxes, x, tol=dict(rtol=1e-5, atol=1e-5, equal_nan=True), cuda=False)
    cg = ReductionGroup(fusion_groups(sf._optimized)[0].subgraph, "cpu", torch.device("cpu"), "k")
    assert "acc1 = acc1 * (o0 == acc0 ? 1.0f : gf_exp((o0 - acc0)))" in cg.source
    # a two-pass variance written out (the rows' moments are shifted sums, one phase, no pair)
    # as Welford's update (its one-pass form)
    sf = run_case(two_pass_var, make(5, 300, dtype=torch.float64) + 1e3, cuda=False)
    cg = ReductionGroup(fusion_groups(sf._optimized)[0].subgraph, "cpu", torch.device("cpu"), "k")
    assert "wm0 += d0 / cnt0;" in cg.source or "wm1 += d1 / cnt1;" in cg.source


def test_new_layout_gets_its_own_specialization():
    from graphfuser.executor import compiled

    sf = run_case(softmaxes, make(6, 40), cuda=False)
    builds = compiled.STATS["builds"]
    x = make(6, 40, layout="transposed")
    for _ in range(4):
        torch.testing.assert_close(sf(x), softmaxes(x), **TOL[torch.float32])
    assert compiled.STATS["builds"] == builds + 1, str(sf._optimized)


@pytest.mark.parametrize("knobs", [dict(cuda={"reduction_prefetch_stages": 0}),
                                   dict(cuda={"reduction_prefetch_stages": 3, "reduction_cache_computed": False}),
                                   dict(cuda={"reduction_register_elements": 8}), dict(disable=["prefetch"])])
def test_cuda_schedule_knobs_compile(knobs):
    """Every CUDA variant under each reduction knob compiles (NVRTC); the CPU result stays exact.
    The prefetch shows in the source as a register array or shared-memory copies."""
    with config.override(**knobs):
        sf = run_case(last_dim_all, make(6, 300), make(300), make(300), cuda=False)
        assert nvrtc_compile(sf) == 1
        src = ReductionGroup(fusion_groups(sf._optimized)[0].subgraph, "cuda", torch.device("cuda", 0), "k").source
    stages = knobs.get("cuda", {}).get("reduction_prefetch_stages", 1)
    if "disable" in knobs:
        assert "gf_next" not in src
    elif stages:
        assert f"gf_cp_wait<{stages - 1}>();" in src and "gf_cp_async<16>" in src
    else:
        assert "pf_t0[" in src and "gf_cp_async<16>(" not in src.split("gf_cp_commit() {")[1]


def bias_layer_norm(x, bias, w, b):
    return F.layer_norm(x + bias, [x.shape[-1]], w, b, 1e-6)


@pytest.mark.parametrize("stages", [0, 2])
def test_prefetch_copies_only_tensors_that_change_with_the_row(stages):
    """The rows' prefetch copies the row's own inputs, never a bias or weight that is the same
    for every row: those are loaded where they are used (cached in L1). Staged with each row,
    a bias made a float32 layer norm of [200704, 96] six times slower on an H200."""
    with config.override(cuda={"reduction_prefetch_stages": stages}):
        sf = run_case(bias_layer_norm, make(6, 96), make(96), make(96), make(96), cuda=False)
        assert nvrtc_compile(sf) == 1
        cg = ReductionGroup(fusion_groups(sf._optimized)[0].subgraph, "cuda", torch.device("cuda", 0), "k")
    x, bias = (cg.kernel.tensors[i].name for i in (0, 1))
    body = "".join(s.split("gf_cp_commit() {")[-1] for s in cg.variant_sources)
    assert cg.kernel.tensors[1].dim_kinds[0] == "bcast"
    if stages:
        assert f"&{x}[" in body and "gf_cp_async<16>" in body
        assert not [line for line in body.splitlines() if "gf_cp_async" in line and f"&{bias}[" in line]
    else:
        assert f"pf_{x}[" in body and f"pf_{bias}" not in body
    assert f"gf_load<4>(b_{bias}, {bias} + " in body


def whole_tensor(x):
    return (x * x).sum(), (x * 2).amax(), torch.softmax(x * 3, 0)


def test_cpu_reduction_without_rows_splits_its_loop_across_threads():
    """No kept dim (one row): each pass loop is an OpenMP parallel simd reduction; NaN still
    propagates through max, and the softmax passes store in parallel."""
    x = make(300_001)
    x[7] = float("nan")
    sf = run_case(whole_tensor, x, tol=dict(rtol=1e-4, atol=1e-3, equal_nan=True), groups=1, cuda=False)
    for g in fusion_groups(sf._optimized):
        src = ReductionGroup(g.subgraph, "cpu", torch.device("cpu"), "k").source
        assert "#pragma omp parallel for simd schedule(static)" in src
