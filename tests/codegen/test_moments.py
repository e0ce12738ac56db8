"""Moments by shifted data (sums of ``x - k``, ``k`` the reduced segment's first element) on
every schedule: one reduction phase, exact for constant rows, accurate for large means, eager's
NaN for segments holding an inf, eager's values for empty segments, and the first element found
through any layout (strided, transposed, sliced reduced dims; rows with no kept dim).

CPU schedules run here (inner rows with and without the scratch array, outer reductions with
lane accumulators, lone rows); the CUDA variants (persistent, multi-pass, split across blocks,
outer) are rendered and compiled with NVRTC (tests/cuda runs them)."""
import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.ir.kir import FirstLoad
from graphfuser.config import config
from graphfuser.executor.compiled_reduction import ReductionGroup
from helpers import cuda_compiles, fallback_counter, fusion_groups, on_cuda
from graphfuser.ir.clone import clone_graph


def std_last(x):
    return (x * 1.0).std(-1)


def std_mean_first(x):
    return torch.std_mean(x * 1.0, 0)


def var_mean_last(x):
    return torch.var_mean(x * 1.0, -1, correction=0)


def ln_last(x):
    return F.layer_norm(x * 1.0, [x.shape[-1]], eps=1e-12)


def native_ln(x):
    return torch.native_layer_norm(x * 1.0, [x.shape[-1]], None, None, 1e-12)


def gn(x):
    return F.group_norm(x * 1.0, 1, eps=1e-12)


# (function, input factory, CPU schedule it lands on)
def _cases():
    return [
        (std_last, lambda f: f(8, 31), "inner scratch"),
        (ln_last, lambda f: f(4, 31), "inner scratch"),
        (native_ln, lambda f: f(4, 33), "inner scratch"),
        (var_mean_last, lambda f: f(3, 20000), "inner scratch (a long row)"),
        (std_mean_first, lambda f: f(37, 40), "outer (lane accumulators)"),
        (std_mean_first, lambda f: f(37, 40).t().contiguous().t(), "inner over a transposed input"),
        (std_last, lambda f: f(6, 62)[:, ::2], "inner over a strided row"),
        (std_last, lambda f: f(62)[1::2], "lone strided row (no kept dim)"),
        (gn, lambda f: f(2, 3, 5, 7).to(memory_format=torch.channels_last), "channels-last, reduced dims strided"),
    ]


CASES = _cases()
IDS = [f"{fn.__name__}-{why}" for fn, _, why in CASES]


def _t(r):
    return r if isinstance(r, tuple) else (r,)


def _run(fn, x, profile):
    sf = graphfuser.script(fn)
    with config.override(disable=["fallback"]):
        for _ in range(3):
            sf(profile)
        counts = fallback_counter(sf)
        out = sf(x)
    assert fusion_groups(sf._optimized), str(sf._optimized)
    assert counts["fallback"] == 0
    return sf, out


@pytest.mark.parametrize("case", range(len(CASES)), ids=IDS)
def test_constant_segments_exact(case):
    fn, make, _ = CASES[case]
    x = make(lambda *s: torch.full(s, 1 / 3))
    _, got = _run(fn, x, make(torch.randn))
    # the exact moments: eager's fp64 result with its own residue (~1e-11 in group norm) dropped
    # (eager's fp32 full reduction of one strided row is off by 3e-8 itself)
    for g, e in zip(_t(got), _t(fn(x.double()))):
        exact = torch.where(e.abs() < 1e-9, torch.zeros_like(e), e).float()
        assert torch.equal(g, exact), (g.flatten()[:4], e.flatten()[:4])


@pytest.mark.parametrize("case", range(len(CASES)), ids=IDS)
def test_large_mean_small_spread(case):
    fn, make, _ = CASES[case]
    g = torch.Generator().manual_seed(1)
    y = make(lambda *s: 1e4 + 1e-2 * torch.randn(*s, generator=g))
    _, got = _run(fn, y, make(torch.randn))
    for a, r, e in zip(_t(got), _t(fn(y.double())), _t(fn(y))):
        err, eager_err = (a.double() - r).abs().max().item(), (e.double() - r).abs().max().item()
        assert err <= 2 * eager_err + 4 * 2 ** -23 * r.abs().max().item(), (err, eager_err)


@pytest.mark.parametrize("case", range(len(CASES)), ids=IDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_random_segments_match_eager(case, dtype):
    fn, make, _ = CASES[case]
    g = torch.Generator().manual_seed(2)
    x = make(lambda *s: (3 + 2 * torch.randn(*s, generator=g)).to(dtype))
    _, got = _run(fn, x, make(lambda *s: torch.randn(*s).to(dtype)))
    tol = {torch.float32: 1e-5, torch.float64: 1e-12, torch.bfloat16: 2e-2, torch.float16: 4e-3}[dtype]
    for a, e in zip(_t(got), _t(fn(x))):
        assert a.dtype == e.dtype and a.shape == e.shape
        torch.testing.assert_close(a, e, rtol=tol, atol=tol)


def test_first_element_far_in_the_tail():
    """The shift is the segment's first element: its cost. Ten standard deviations out, the
    variance keeps about 4.5 digits in fp32 (the error grows with (k - mean)^2 / var: here 100
    times the error of a shift at the mean); the mean is within a few ulps of the shift."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(16, 1024, generator=g)
    x[:, 0] = 10.0
    _, got = _run(var_mean_last, x, torch.randn(16, 1024))
    var, mean = var_mean_last(x.double())
    torch.testing.assert_close(got[0].double(), var, rtol=1e-4, atol=0)
    torch.testing.assert_close(got[1].double(), mean, rtol=0, atol=4e-6)   # ~ulps of k = 10


@pytest.mark.parametrize("where", [0, 3])
def test_inf_in_a_segment_gives_eager_nan(where):
    """A column holding an inf: eager's Welford mean is NaN (inf - inf), so is the variance;
    ``k + s1 / N`` alone would give inf (or a finite mean when the inf is the shift). (An inf
    last in eager's update order leaves eager's mean inf; that order differs between eager's
    CPU and CUDA kernels, and the fused mean is NaN for every position.)"""
    x = torch.randn(7, 5)
    x[where, 2] = float("inf")
    x[1, 4] = float("-inf")
    _, got = _run(std_mean_first, x, torch.randn(7, 5))
    for a, e in zip(got, std_mean_first(x)):
        torch.testing.assert_close(a, e, equal_nan=True)


@pytest.mark.parametrize("fn, shape, dim", [(std_mean_first, (7, 5), 0), (var_mean_last, (5, 9), 1),
                                            (std_mean_first, (1, 4), 0)])
@pytest.mark.parametrize("sign", [1, -1])
def test_inf_last_in_a_segment_gives_eager_inf(fn, shape, dim, sign):
    """eager's Welford meets a segment in order: a lone ±inf as its last element leaves the mean
    ±inf (and the variance NaN); anywhere else, or with another inf or NaN, the mean is NaN."""
    x = torch.randn(shape)
    last = [slice(None)] * 2
    last[dim] = -1
    x[tuple(last)] = sign * float("inf")          # every segment ends with an inf
    if shape[0] > 1:
        other = [1, 1]
        other[1 - dim] = 2
        x[tuple(other)] = float("nan")            # ... one of them also holds a NaN
    _, got = _run(fn, x, torch.randn(shape))
    for a, e in zip(got, fn(x)):
        torch.testing.assert_close(a, e, equal_nan=True)
    assert got[1].isinf().any()


def _gn_affine(x, w, b):
    return F.group_norm(x * 1.0, 2, w, b, 1e-5)


def _ln_affine(x, w, b):
    return F.layer_norm(x * 1.0, [x.shape[-1]], w, b, 1e-5)


def overflow_rows():
    """Rows of finite data: the first two square past float32's range (variance 2.5e59 and 2.7e59;
    the second's shift is not its smallest element), the last two are ordinary."""
    return torch.tensor([[0., 1e30, 0., 1e30], [-3e29, 7e29, 1e30, 1.], [1., 2., 3., 4.], [5., -1., 0., 2.]])


@pytest.mark.parametrize("fn, shape", [(_ln_affine, (4, 4)), (_gn_affine, (2, 4, 2))])
def test_finite_data_whose_squares_overflow(fn, shape):
    """Finite rows whose variance float32 cannot hold: the variance rounds to inf and the
    normalization is (x - mean) * rsqrt(inf) = 0, then the affine: the value of a pipeline that
    rounds each statistic correctly (and eager's CUDA value). M2 = s2 - s1 * c had made it
    inf - inf = NaN (fuzz graph 2403 of CUDA seed 7777). Rows whose variance fits are exact as ever."""
    x = overflow_rows().reshape(shape)
    w, b = torch.tensor([2., 3., 4., 5.]), torch.tensor([.5, -1., 0., 1.])
    sf = graphfuser.script(fn)
    with config.override(disable=["fallback"]):
        for _ in range(3):
            sf(torch.randn(shape), w, b)
        got = sf(x, w, b)
    assert fusion_groups(sf._optimized)
    ref = fn(x.double(), w.double(), b.double())
    if fn is _gn_affine:
        # a group norm of several groups runs as an instance norm (passes/decompose.py), whose
        # statistics of float32 accumulate in float64 on the CPU (eager's CPU instance norm does):
        # the float64 values, where eager's CPU group norm gives NaN
        torch.testing.assert_close(got, ref.float())
        return
    huge = (slice(0, 2),)
    assert torch.equal(got[huge], b.expand(2, 4)), got[huge]
    torch.testing.assert_close(got[2:4], ref[2:4].float())


def test_variance_of_finite_data_past_the_range_is_inf():
    """var_mean of those rows: the variance rounds to inf, the mean is finite (eager's too)."""
    x = overflow_rows()
    _, (var, mean) = _run(var_mean_last, x, torch.randn(4, 4))
    ev, em = var_mean_last(x.double())
    assert torch.equal(var[:2], torch.full((2,), float("inf")))
    torch.testing.assert_close(var[2:], ev[2:].float())
    torch.testing.assert_close(mean, em.float(), rtol=1e-6, atol=0)


def test_empty_segments_read_no_memory():
    """An empty reduced extent: the first element is not read (0 instead), var / mean are NaN
    as in eager, layer norm of an empty row is an empty tensor."""
    sf, got = _run(std_mean_first, torch.randn(0, 5), torch.randn(4, 5))
    for a, e in zip(got, std_mean_first(torch.randn(0, 5))):
        torch.testing.assert_close(a, e, equal_nan=True)
    src = ReductionGroup(fusion_groups(sf._optimized)[0].subgraph, "cpu", torch.device("cpu"), "k").source
    assert "(n0 > 0" in src or "(n1 > 0" in src, src


def _groups(fn, x):
    sf, _ = _run(fn, x, x)
    return [g.subgraph for g in fusion_groups(sf._optimized)]


@pytest.mark.parametrize("fn, shape", [(std_last, (4, 64)), (var_mean_last, (4, 64)), (ln_last, (4, 64)),
                                       (gn, (2, 3, 4, 4)), (std_mean_first, (16, 64))])
def test_moments_are_one_phase(fn, shape):
    """The two shifted sums accumulate in one pass (no first mean pass); the shift is a
    first-element load of the input."""
    for target in ("cpu", "cuda"):
        for sub in _groups(fn, torch.randn(shape)):
            cg = ReductionGroup(sub, target, torch.device(target, 0) if target == "cuda" else torch.device("cpu"), "k")
            assert cg.kernel.reduction_phases() == 1
            # var_mean / std_mean also count the segment's non-finite elements (eager's mean of
            # an inf last in the segment, test_inf_last_in_a_segment_gives_eager_inf)
            # (the graphs are profiled on the CPU: on CUDA that count is not taken)
            n = 3 if fn in (var_mean_last, std_mean_first) else 2
            assert [r.op for r in cg.kernel.reductions()] == ["sum"] * n
            assert any(isinstance(e, FirstLoad) for e in cg.kernel.exprs())


def _nvrtc():
    from graphfuser.runtime import nvrtc

    ok, why = nvrtc.available()
    if not ok:
        pytest.skip(f"NVRTC unavailable: {why}")
    return nvrtc


@pytest.mark.parametrize("fn, shape", [(std_last, (4, 64)), (var_mean_last, (4, 64)), (ln_last, (4, 64)),
                                       (native_ln, (4, 64)), (std_mean_first, (16, 64)), (gn, (2, 3, 4, 4)),
                                       (std_last, (6, 62))])
def test_every_cuda_variant_compiles(fn, shape):
    """Every CUDA variant (persistent P1/P2/P4, multi-pass, split across blocks, outer; 32- and
    64-bit indices) of the moments compiles with NVRTC. Kernels with row outputs only (std,
    var_mean) now have a split variant: their one phase of plain sums combines across blocks."""
    nvrtc = _nvrtc()
    x = torch.randn(shape)
    if fn is std_last and shape == (6, 62):
        x = torch.randn(6, 124)[:, ::2]
    for sub in _groups(fn, x):
        cg = ReductionGroup(sub, "cuda", torch.device("cuda", 0), "k")
        tags = {v[2].tag for v in cg.variants}
        if fn in (std_last, var_mean_last) and cg.kernel.kind == "inner":
            assert any(t.startswith("split") for t in tags), tags
        for i, v in enumerate(cg.variants):
            cuda_compiles(cg.variant_sources[i], v[0], 90)


def test_layer_norm_one_block_combine_per_row():
    """CUDA persistent and multi-pass layer norm: one block-wide combine per row (both sums in
    one round of barriers), where a first mean cost a second one."""
    _nvrtc()
    (sub,) = _groups(ln_last, torch.randn(4, 64))
    cg = ReductionGroup(on_cuda(clone_graph(sub)), "cuda", torch.device("cuda", 0), "k")
    for src, v in zip(cg.variant_sources, cg.variants):
        body = src[src.index('extern "C"'):]
        assert body.count("gf_block_reduce2_x<gf_op_sum>(") == 1, (v[2].tag, body)
        assert "gf_block_reduce_x<" not in body, (v[2].tag, body)


def ln_dropout_last(x):
    return F.layer_norm(x + F.dropout(x, 0.25, True), [x.shape[-1]], eps=1e-12)


def var_mean_dropout_last(x):
    return torch.var_mean(F.dropout(x, 0.25, True) + 1.0, -1, correction=0)


@pytest.mark.parametrize("fn", [ln_dropout_last, var_mean_dropout_last])
def test_random_numbers_in_the_shift_and_the_last_element(fn):
    """A random number under the shift (``at_first``) or the last element (``at_last``, the CPU
    var_mean's inf rule) is drawn at that point (``EdgeIndex``), a row value: the CPU kernel
    matches the fallback's numbers (same seed), and every CUDA variant compiles."""
    x = torch.randn(6, 70) * 3 + 1e3
    sf, _ = _run(fn, x, x)
    torch.manual_seed(4)
    out = sf(x)
    torch.manual_seed(4)
    with config.override(fuse_cpu=False):
        ref = graphfuser.script(fn)(x)      # (a profiling call: graphfuser::dropout's fallback)
    for o, r in zip(out if isinstance(out, tuple) else (out,), ref if isinstance(ref, tuple) else (ref,)):
        torch.testing.assert_close(o, r, rtol=1e-4, atol=1e-3)
    (sub,) = [g.subgraph for g in fusion_groups(sf._optimized)]
    nvrtc = _nvrtc()
    cg = ReductionGroup(sub, "cuda", torch.device("cuda", 0), "k")
    for i, v in enumerate(cg.variants):
        cuda_compiles(cg.variant_sources[i], v[0], 90)
