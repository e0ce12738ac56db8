"""Reductions over outer dims on the GPU: the split schedules, where a column tile (outer) or a
row (inner, e.g. NCHW statistics over N and H*W) is spread over gridDim.y blocks that combine
through a workspace, and multi-pass kernels (a normalization's epilogue, a backward's second
reduction) whose blocks meet at grid barriers (cooperative launches). Against eager: plain
reductions over N, H, W, batch norm in training with its running stats and its backward, over
dtypes, contiguous and channels-last layouts, odd and empty sizes, forced and refused splits,
grids smaller than the work (grid-stride tiles with barriers), and bitwise repeatability."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.config import config
from graphfuser.executor import reduction_launch
from graphfuser.runtime import cuda_driver
from helpers import fallback_counter


@pytest.fixture(autouse=True)
def _fused_batch_norm_training():
    """Batch norm in training fuses on CUDA only when asked (cuDNN is the default there)."""
    with config.override(enable=["cuda_batch_norm_training"]):
        yield

pytestmark = pytest.mark.cuda

HALF = [torch.float16, torch.bfloat16]
TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.float64: dict(rtol=1e-9, atol=1e-9),
       torch.float16: dict(rtol=2e-2, atol=2e-2), torch.bfloat16: dict(rtol=8e-2, atol=8e-2)}


def x_of(shape, dtype=torch.float32, layout="channels_last", seed=0):
    torch.manual_seed(seed)
    x = (torch.randn(shape, dtype=torch.float64, device="cuda") * 2.0 + 0.5).to(dtype)
    if layout == "channels_last" and len(shape) == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    return x


def stats(x):
    dims = [0] + list(range(2, x.dim()))
    m = x.mean(dims, keepdim=True)
    return x.sum(dims), m, x.amax(dims), x.var(dims), (x - m) * 2.0


def sums(x):
    dims = [0] + list(range(2, x.dim()))
    return x.sum(dims), x.mean(dims, keepdim=True) + x


def bn_relu(x, w, b, rm, rv):
    return F.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5).relu()


def bn_silu(x, w, b, rm, rv):
    """Smooth after the batch norm: on large tensors a few pre-activations lie within rounding
    of 0, where ReLU's mask (and so its gradient) flips with the summation order."""
    return F.silu(F.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5))


def bn_add_relu(x, w, b, rm, rv, r):
    return (F.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5) + r).relu()


def launched(text: str) -> list[str]:
    """Names of the kernels launched while ``PYTORCH_NVFUSER_DUMP=launch_param`` printed ``text``."""
    return [line.split()[1].rstrip(":") for line in text.splitlines() if line.startswith("[launch_param]")]


def run(fn, *args, tol, n=4):
    ref = fn(*args)
    with config.override(disable=["fallback"], dump=["launch_param"]):
        sf = graphfuser.script(fn)
        counts = None
        for _ in range(n):
            out = sf(*args)
            if counts is None and sf._optimized is not None:
                counts = fallback_counter(sf)
    assert counts is not None and counts["fallback"] == 0 and "CudaFusionGroup" in str(sf._optimized), str(sf._optimized)
    torch.testing.assert_close(out, ref, **tol, equal_nan=True)
    return sf


@pytest.fixture(params=["split", "plain"])
def split_mode(request, monkeypatch):
    """Force the split schedules (every size splits) or refuse them (the one-block-per-tile and
    one-block-per-row schedules). The thresholds are written into launchers when they are built:
    launchers built under the other mode are dropped from the in-memory cache first."""
    from graphfuser.executor import compiled

    monkeypatch.setattr(compiled, "_MEMORY", {})
    if request.param == "split":
        monkeypatch.setattr(reduction_launch, "OUTER_SPLIT_MIN_ROWS", 1)
        monkeypatch.setattr(reduction_launch, "OUTER_SPLIT_TILES", 10 ** 6)
        monkeypatch.setattr(reduction_launch, "SPLIT_MIN_VECTORS", 1)
        monkeypatch.setattr(reduction_launch, "SPLIT_SYNC_MIN_VECTORS", 1)
        monkeypatch.setattr(reduction_launch, "SPLIT_SYNC_ROWS", 10 ** 6)
        monkeypatch.setattr(reduction_launch, "SPLIT_ROWS", 0)
    else:
        monkeypatch.setattr(reduction_launch, "OUTER_SPLIT_TILES", 0)
        monkeypatch.setattr(reduction_launch, "SPLIT_SYNC_ROWS", 0)
        monkeypatch.setattr(reduction_launch, "SPLIT_ROWS", 10 ** 9)
    return request.param


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64] + HALF)
@pytest.mark.parametrize("layout", ["channels_last", "contiguous"])
@pytest.mark.parametrize("shape", [(3, 5, 7, 9), (64, 32, 17, 13), (2, 300, 40, 40), (4096, 40), (33, 7, 1, 1)])
def test_statistics_over_outer_dims(shape, layout, dtype, split_mode, capsys):
    x = x_of(shape, dtype, layout)
    tol = dict(TOL[dtype])
    if dtype == torch.float32:
        tol = dict(rtol=1e-4, atol=1e-3)          # sums of up to 3200 values of |x| ~ 2
    run(stats, x, tol=tol)
    names = launched(capsys.readouterr().out)
    assert names and all(("split" in n) == (split_mode == "split") for n in names), names


@pytest.mark.parametrize("shape", [(0, 5, 7, 9), (3, 5, 0, 9), (3, 0, 7, 9)])
def test_empty_extents(shape):
    run(sums, x_of(shape), tol=TOL[torch.float32])


@pytest.mark.parametrize("resident", [1, 2, 3, 7])
@pytest.mark.parametrize("layout", ["channels_last", "contiguous"])
def test_grids_smaller_than_the_work(resident, layout, monkeypatch):
    """Fewer resident blocks than column tiles / rows: blocks grid-stride over tiles and meet at
    a barrier per tile and pass; gridDim.y = 1 included. (The thresholds are written into the
    launchers: they are built in a cache of this test's own, not left to the tests after it.)"""
    from graphfuser.executor import compiled

    monkeypatch.setattr(compiled, "_MEMORY", {})
    monkeypatch.setattr(cuda_driver.CudaKernel, "resident_blocks", lambda self, threads, shared_mem=0: resident)
    monkeypatch.setattr(reduction_launch, "OUTER_SPLIT_MIN_ROWS", 1)
    monkeypatch.setattr(reduction_launch, "SPLIT_SYNC_MIN_VECTORS", 1)
    monkeypatch.setattr(reduction_launch, "SPLIT_SYNC_ROWS", 10 ** 6)
    x = x_of((8, 100, 9, 11), layout=layout)
    run(stats, x, tol=dict(rtol=1e-4, atol=1e-3))
    w, b = torch.rand(100, device="cuda") + 0.5, torch.randn(100, device="cuda")
    _bn_steps(bn_silu, x, w, b, steps=2)


def _bn_steps(fn, x, w, b, steps=None, extra=(), tol=None, knobs=None):
    """Forward, backward and running stats of ``fn`` against eager for ``steps`` calls (default:
    until the fused backward has run once: the forward profiles for ``profiling_runs`` calls, then
    the backward graph for as many of its own)."""
    steps = 2 * config.profiling_runs + 1 if steps is None else steps
    dtype = x.dtype
    tol = tol or TOL[dtype]
    x = x.detach().requires_grad_()
    w, b = w.detach().requires_grad_(), b.detach().requires_grad_()
    c = x.shape[1]
    sdt = w.dtype
    rm_e = torch.randn(c, dtype=sdt, device="cuda") * 0.1
    rv_e = torch.rand(c, dtype=sdt, device="cuda") + 0.5
    rm_f, rv_f = rm_e.clone(), rv_e.clone()
    sf = graphfuser.script(fn)
    knobs = dict(knobs or {})
    knobs["disable"] = ["fallback"] + knobs.get("disable", [])
    half = dtype in HALF
    rm_r, rv_r = rm_e.double(), rv_e.double()
    with config.override(**knobs):
        for k in range(steps):
            torch.manual_seed(100 + k)
            gy = torch.randn(x.shape, device="cuda").to(dtype)
            ye = fn(x, w, b, rm_e, rv_e, *extra)
            yf = sf(x, w, b, rm_f, rv_f, *extra)
            ge = torch.autograd.grad(ye, [x, w, b], gy)
            gf = torch.autograd.grad(yf, [x, w, b], gy)
            got = [yf, *gf, rm_f, rv_f]
            want = [ye, *ge, rm_e, rv_e]
            names = ["output", "grad of x", "grad of weight", "grad of bias", "running_mean", "running_var"]
            if half or x.numel() // c >= 65536:
                # (fp32 over long channels, the benchmark's 200,704 values per channel: the two
                # sum orders differ by more than a fixed tolerance, both a few ulps of the sum of
                # magnitudes from the float64 value.)
                # eager rounds every elementwise result of the backward to fp16 / bf16, the fused
                # kernels once at the end: over sums of thousands of values the two differ by more
                # than a fixed tolerance. Both are compared with a float64 eager run instead: the
                # fused error is at most eager's (plus an ulp of the dtype).
                xr, wr, br = (t.detach().double().requires_grad_() for t in (x, w, b))
                yr = fn(xr, wr, br, rm_r, rv_r, *[e.double() for e in extra])
                gr = torch.autograd.grad(yr, [xr, wr, br], gy.double())
                ref = [yr, *gr, rm_r, rv_r]
                for name, a, e, r in zip(names, got, want, ref):
                    err_f = (a.double() - r).abs().max().item() if r.numel() else 0.0
                    err_e = (e.double() - r).abs().max().item() if r.numel() else 0.0
                    scale = r.abs().max().item() if r.numel() else 0.0
                    ulp = torch.finfo(dtype).eps * max(scale, 1.0)
                    # fp32 over long channels: the split kernels' Chan combines of 200,704 values
                    # (the running variance) are 8 ulps from the float64 value where cuDNN is 2
                    ulps = 2 if half else 8
                    assert err_f <= 2 * err_e + ulps * ulp, f"step {k} {name}: fused error {err_f}, eager's {err_e}"
                continue
            for name, a, e in zip(names, got, want):
                torch.testing.assert_close(a, e, **tol, msg=lambda m: f"step {k} {name}: {m}")
    return sf


@pytest.mark.parametrize("dtype", [torch.float32] + HALF)
@pytest.mark.parametrize("layout", ["channels_last", "contiguous"])
@pytest.mark.parametrize("shape", [(3, 5, 7, 9), (16, 64, 28, 28), (2, 3, 1, 1), (40, 24), (6, 10, 33)])
def test_batch_norm_training(shape, layout, dtype, split_mode, capsys):
    x = x_of(shape, dtype, layout)
    c = shape[1]
    w = (torch.rand(c, device="cuda") + 0.5).to(dtype)
    b = torch.randn(c, device="cuda").to(dtype)
    fn = bn_relu if x.numel() < 10000 else bn_silu
    sf = _bn_steps(fn, x, w, b, knobs={"dump": ["launch_param"]})
    names = launched(capsys.readouterr().out)
    assert names and all(("split" in n) == (split_mode == "split") for n in names), names
    groups = [n for n in sf._optimized.all_nodes() if n.kind == "prim::CudaFusionGroup"]
    assert len(groups) == 1, str(sf._optimized)
    assert any(k in str(groups[0].subgraph) for k in ("aten::batch_norm", "graphfuser::batch_norm_train"))


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("layout", ["channels_last", "contiguous"])
def test_batch_norm_training_half_input_float_params(dtype, layout):
    """What autocast gives a batch norm after a convolution: half input, fp32 weight and stats."""
    x = x_of((8, 48, 14, 14), dtype, layout)
    w, b = torch.rand(48, device="cuda") + 0.5, torch.randn(48, device="cuda")
    _bn_steps(bn_silu, x, w, b)


@pytest.mark.parametrize("layout", ["channels_last", "contiguous"])
def test_batch_norm_training_residual_and_module(layout):
    x = x_of((8, 32, 20, 20), layout=layout)
    r = torch.randn_like(x)
    w, b = torch.rand(32, device="cuda") + 0.5, torch.randn(32, device="cuda")
    _bn_steps(bn_add_relu, x, w, b, extra=(r,))

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bn = torch.nn.BatchNorm2d(32)

        def forward(self, x):
            return self.bn(x).relu()

    me = Block().cuda()
    mf = copy.deepcopy(me)
    sf = graphfuser.script(mf)
    xe = x.detach().requires_grad_()
    with config.override(disable=["fallback"]):
        for _ in range(4):
            gy = torch.randn_like(x)
            ye, yf = me(xe), sf(xe)
            ge = torch.autograd.grad(ye, [xe] + list(me.parameters()), gy)
            gf = torch.autograd.grad(yf, [xe] + list(mf.parameters()), gy)
            torch.testing.assert_close(yf, ye, **TOL[torch.float32])
            for a, e in zip(gf, ge):
                torch.testing.assert_close(a, e, **TOL[torch.float32])
            for a, e in zip(mf.buffers(), me.buffers()):
                torch.testing.assert_close(a, e, **TOL[torch.float32])


@pytest.mark.parametrize("shape", [(0, 5, 7, 9), (3, 5, 0, 9)])
@pytest.mark.parametrize("layout", ["channels_last", "contiguous"])
def test_batch_norm_training_empty(shape, layout):
    x = x_of(shape, layout=layout)
    _bn_steps(bn_relu, x, torch.rand(5, device="cuda") + 0.5, torch.randn(5, device="cuda"), steps=2)


@pytest.mark.parametrize("layout", ["channels_last", "contiguous"])
def test_batch_norm_training_benchmark_shape(layout, capsys):
    """The benchmark's [64, 256, 56, 56] fp32: sums of 200,704 values per channel, by the split
    schedules (the default heuristics pick them), forward and backward."""
    x = x_of((64, 256, 56, 56), layout=layout)
    w, b = torch.rand(256, device="cuda") + 0.5, torch.randn(256, device="cuda")
    runs = config.profiling_runs
    steps = 2 * runs + 2
    _bn_steps(bn_silu, x, w, b, steps=steps, tol=dict(rtol=1e-4, atol=1e-4), knobs={"dump": ["launch_param"]})
    names = launched(capsys.readouterr().out)
    # the forward kernel every step after the forward's profiling calls, the backward kernel every
    # step after the backward graph's own
    assert sum("split" in n for n in names) >= (steps - runs) + (steps - 2 * runs), names
    assert len({n for n in names if "split" in n}) >= 2, names


def test_batch_norm_training_is_repeatable():
    """Same inputs, same bits: the split kernels combine partials in one fixed order. Compared
    from the first call whose forward and backward both run fused (the backward graph profiles
    its own ``profiling_runs`` calls, op by op, after the forward's)."""
    x = x_of((32, 64, 30, 30)).requires_grad_()
    w = (torch.rand(64, device="cuda") + 0.5).requires_grad_()
    b = torch.randn(64, device="cuda").requires_grad_()
    gy = torch.randn_like(x)
    sf = graphfuser.script(bn_relu)
    first = 2 * config.profiling_runs
    results = []
    with config.override(disable=["fallback"]):
        for _ in range(first + 3):
            rm, rv = torch.zeros(64, device="cuda"), torch.ones(64, device="cuda")
            y = sf(x, w, b, rm, rv)
            results.append((y, *torch.autograd.grad(y, [x, w, b], gy), rm, rv))
    names = ["output", "grad of x", "grad of weight", "grad of bias", "running_mean", "running_var"]
    for later in results[first + 1:]:
        for name, a, e in zip(names, later, results[first]):
            assert torch.equal(a, e), name


def test_knob_leaves_batch_norm_training_to_eager():
    x = x_of((8, 16, 9, 7))
    w, b = torch.rand(16, device="cuda") + 0.5, torch.randn(16, device="cuda")
    sf = _bn_steps(bn_relu, x, w, b, knobs={"disable": ["fallback", "batch_norm_training"]})
    for n in sf._optimized.all_nodes():
        if n.kind == "prim::CudaFusionGroup":
            assert all(k not in str(n.subgraph) for k in ("aten::batch_norm", "graphfuser::batch_norm_train")), \
                str(sf._optimized)


def int_stats(x, m):
    return x.sum([0, 2]), x.amax([0, 2]), x.amin(0), m.sum([0, 2]), (x * 3).sum(0, keepdim=True) - x


@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.int64])
@pytest.mark.parametrize("shape", [(300, 70, 5), (3, 5, 7)])
def test_integer_and_bool_outer_reductions(dtype, shape, split_mode, capsys):
    torch.manual_seed(0)
    x = torch.randint(-3, 4, shape, device="cuda", dtype=dtype).transpose(1, 2).contiguous().transpose(1, 2)
    m = torch.rand(shape, device="cuda").transpose(1, 2).contiguous().transpose(1, 2) > 0.7
    run(int_stats, x, m, tol=dict(rtol=0, atol=0))
    names = launched(capsys.readouterr().out)
    assert names and all(("split" in n) == (split_mode == "split") for n in names if "outer" in n), names


def col_sums(x):
    return x.sum([0, 2, 3]), x.amax([0, 2, 3])


def test_split_scratch_is_kept_per_stream_and_stays_correct(monkeypatch):
    """Split kernels' partials and counters come from buffers kept per stream: repeated calls,
    growing sizes, single-pass (self-resetting counters) and barrier kernels (counters zeroed per
    launch) interleaved on one stream, and the same on a side stream, all match eager; after the
    first calls no launch allocates scratch."""
    from graphfuser.runtime import scratch

    monkeypatch.setattr(reduction_launch, "OUTER_SPLIT_MIN_ROWS", 1)
    monkeypatch.setattr(reduction_launch, "OUTER_SPLIT_TILES", 10 ** 6)
    monkeypatch.setattr(reduction_launch, "SPLIT_SYNC_MIN_VECTORS", 1)
    monkeypatch.setattr(reduction_launch, "SPLIT_SYNC_ROWS", 10 ** 6)
    from graphfuser.executor import compiled

    monkeypatch.setattr(compiled, "_MEMORY", {})
    grown = []
    real_grow = scratch.SplitScratch._grow
    monkeypatch.setattr(scratch.SplitScratch, "_grow", lambda self, *a: grown.append(a[:4]) or real_grow(self, *a))
    w, b = torch.rand(64, device="cuda") + 0.5, torch.randn(64, device="cuda")
    f_sums, f_stats, f_bn = graphfuser.script(col_sums), graphfuser.script(stats), graphfuser.script(bn_silu)
    side = torch.cuda.Stream()
    with config.override(disable=["fallback"]):
        for stream in (torch.cuda.current_stream(), side):
            with torch.cuda.stream(stream):
                for step in range(6):
                    for shape in [(64, 64, 9, 9), (8, 64, 30, 30)]:
                        x = x_of(shape, seed=step)
                        torch.testing.assert_close(f_sums(x), col_sums(x), rtol=1e-4, atol=1e-3)
                        torch.testing.assert_close(f_stats(x), stats(x), rtol=1e-4, atol=1e-3)
                        rm, rv = torch.zeros(64, device="cuda"), torch.ones(64, device="cuda")
                        rm2, rv2 = rm.clone(), rv.clone()
                        torch.testing.assert_close(f_bn(x, w, b, rm, rv), bn_silu(x, w, b, rm2, rv2),
                                                   rtol=1e-4, atol=1e-4)
                        torch.testing.assert_close((rm, rv), (rm2, rv2), rtol=1e-4, atol=1e-5)
                    if step == 2:
                        settled = len(grown)
                assert len(grown) == settled, grown                   # warm: no allocation
            side.synchronize()
    assert {g[0] for g in grown} == {torch.cuda.current_stream().cuda_stream, side.cuda_stream}
    assert {g[3] for g in grown} == {True, False}                     # barrier and single-pass kernels
