"""Outer reductions with vector lanes (no GPU needed): column sums whose threads hold V adjacent
columns (the bias gradient of bias + GELU, RMSNorm's and layer norm's weight gradients, channels-
last statistics) render 16-byte accesses, V accumulators per thread combined lane by lane across
threadIdx.y and through the split workspace; a per-reduced-index vector (RMSNorm's saved rstd)
does not turn a column sum into an inner reduction. NVRTC compiles the variants and the
launchers are valid Python. GPU runs: tests/cuda/test_cuda_outer_vector.py."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from graphfuser.executor.compiled_reduction import launcher_source
from graphfuser.tools import bench_train as bt
from test_outer_split import _compile, _groups


def _outer(groups):
    return [cg for cg in groups if cg.kernel.kind == "outer"]


@pytest.mark.parametrize("dtype, V", [(torch.bfloat16, 8), (torch.float32, 4), (torch.float16, 8)])
def test_bias_gelu_backward_column_sum_has_vector_variants(dtype, V):
    x, b = torch.randn(33, 64, dtype=dtype).requires_grad_(), torch.randn(64, dtype=dtype).requires_grad_()
    (cg,) = _outer(_groups(bt.bias_gelu, x, b, backward=True))
    tags = [v[2].tag for v in cg.variants]
    assert tags[:4] == ["outer_v1", "outer_split_v1", f"outer_v{V}", f"outer_split_v{V}"], tags
    names = [v[0] for v in cg.variants]
    src = cg.variant_sources[tags.index(f"outer_split_v{V}")]
    # vector loads and stores, under the row predicate (one basic block per unrolled iteration)
    assert f"float acc0[{V}];" in src and f"gf_load_if<{V}>(" in src and f"gf_store_if<{V}>(" in src
    assert "const bool gf_ok = " in src and "for (int gf_u = 0; gf_u < 4; ++gf_u)" in src
    # the V lanes combine across threadIdx.y at once, and from the blocks' partials read in one loop
    assert f"gf_block_reduce_y_k<gf_op_sum, float, {V}, " in src and "gf_block_reduce_y<gf_op_sum>(" not in src
    # (every lane's partial of a value in one load of the value's packed slot)
    assert ("{{ const int v = 0; gf_ld_partials<{V}>(gf_k1p0, gf_slot_of<float>(gf_work, 0, n0) + "
            "(long long)gf_k * n0 + (x2 + v)); }}").format(V=V) in src
    assert "gf_k1[0 * {V} + v] = gf_op_sum::f(gf_k1[0 * {V} + v], gf_k1p0[v]);".format(V=V) in src
    _compile(cg, names)
    launcher = launcher_source(cg)
    compile(launcher, "<launcher>", "exec")
    assert f"cols = {32 * V} if vec else 32" in launcher


def test_rmsnorm_weight_gradient_is_an_outer_reduction():
    """With the row kernel's column sums off, the weight gradient is an outer reduction."""
    mod = bt.RMSNorm(64)
    x = torch.randn(32, 64).to(torch.bfloat16).requires_grad_()
    groups = _groups(mod, x, backward=True, disable=("column_sums",))
    outer = _outer(groups)
    assert len(outer) == 1, [cg.kernel.kind for cg in groups]
    cg = outer[0]
    tags = [v[2].tag for v in cg.variants]
    assert "outer_split_v4" in tags                     # fp32 upstream gradient: 16-byte float4
    src = cg.variant_sources[tags.index("outer_split_v4")]
    assert "const float s_t1 = gf_ld_if(t1 + (" in src   # rstd: one scalar per reduced index
    _compile(cg, [v[0] for v in cg.variants])


def test_strided_columns_get_no_vector_variant():
    x = torch.randn(33, 128)[:, ::2].requires_grad_()        # every other column: stride 2
    b = torch.randn(64).requires_grad_()
    groups = _outer(_groups(bt.bias_gelu, x, b, backward=True))
    assert groups
    for cg in groups:
        assert all(v[2].vector == 1 for v in cg.variants)


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


def test_layer_norm_parameter_gradients_vectorized():
    x = torch.randn(40, 96).requires_grad_()
    w, b = torch.rand(96).requires_grad_(), torch.randn(96).requires_grad_()
    # (else: column sums of the row kernel); a lone layer norm under grad runs eagerly unless
    # single-node mode fuses it (passes/lone_groups.py: lone_under_grad)
    outer = _outer(_groups(layer_norm, x, w, b, backward=True, disable=("column_sums",), single_node=True))
    assert outer and all(any(v[2].vector == 4 for v in cg.variants) for cg in outer)
    for cg in outer:
        _compile(cg, [v[0] for v in cg.variants])


@pytest.mark.parametrize("cols", [128, 37, 5])
def test_cpu_lane_loops_of_cut_tiles_are_simd(cols):
    """CPU outer kernels: the lane loop of a column tile runs min(W, columns left) times, a trip
    count GCC neither unrolls nor vectorizes; it carries ``omp simd`` (a GELU backward with its
    bias gradient over [16, 128] took 40 us scalar, 4.5 us vectorized). Full and cut tiles give
    eager's gradients."""
    import re

    from graphfuser.executor.compiled_reduction import ReductionGroup
    from test_outer_split import DifferentiableGroup, config, fusion_groups, graphfuser

    x = torch.randn(16, cols).requires_grad_()
    b = torch.randn(cols).requires_grad_()
    sf = graphfuser.script(bt.bias_gelu)
    with config.override(disable=["fallback"]):
        for _ in range(4):
            y = sf(x, b)
            y.backward(torch.ones_like(y))
    bwd = [r.backward._optimized for r in sf._runners.values() if isinstance(r, DifferentiableGroup)]
    outer = [cg for g in bwd for n in fusion_groups(g)
             for cg in [ReductionGroup(n.subgraph, "cpu", torch.device("cpu"), "k")] if cg.kernel.kind == "outer"]
    assert outer, "the bias gradient is no outer reduction"
    for cg in outer:
        lanes = re.findall(r"(#pragma [^\n]*)\n\s*for \(long long i\d+ = 0; i\d+ < \(\(n\d+ - ", cg.source)
        assert lanes and all(p == "#pragma omp simd" for p in lanes), lanes
    x.grad = b.grad = None
    y = sf(x, b)
    y.backward(torch.ones_like(y))
    gx, gb = x.grad, b.grad
    x.grad = b.grad = None
    y = bt.bias_gelu(x, b)
    y.backward(torch.ones_like(y))
    torch.testing.assert_close(gx, x.grad)
    torch.testing.assert_close(gb, b.grad, rtol=1e-5, atol=1e-5)


def _inside_loops(src: str, var: str) -> list[str]:
    """The lines of ``src`` inside the loops over ``var`` (the passes of an outer kernel)."""
    out, depth = [], None
    for ln in src.splitlines():
        indent = len(ln) - len(ln.lstrip())
        if depth is not None and indent <= depth:
            depth = None
        if depth is not None:
            out.append(ln)
        elif ln.lstrip().startswith(f"for (long long {var} ="):
            depth = indent
    return out


@pytest.mark.parametrize("channels", [64, 37, 5])
def test_cpu_lanes_compute_row_values_once_per_tile(channels):
    """CPU outer kernels (16 simd lanes over a column tile) compute what does not vary along the
    reduced axes (mean, variance, rstd, weight and bias loads, sums divided by N) once per lane
    into per-lane arrays, not per element in every pass: the batch norm backward's divisions
    and rsqrt left its step 1.4x slower. Bool lanes are int arrays (GCC vectorizes no simd loop
    that loads a bool array). Gradients and running statistics match eager, with a constant
    channel and one holding an inf among full and cut tiles."""
    import re

    from graphfuser.executor.compiled_reduction import ReductionGroup
    from test_outer_split import DifferentiableGroup, bn_relu, config, fusion_groups, graphfuser

    x = torch.randn(4, channels, 5, 3)
    x[:, 1] = 3.0
    x[0, -1, 0, 0] = float("inf")
    x = x.contiguous(memory_format=torch.channels_last).requires_grad_()
    w, b = (torch.rand(channels) + 0.5).requires_grad_(), torch.randn(channels).requires_grad_()
    stats = [(torch.zeros(channels), torch.ones(channels)) for _ in range(2)]
    sf = graphfuser.script(bn_relu)
    results = []
    for fn, st in ((sf, stats[0]), (bn_relu, stats[1])):
        with config.override(disable=["fallback"]):
            for _ in range(4):
                x.grad = w.grad = b.grad = None
                y = fn(x, w, b, *st)
                y.backward(torch.ones_like(y))
        results.append([y, x.grad, w.grad, b.grad])
    for got, want in zip(*results):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4, equal_nan=True)
    for got, want in zip(*stats):
        torch.testing.assert_close(got, want, equal_nan=True)
    graphs = [sf._optimized] + [r.backward._optimized for r in sf._runners.values()
                                if isinstance(r, DifferentiableGroup)]
    outer = [cg for g in graphs for n in fusion_groups(g)
             for cg in [ReductionGroup(n.subgraph, "cpu", torch.device("cpu"), "k")] if cg.kernel.kind == "outer"]
    assert len(outer) >= 2, "the forward and backward statistics are no outer reductions"
    for cg in outer:
        per_element = [ln for ln in _inside_loops(cg.source, "i1") if re.match(r"\s*const \w+ e\d+ = ", ln)]
        assert per_element and not [ln for ln in per_element if re.search(r"gf_rsqrt| / |acc\d+\[i2\]", ln)], \
            per_element
        assert not re.search(r"\bbool h\d+\[", cg.source)
    assert any(re.search(r"h\d+\[i2\] = gf_rsqrt", cg.source) for cg in outer)
