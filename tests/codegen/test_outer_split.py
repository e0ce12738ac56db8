"""The split reduction schedules in CUDA source (no GPU needed): batch norm in training's forward
and backward (reductions over N, H, W with a full-size epilogue) render a split variant whose
blocks meet at grid barriers and launch cooperatively, for channels-last (outer: a column tile
per blockIdx.x) and contiguous NCHW (inner: a channel's row split across blockIdx.y); a single-pass
outer reduction lets the tile's last block finish instead. NVRTC compiles every split variant and
the generated launchers are valid Python. GPU runs: tests/cuda/test_cuda_outer_split.py."""
from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.autodiff.function import DifferentiableGroup
from graphfuser.config import config
from graphfuser.executor.compiled_reduction import ReductionGroup, launcher_source
from graphfuser.runtime import nvrtc

from helpers import cuda_compiles, fusion_groups


def bn_relu(x, w, b, rm, rv):
    return F.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5).relu()


def channel_sums(x):
    return x.sum([0, 2, 3]), x.amax([0, 2, 3])


def _groups(fn, *args, backward: bool = False, disable: tuple = (), single_node: bool = False) -> list[ReductionGroup]:
    sf = graphfuser.script(fn)
    with config.override(disable=["fallback", *disable], single_node_mode=single_node):
        for _ in range(4):
            y = sf(*args)
            if backward:
                y.backward(torch.ones_like(y))
    graphs = [sf._optimized]
    if backward:
        graphs += [r.backward._optimized for r in sf._runners.values() if isinstance(r, DifferentiableGroup)]
    return [ReductionGroup(g.subgraph, "cuda", torch.device("cuda", 0), f"k{i}")
            for i, g in enumerate(n for graph in graphs for n in fusion_groups(graph))]


def _compile(cg: ReductionGroup, names: list[str]) -> None:
    ok, why = nvrtc.available()
    if not ok:
        pytest.skip(f"NVRTC unavailable: {why}")
    for i, (fname, *_rest) in enumerate(cg.variants):
        if fname in names:
            cuda_compiles(cg.variant_sources[i], fname, 90)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("channels_last", [True, False])
def test_batch_norm_training_split_with_grid_barriers(dtype, channels_last, monkeypatch):
    from graphfuser.passes import batch_norm

    monkeypatch.setattr(batch_norm, "DOUBLE_MEAN_DEVICES", ())     # the graph as CUDA would have it
    x = torch.randn(4, 6, 5, 3, dtype=dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    x.requires_grad_()
    w, b = (torch.rand(6) + 0.5).to(dtype).requires_grad_(), torch.randn(6).to(dtype).requires_grad_()
    rm, rv = torch.zeros(6, dtype=dtype), torch.ones(6, dtype=dtype)
    groups = _groups(bn_relu, x, w, b, rm, rv, backward=True)
    assert len(groups) == 2                          # forward, backward
    for cg in groups:
        assert cg.kernel.kind == ("outer" if channels_last else "inner")
        split = [v[0] for v, sync in zip(cg.variants, cg.grid_sync) if v[2].split]
        assert split and all(sync for v, sync in zip(cg.variants, cg.grid_sync) if v[2].split), cg.variants
        assert not any(sync for v, sync in zip(cg.variants, cg.grid_sync) if not v[2].split)
        src = cg.variant_sources[[v[0] for v in cg.variants].index(split[0])]
        phases = cg.kernel.reduction_phases()
        assert src.count("gf_grid_sync(gf_sem + blockIdx.x, gf_gen);") == phases    # one barrier per reduction pass
        assert "blockIdx.y == 0" in src                                           # one block stores row outputs
        if channels_last:
            # every accumulator and lane combined across threadIdx.y at once, twice (the block's
            # values, then the blocks' partials), in rounds that fit the 32 KB scratch
            ct = "double" if dtype == torch.float64 else "float"
            calls = re.findall(rf"gf_block_reduce_y_k<gf_op_sum, {ct}, (\d+), (\d+), (\d+), (\d+), (\d+)>", src)
            assert len(calls) == 2 * phases and "__shared__ double gf_smem[4096];" in src, src
            for k, r, bx, by, cap in (map(int, c) for c in calls):
                assert 1 <= r <= k and r * bx * by + k * bx <= cap == 4096 * 8 // (8 if ct == "double" else 4)
        _compile(cg, split)
        launcher = launcher_source(cg)
        compile(launcher, "<launcher>", "exec")
        assert "_scratch(_stream(_devidx), " in launcher and "f.cooperative)" in launcher


def test_single_pass_outer_split_lets_the_last_block_finish():
    x = torch.randn(8, 6, 5, 3).contiguous(memory_format=torch.channels_last)
    (cg,) = _groups(channel_sums, x)
    assert cg.kernel.kind == "outer"
    names = [v[0] for v in cg.variants]
    assert "k0_outer_split_v1_i32" in names and not any(cg.grid_sync)
    src = cg.variant_sources[names.index("k0_outer_split_v1_i32")]
    assert "gf_grid_last(gf_sem + i0, gf_smem)" in src and "gf_grid_sync(" not in src.split("k0_outer_split")[1]
    # the last block combines the partials of every reduction in one batched combine
    tail = src.split("gf_grid_last(gf_sem + i0, gf_smem)")[-1]
    assert "gf_k < gridDim.y" in tail and "gf_block_reduce_y_k<gf_op_max, float" in tail, tail
    _compile(cg, ["k0_outer_split_v1_i32", "k0_outer_split_v1_i64"])
    compile(launcher_source(cg), "<launcher>", "exec")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kept_vector_computes_row_values_once_per_tile(dtype):
    """Outer kernels with V adjacent columns per thread compute what does not vary along the
    reduced axes (mean, rstd, the weight and bias loads, sums divided by N) once per column
    tile, in per-lane arrays, not once per element in every pass."""
    import re

    x = torch.randn(4, 8, 5, 3, dtype=dtype).contiguous(memory_format=torch.channels_last).requires_grad_()
    w, b = (torch.rand(8) + 0.5).to(dtype).requires_grad_(), torch.randn(8).to(dtype).requires_grad_()
    rm, rv = torch.zeros(8, dtype=dtype), torch.ones(8, dtype=dtype)
    for cg in _groups(bn_relu, x, w, b, rm, rv, backward=True):
        names = [v[0] for v in cg.variants]
        for name in (n for n in names if "_v8_" in n or "_v4_" in n):
            src = cg.variant_sources[names.index(name)]
            # the row stores follow the last pass
            passes = src[:max(src.rfind("gf_store<"), src.rfind("gf_store_if<"))]
            per_element = [ln for ln in passes.splitlines() if re.match(r"\s*const \w+ e\d+ = ", ln)]
            assert per_element and not [ln for ln in per_element if re.search(r"gf_rsqrt|acc\d+\[v\]|t\d+\[\(x", ln)], \
                (name, per_element)
            # (the backward reads rstd saved by the forward: a per-lane load, no rsqrt)
            body = src[src.index("__global__"):]
            assert re.search(r"h\d+\[v\] = ", body), name
            assert "gf_rsqrt(" not in body or re.search(r"h\d+\[v\] = gf_rsqrt", body), name
            _compile(cg, [name])


def _scaled_softmax(a):
    return torch.softmax(a * 0.125, -1)


@pytest.mark.parametrize("heads,kind", [(4, "inner"), (48, "outer")])
def test_rows_with_few_columns_inside_run_as_rows(heads, kind):
    """CaiT's attention softmax after the talking-heads projection: keys are the reduced dim,
    the few heads lie inside it (strides (.., 1, 784, 4)) and eager's result is contiguous along
    the keys. With fewer than a warp of such columns the kernel is a row kernel (an outer kernel
    would write 32 rows an element each); with a warp of them it stays outer."""
    x = torch.randn(2, 14, 14, heads).permute(0, 3, 1, 2)
    (cg,) = _groups(_scaled_softmax, x)
    assert cg.kernel.kind == kind
    sf = graphfuser.script(_scaled_softmax)
    for _ in range(4):
        got = sf(x)
    torch.testing.assert_close(got, _scaled_softmax(x))
    assert got.stride() == _scaled_softmax(x).stride()


def _masked_case():
    x = torch.randn(4, 256, 5, 3, dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last).requires_grad_()
    w, b = (torch.rand(256) + 0.5).requires_grad_(), torch.randn(256).requires_grad_()
    return x, w, b, torch.zeros(256), torch.ones(256)


def _split_v4(groups: list[ReductionGroup]) -> list[tuple[ReductionGroup, str, str]]:
    out = []
    for cg in groups:
        for (name, *_rest), src in zip(cg.variants, cg.variant_sources):
            if re.search(r"_outer_split_v[248]_i32$", name):
                out.append((cg, name, src))
    return out


def test_masked_row_loop_is_one_block_of_predicated_accesses(monkeypatch):
    """The row loop of a vector outer reduction (batch norm in training over channels-last, its
    forward and backward): four iterations a trip, each one predicated vector loads, the
    arithmetic, a masked update and predicated stores, with no branch between the loads of the
    four (so they are in flight together: a branch per iteration, the old guard, left one
    memory latency per 32 rows). ``PYTORCH_NVFUSER_DISABLE=masked_loads`` keeps the guard."""
    from graphfuser.passes import batch_norm

    monkeypatch.setattr(batch_norm, "DOUBLE_MEAN_DEVICES", ())
    ok, why = nvrtc.available()
    groups = _groups(bn_relu, *_masked_case(), backward=True)
    variants = _split_v4(groups)
    assert len(variants) == 2                                   # forward, backward
    for cg, name, src in variants:
        body = src[src.index("__global__"):]
        # both passes (statistics, then the normalized values) unroll the masked loop
        assert body.count("for (int gf_u = 0; gf_u < 4; ++gf_u) {") == cg.kernel.reduction_phases() + 1, name
        assert "const bool gf_ok = i2 < x0 && " in body and "const bool gf_ok = i2 >= (int)blockIdx.y && " in body
        assert "gf_load_if<" in body and "gf_store_if<" in body and "gf_load<" not in body, name
        assert re.search(r"const float gf_m\d+ = gf_ok \? e\d+ : 0\.0f;", body), name
        if not ok:
            continue
        ptx = nvrtc.compile_ptx(src, name, 90).decode().splitlines()        # optimized, no -G
        loads = [i for i, ln in enumerate(ptx) if "@p ld.global.nc" in ln]
        first = loads[:len(loads) // 2]          # the first pass's trip: 4 x its tensors
        assert len(first) >= 4 and not [ln for ln in ptx[first[0]:first[-1]] if "bra" in ln.split()], name
    with config.override(disable=["masked_loads"]):
        plain = [ReductionGroup(cg.sub, "cuda", torch.device("cuda", 0), f"p{i}") for i, cg in enumerate(groups)]
    for cg, name, src in _split_v4(plain):
        body = src[src.index("__global__"):]
        assert "gf_ok" not in body and "gf_u" not in body and "gf_load<" in body, name
        _compile(cg, [name])


def _nan_max(x):
    return torch.amax(x / x, 0)


def test_masked_row_loop_flags_nan_in_rows_inside_only():
    """Rows past the end compute on the zeros their predicated loads return, where 0 / 0 is NaN:
    a max without a NaN-propagating instruction (float64) sets its NaN flag for rows inside
    only, or a column of finite values would come out NaN."""
    (cg,) = _groups(_nan_max, torch.randn(64, 256, dtype=torch.float64))
    masked = [src for (name, *_), src in zip(cg.variants, cg.variant_sources) if "gf_ok" in src]
    assert masked
    for src in masked:
        flags = [ln.strip() for ln in src.splitlines() if re.match(r"\s*nan\d+(\[v\])? \|= ", ln)]
        assert flags and all(" |= gf_ok && " in ln for ln in flags), flags
