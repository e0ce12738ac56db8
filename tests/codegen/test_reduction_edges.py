"""Reductions and normalizations on inputs they were not profiled on, CPU and CUDA.

- constant rows and rows with a large mean and a small spread (the shifted-data moments);
- empty reduced extents after profiling on non-empty ones: eager's values (identities, NaN
  means) or eager's error (max / min over an empty dim), never uninitialized memory;
- size relations the kernel relies on (normalized_shape vs the trailing dims, weight / bias /
  running-stat sizes, sum_to_size) checked before a launch: eager's error, never a result.
"""
import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.config import config
from helpers import cuda_compiles, DEVICES, fallback_counter, fusion_groups, on_cuda
from graphfuser.ir.clone import clone_graph


def _profile(fn, *args, n=3):
    sf = graphfuser.script(fn)
    with config.override(disable=["fallback"]):
        for _ in range(n):
            sf(*args)
    assert fusion_groups(sf._optimized), str(sf._optimized)
    return sf


def _skip_no_gpu(device):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no GPU")


# -- near-constant rows ------------------------------------------------------------------------
def ln_tiny_eps(x):
    return F.layer_norm(x * 1.0, [31], eps=1e-12)


def ln_affine(x, w, b):
    return F.layer_norm(x * 1.0, [31], w, b, eps=1e-12)


def std_rows(x):
    return (x * 1.0).std(1)


def var_mean_rows(x):
    return torch.var_mean(x * 1.0, 1, correction=0)


def gn_rows(x):
    return F.group_norm(x * 1.0, 1, eps=1e-12)


def in_rows(x):
    return F.instance_norm(x * 1.0, eps=1e-12)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fn", [ln_tiny_eps, std_rows, var_mean_rows])
def test_constant_rows_are_exact(fn, device):
    """Rows all equal to 1/3: layer_norm gives 0, var and std 0, mean 1/3 exactly (as eager's
    Welford does; a plain sum / N mean was off by an ulp, and layer_norm with eps=1e-12 turned
    that into 0.06)."""
    _skip_no_gpu(device)
    x = torch.full((8, 31), 1 / 3, device=device)
    sf = _profile(fn, torch.randn(8, 31, device=device))
    with config.override(disable=["fallback"]):
        got = sf(x)
    for g, e in zip(got if isinstance(got, tuple) else (got,), (lambda r: r if isinstance(r, tuple) else (r,))(fn(x))):
        assert torch.equal(g, e), (g, e)


@pytest.mark.parametrize("device", DEVICES)
def test_constant_rows_affine_and_channel_norms(device):
    _skip_no_gpu(device)
    w, b = torch.randn(31, device=device) * 3, torch.randn(31, device=device)
    x = torch.full((4, 31), 1 / 3, device=device)
    sf = _profile(ln_affine, torch.randn(4, 31, device=device), w, b)
    with config.override(disable=["fallback"]):
        torch.testing.assert_close(sf(x, w, b), b.expand(4, 31), rtol=0, atol=0)
    c = torch.full((2, 3, 5, 7), 0.1, device=device)
    for fn in (gn_rows, in_rows):
        sf = _profile(fn, torch.randn(2, 3, 5, 7, device=device))
        with config.override(disable=["fallback"]):
            assert torch.equal(sf(c), torch.zeros_like(c)), fn.__name__


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fn", [ln_tiny_eps, std_rows, var_mean_rows])
def test_large_mean_small_spread(fn, device):
    """Rows around 1e4 with spread 1e-2: about as close as eager fp32 to a float64 reference (the
    plain sum / N mean put layer_norm 2.5x further off than eager)."""
    _skip_no_gpu(device)
    g = torch.Generator().manual_seed(0)
    y = (1e4 + 1e-2 * torch.randn(8, 31, generator=g)).to(device)
    sf = _profile(fn, y)
    with config.override(disable=["fallback"]):
        got = sf(y)
    ref, eager = fn(y.double()), fn(y)
    as_t = lambda r: r if isinstance(r, tuple) else (r,)
    for a, r, e in zip(as_t(got), as_t(ref), as_t(eager)):
        err, eager_err = (a.double() - r).abs().max().item(), (e.double() - r).abs().max().item()
        # within 2x eager's error, or a few fp32 ulps of the result itself
        assert err <= 2 * eager_err + 4 * 2 ** -23 * r.abs().max().item(), (err, eager_err)


# -- empty reduced extents ---------------------------------------------------------------------
def f_sum(x):
    return x.sum(0) + 1.0


def f_sum_dims(x):
    return (x * 2.0).sum([0, 1]) - 1.0


def f_mean(x):
    return x.mean(0) + 1.0


def f_prod(x):
    return (x * 2.0).prod(0)


def f_var(x):
    return (x * 2.0).var(0)


def f_std(x):
    return (x * 2.0).std(0, correction=0)


def f_var_mean(x):
    return torch.var_mean(x * 2.0, 0)


def f_softmax(x):
    return torch.softmax(x * 2.0, 0)


def f_log_softmax(x):
    return torch.log_softmax(x * 2.0, 0)


def f_layer_norm(x):
    return F.layer_norm(x * 2.0, [5])


def f_amax(x):
    return (x * 2.0).amax(0)


def f_amin(x):
    return (x * 2.0).amin(0) + 1.0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fn", [f_sum, f_sum_dims, f_mean, f_prod, f_var, f_std, f_var_mean, f_softmax,
                                f_log_softmax, f_layer_norm], ids=lambda f: f.__name__)
def test_empty_extent_after_profiling(fn, device):
    """Profiled on [2, 3, 5], called with an empty reduced dim (or an empty batch): eager's values
    (0 for sum, 1 for prod, NaN for mean / var) and shapes."""
    _skip_no_gpu(device)
    sf = _profile(fn, torch.randn(2, 3, 5, device=device))
    for shape in ((0, 3, 5), (2, 0, 5), (0, 0, 5)):
        x = torch.randn(shape, device=device)
        got, ref = sf(x), fn(x)
        for g, r in zip(got if isinstance(got, tuple) else (got,), ref if isinstance(ref, tuple) else (ref,)):
            assert g.shape == r.shape and g.dtype == r.dtype
            torch.testing.assert_close(g, r, equal_nan=True)
    x = torch.randn(2, 3, 5, device=device)          # and back: the fused path still runs
    counts = fallback_counter(sf)
    torch.testing.assert_close(sf(x), fn(x))
    assert counts["fallback"] == 0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fn", [f_amax, f_amin], ids=lambda f: f.__name__)
def test_empty_max_min_raises_eager_error(fn, device):
    _skip_no_gpu(device)
    sf = _profile(fn, torch.randn(2, 3, 5, device=device))
    x = torch.randn(0, 3, 5, device=device)
    with pytest.raises(IndexError, match="Expected reduction dim 0 to have non-zero size"):
        fn(x)
    with config.override(disable=["fallback"]):
        with pytest.raises(IndexError, match="Expected reduction dim 0 to have non-zero size"):
            sf(x)
        # the group is not broken by it: the next call takes the fused path
        x = torch.randn(2, 3, 5, device=device)
        torch.testing.assert_close(sf(x), fn(x))


# -- size preconditions ------------------------------------------------------------------------
def ln4(x):
    return F.layer_norm(x * 1.0, [4])


def ln4_affine(x, w, b):
    return F.layer_norm(x * 1.0, [4], w, b)


def rms4(x, w):
    return F.rms_norm(x * 1.0, [4], w)


def to_size(x):
    return (x * 2.0).sum_to_size([1, 4])


def bn_eval(x, rm, rv, w, b):
    return F.batch_norm(x * 1.0, rm, rv, w, b, training=False)


def softmax_plus(x, y):
    return torch.softmax(x * 2.0, 1) + y


R = torch.randn
PRECONDITIONS = [
    (ln4, (R(3, 4),), (R(3, 5),), "expected input with shape"),
    (ln4_affine, (R(3, 4), R(4), R(4)), (R(3, 4), R(5), R(4)), "Expected weight to be of same shape"),
    (ln4_affine, (R(3, 4), R(4), R(4)), (R(3, 5), R(4), R(4)), "expected input with shape"),
    (rms4, (R(3, 4), R(4)), (R(3, 5), R(4)), "expected input with shape"),
    (to_size, (R(3, 4),), (R(3, 5),), "is not expandable"),
    (bn_eval, (R(2, 3, 4), R(3), R(3).abs(), R(3), R(3)), (R(2, 4, 4), R(3), R(3).abs(), R(3), R(3)),
     "should contain 4 elements"),
    (softmax_plus, (R(3, 4), R(3, 4)), (R(3, 4), R(3, 5)), "must match the size"),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fn,prof,bad,msg", PRECONDITIONS,
                         ids=[f"{p[0].__name__}-{i}" for i, p in enumerate(PRECONDITIONS)])
def test_size_preconditions_raise_eager_error(fn, prof, bad, msg, device):
    """Profiled on valid sizes, called with sizes eager rejects: eager's error, not a tensor."""
    _skip_no_gpu(device)
    prof, bad = [t.to(device) for t in prof], [t.to(device) for t in bad]
    sf = _profile(fn, *prof)
    with pytest.raises(RuntimeError, match=msg):
        fn(*bad)
    with config.override(disable=["fallback"]):
        with pytest.raises(RuntimeError, match=msg):
            sf(*bad)
        torch.testing.assert_close(sf(*prof), fn(*prof))


def ln_whole(x):
    return F.layer_norm(x - 7.0, [5, 3])


NORM_PRECONDITIONS = PRECONDITIONS[:4] + [
    (ln_whole, (R(5, 3),), (R(2, 3),), "expected input with shape"),
    (ln_whole, (R(5, 3),), (R(0, 3),), "expected input with shape"),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fn,prof,bad,msg", NORM_PRECONDITIONS,
                         ids=[f"{p[0].__name__}-{i}" for i, p in enumerate(NORM_PRECONDITIONS)])
def test_size_preconditions_raise_eager_error_under_grad(fn, prof, bad, msg, device):
    """The same with inputs that require grad: the group is differentiable and its layer norm
    the statistics row (``graphfuser::layer_norm_train``), whose fallback must reject the sizes as
    eager does (fuzz seed 36435, graph 82: normalized_shape [5, 3] profiled on a [5, 3] input,
    then a [0, 3] and a [2, 3] one, returned a tensor)."""
    _skip_no_gpu(device)
    prof, bad = [t.to(device).requires_grad_() for t in prof], [t.to(device).requires_grad_() for t in bad]
    sf = _profile(fn, *prof)
    with pytest.raises(RuntimeError, match=msg):
        fn(*bad)
    with pytest.raises(RuntimeError, match=msg):
        sf(*bad)
    torch.testing.assert_close(sf(*prof), fn(*prof))


# -- 0-dim / all-size-1 groups, lone strided / expanded rows -------------------------------------
def sum_back(x):
    return (x * 2.0).sum() + x


def softmax0(x):
    return torch.softmax(x * 2.0, 0)


def ln_last1(x):
    return F.layer_norm(x * 1.0, [1])


def amax_back(x):
    return (x * 2.0).amax(-1, keepdim=True) - x


def _lone_rows(device):
    r = lambda *s: torch.randn(*s, device=device)
    return [(sum_back, r(())), (sum_back, r(1, 1)), (softmax0, r(())), (ln_last1, r(1, 1)),
            (amax_back, r(1, 1, 1)), (softmax0, r(10)[::2]), (softmax0, r(1).expand(6)),
            (softmax0, r(8, 3)[:, 1]), (amax_back, r(4)[::2])]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", range(9))
def test_lone_rows_and_size_one_groups_compile(case, device):
    """Groups on 0-dim / all-size-1 tensors (no loop axis left) and reductions of one strided or
    expanded 1-D row (no kept dim) used to fail to compile and run eager; they are fused and
    right. The CUDA source of each compiles with NVRTC."""
    _skip_no_gpu(device)
    from test_reductions import nvrtc_compile

    fn, x = _lone_rows(device)[case]
    ref = fn(x)
    sf = _profile(fn, x)
    counts = fallback_counter(sf)
    with config.override(disable=["fallback"]):
        got = sf(x)
    torch.testing.assert_close(got, ref)
    assert got.shape == ref.shape and counts["fallback"] == 0
    if device == "cpu":
        assert nvrtc_compile(sf) >= 1


def test_moment_sums_share_one_block_combine():
    """CUDA: the two shifted sums of the moments (one phase, one op) combine across the block in
    one round of barriers (gf_block_reduce2_x), so layer norm has one block combine per row;
    every variant compiles with NVRTC."""
    from graphfuser.executor.compiled_reduction import ReductionGroup
    from graphfuser.runtime import nvrtc

    ok, why = nvrtc.available()
    if not ok:
        pytest.skip(f"NVRTC unavailable: {why}")
    sf = _profile(ln_affine, torch.randn(4, 31), torch.randn(31), torch.randn(31))
    (g,) = fusion_groups(sf._optimized)
    cg = ReductionGroup(on_cuda(clone_graph(g.subgraph)), "cuda", torch.device("cuda", 0), "k")
    persistent = [src for src, v in zip(cg.variant_sources, cg.variants) if "gf_block_reduce2_x<gf_op_sum>" in src]
    assert persistent, cg.source
    for i, v in enumerate(cg.variants):
        cuda_compiles(cg.variant_sources[i], v[0], 90)


def min_max_sum_of_products(x):
    v = x * x
    return torch.amin(v, [0], keepdim=True), torch.amax(v, -1), v.sum(-1), v


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64])
def test_narrow_integer_block_reductions(dtype, device):
    """amin / amax / sum over 1- and 2-byte integers: the warp shuffle of a block reduction
    promotes those to int, and the combine must take the element type back (NVRTC rejected
    ``gf_op_min::f(unsigned char, int)``). Values match eager; the CUDA source compiles."""
    _skip_no_gpu(device)
    from test_reductions import nvrtc_compile

    g = torch.Generator().manual_seed(3)
    x = torch.randint(0, 11, (37, 300), generator=g).to(dtype).to(device)
    fn = min_max_sum_of_products
    sf = _profile(fn, x)
    with config.override(disable=["fallback"]):
        for got, want in zip(sf(x), fn(x)):
            assert got.dtype == want.dtype and torch.equal(got, want)
    if device == "cpu":
        assert nvrtc_compile(sf) >= 1


def test_bool_row_values_kept_as_int_read_back_as_bool():
    # fuzz graph 1554 (seed 33671): a bool row value (isfinite of the column sums) kept in an int
    # lane array met a bool in gf_fmin(T, T): "no matching function for call to gf_fmin(bool, int)"
    import graphfuser
    from graphfuser.config import config

    def fn(x):
        m = torch.fmin(x, torch.sum(x, [0, 2], keepdim=True).isfinite())
        return m * 7, torch.fmax(m, x.sum([0, 2], keepdim=True) > 3)

    sf = graphfuser.script(fn)
    for n in (33, 67):
        x = (torch.rand(n, 1, 1, 14) > 0.5)[..., ::2]
        with config.override(disable=["fallback"]):
            for _ in range(3):
                for a, b in zip(sf(x), fn(x)):
                    assert a.dtype == b.dtype and torch.equal(a, b)
