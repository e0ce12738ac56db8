"""Random rows: dropout in training, native_dropout, rand_like, bernoulli (Philox4x32-10).

The fused kernels must draw exactly what the fallback's torch implementation (``ops/philox.py``)
draws for the same (seed, offset): that is what makes a seed reproduce a run, the backward
regenerate the forward's mask, and the numbers independent of the schedule. Statistics check
the generator itself. Masks are not bit-equal to eager's (different streams).
"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.codegen.pointwise import PointwiseParams, pointwise_heuristics
from graphfuser.config import config
from graphfuser.ops.philox import philox_state, philox_uniform, philox_words
from graphfuser.ops.random import dropout_mask

from tests.helpers import DEVICES, fallback_counter, fusion_groups, make_input
from helpers import cuda_compiles

FLOATS = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


def _scripted(fn, *args, seed: int = 0):
    """Script ``fn`` and run it past profiling; returns (scripted function, fallback counter)."""
    sf = graphfuser.script(fn)
    counts = None
    for _ in range(graphfuser.config.profiling_runs + 1):
        torch.manual_seed(seed)
        sf(*args)
        if counts is None and sf._optimized is not None:
            counts = fallback_counter(sf)
    assert sf._optimized is not None
    return sf, counts


def _state(x: torch.Tensor, seed: int) -> tuple[int, int]:
    torch.manual_seed(seed)
    return philox_state(x, x.numel())


def _dropout_ref(y: torch.Tensor, p: float, seed: int, offset: int) -> torch.Tensor:
    keep = dropout_mask(y, p, seed, offset)
    scale = 0.0 if p >= 1 else 1.0 / (1.0 - p)
    ct = torch.float64 if y.dtype == torch.float64 else torch.float32
    return (y.to(ct) * torch.where(keep, scale, 0.0).to(ct)).to(y.dtype)


# -- the generator ------------------------------------------------------------------------------
def test_philox_known_answer():
    # Random123's known-answer vector: philox4x32-10, counter 0, key 0
    w0, w1 = philox_words(0, 0, (1,), "cpu")
    assert (int(w0), int(w1)) == (0x6627E8D5, 0xE169C58D)
    # counter words 2-3 (the offset) and key words (the seed) all ones
    w0, w1 = philox_words(-1, -1, (1,), "cpu")
    assert int(w0) != 0x6627E8D5


def test_uniform_range_and_moments():
    for dt in (torch.float32, torch.float64):
        u = philox_uniform(123, 7, (200_000,), "cpu", dt)
        assert u.dtype == dt and u.min() >= 0 and u.max() < 1
        assert abs(u.mean().item() - 0.5) < 5 * math.sqrt(1 / 12 / u.numel())
        assert abs(u.var().item() - 1 / 12) < 2e-3


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(37, 19), (33, 64), (5, 3, 8)])
def test_kernel_draws_the_reference_numbers(device, shape):
    """The C Philox of both dialects equals the torch one, bit for bit (rand_like in fp32/fp64),
    scalar and vector kernels (rows of a multiple of 8: lanes sharing a block, gf_lane4)."""
    def fn(x):
        return torch.rand_like(x) + 0.0

    for dt in (torch.float32, torch.float64):
        x = torch.zeros(*shape, dtype=dt, device=device)
        sf, counts = _scripted(fn, x, seed=5)
        torch.manual_seed(5)
        out = sf(x)
        seed, off = _state(x, 5)
        ref = philox_uniform(seed, off, x.shape, device, dt)
        assert torch.equal(out, ref)
        assert counts["fallback"] == 0 and fusion_groups(sf._optimized)


# -- dropout fused with its neighbours -----------------------------------------------------------
def _bias_gelu_dropout_residual(x, b):
    return F.dropout(F.gelu(x + b), 0.25, True) + x


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("layout", ["dense", "transposed", "sliced"])
def test_bias_gelu_dropout_residual(device, dtype, layout):
    x = make_input(33, 65, dtype=dtype, layout=layout, device=device)
    b = make_input(65, dtype=dtype, device=device)
    sf, counts = _scripted(_bias_gelu_dropout_residual, x, b, seed=3)
    torch.manual_seed(3)
    out = sf(x, b)
    seed, off = _state(x, 3)
    ref = _dropout_ref(F.gelu(x + b), 0.25, seed, off) + x
    tol = {torch.float16: 5e-3, torch.bfloat16: 4e-2}.get(dtype, 1e-5)
    torch.testing.assert_close(out, ref, rtol=tol, atol=tol)
    # the mask itself is exact: dropped elements are exactly the residual
    dropped = ~dropout_mask(x, 0.25, seed, off)
    assert torch.equal(out[dropped], x[dropped])
    assert counts["fallback"] == 0
    groups = fusion_groups(sf._optimized)
    assert len(groups) == 1 and "graphfuser::dropout" in str(groups[0].subgraph)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(0,), (0, 5), (1,), (7,), (3, 1, 5), (2, 3, 4, 5)])
def test_odd_and_zero_sizes(device, shape):
    def fn(x):
        return F.dropout(x * 2.0, 0.5, True)

    x = torch.randn(shape, device=device)
    sf, _ = _scripted(fn, x, seed=9)
    torch.manual_seed(9)
    out = sf(x)
    seed, off = _state(x, 9)
    torch.testing.assert_close(out, _dropout_ref(x * 2.0, 0.5, seed, off))


@pytest.mark.parametrize("device", DEVICES)
def test_channels_last(device):
    def fn(x):
        return F.dropout(torch.relu(x), 0.3, True)

    x = torch.randn(2, 3, 5, 7, device=device).to(memory_format=torch.channels_last)
    sf, counts = _scripted(fn, x, seed=4)
    torch.manual_seed(4)
    out = sf(x)
    seed, off = _state(x, 4)
    torch.testing.assert_close(out, _dropout_ref(torch.relu(x), 0.3, seed, off))
    assert counts["fallback"] == 0


def test_schedule_does_not_change_the_numbers(monkeypatch):
    """Forcing different CPU schedules (chunk sizes: one chunk, odd chunks, one element per
    chunk) gives bit-identical results: each number depends on (seed, offset, element) only."""
    import graphfuser.executor.compiled as compiled

    def fn(x):
        return F.dropout(x + 1.0, 0.5, True) * torch.rand_like(x)

    x = torch.randn(1000, 3)
    results, sources = [], []
    build = compiled._build_launcher

    def recording(cg):
        sources.append(cg.source)
        return build(cg)

    monkeypatch.setattr(compiled, "_build_launcher", recording)
    for chunk in (4096, 7, 1):
        monkeypatch.setattr(compiled, "pointwise_heuristics",
                            lambda k, t, knobs, vectorize=True, c=chunk: PointwiseParams("cpu", cpu_chunk=c))
        monkeypatch.setattr(compiled, "_MEMORY", {})
        sf, counts = _scripted(fn, x.view(-1), seed=1)
        torch.manual_seed(1)
        results.append(sf(x.view(-1)))
        assert counts["fallback"] == 0
    assert len(set(sources)) == 3          # three different kernels ...
    assert torch.equal(results[0], results[1]) and torch.equal(results[0], results[2])   # ... same numbers


def test_unroll_with_rng_knob_changes_the_cuda_schedule():
    """``PYTORCH_NVFUSER_DISABLE=unroll_with_rng``: random kernels get neither vectorization nor
    unrolling (nvFuser's meaning); kernels without random ops keep them."""
    from graphfuser.codegen.lower import lower_group
    from graphfuser.ir import parse_graph
    from tests.helpers import FT

    def lowered(body: str):
        g = parse_graph(f"""graph(%x : {FT(64, 128, device='cuda')}, %s : int, %o : int):
  %p : float = prim::Constant[value=0.5]()
  %y : {FT(64, 128, device='cuda')} = {body}
  return (%y)""")
        return lower_group(g)[0]

    rng = lowered("graphfuser::dropout(%x, %p, %s, %o)")
    plain = lowered("aten::mul(%x, %p)")
    knobs = dict(config.cuda, unroll=4, auto=False)
    assert rng.has_random() and not plain.has_random()
    assert pointwise_heuristics(rng, "cuda", knobs).vector > 1
    with config.override(disable=["unroll_with_rng"]):
        p = pointwise_heuristics(rng, "cuda", knobs)
        assert (p.vector, p.unroll) == (1, 1)
        q = pointwise_heuristics(plain, "cuda", knobs)
        assert q.vector > 1 and q.unroll == 4
        assert "unroll_with_rng" in config.codegen_key()     # the kernel cache tells them apart


RANDOM_BODIES = {
    "philox_dropout": "graphfuser::dropout(%x, %p, %s, %o)",
    "philox_native_dropout": "graphfuser::native_dropout(%x, %p, %s, %o)",
    "philox_rand_like": "graphfuser::rand_like(%x, %s, %o)",
    "philox_bernoulli": "graphfuser::bernoulli(%x, %s, %o)",
    "philox_bernoulli_p": "graphfuser::bernoulli_p(%x, %p, %s, %o)",
}


def test_every_random_row_compiles_with_nvrtc():
    """Every random row in every float dtype renders both CUDA variants (vectorized: the lane
    steps the linear index) and compiles with NVRTC; the lane term is only in the vectorized one."""
    from graphfuser.codegen.cstyle import render_function, render_source
    from graphfuser.codegen.dialects import CUDA
    from graphfuser.codegen.lower import lower_group
    from graphfuser.codegen.pointwise import schedule_pointwise
    from graphfuser.ir import parse_graph
    from graphfuser.ops.random import RANDOM_ROWS
    from graphfuser.runtime import nvrtc
    from tests.helpers import FT

    assert set(RANDOM_BODIES) == set(RANDOM_ROWS)
    names = {torch.float32: "Float", torch.float16: "Half", torch.bfloat16: "BFloat16", torch.float64: "Double"}
    fns = []
    for row, body in RANDOM_BODIES.items():
        for dt, tname in names.items():
            t = FT(64, 128, dtype=tname, device="cuda")
            outs = f"%y : {t}" + (f", %m : {FT(64, 128, dtype='Bool', device='cuda')}" if "native" in row else "")
            rets = "%y, %m" if "native" in row else "%y"
            g = parse_graph(f"""graph(%x : {t}, %s : int, %o : int):
  %p : float = prim::Constant[value=0.5]()
  {outs} = {body}
  return ({rets})""")
            k = lower_group(g)[0]
            for vec in (1, 4):
                nest = schedule_pointwise(k, PointwiseParams("cuda", vector=vec, block=128, unroll=2))
                fns.append(render_function(k, nest, CUDA, f"k_{row}_{tname}_{vec}"))
                assert "gf_philox_uniform_f" in fns[-1]
                # 4 lanes from a multiple of 4: one Philox block for the four (gf_lane4)
                assert ("gf_lane4{" in fns[-1]) == (vec > 1)
    ok, why = nvrtc.available()
    if not ok:
        pytest.skip(why)
    assert cuda_compiles(render_source(fns, CUDA), "k_philox_dropout_Float_1", 90)


# -- statistics ---------------------------------------------------------------------------------
def _drop_0(x):
    return F.dropout(x, 0.0, True)


def _drop_01(x):
    return F.dropout(x, 0.1, True)


def _drop_05(x):
    return F.dropout(x, 0.5, True)


def _drop_09(x):
    return F.dropout(x, 0.9, True)


def _drop_1(x):
    return F.dropout(x, 1.0, True)


DROPOUTS = {0.0: _drop_0, 0.1: _drop_01, 0.5: _drop_05, 0.9: _drop_09, 1.0: _drop_1}


@pytest.mark.parametrize("p", list(DROPOUTS))
def test_keep_rate_and_scale(p):
    fn = DROPOUTS[p]

    x = torch.ones(256, 1024)
    sf, counts = _scripted(fn, x)
    out = sf(x)
    n = x.numel()
    kept = out != 0
    rate = kept.float().mean().item()
    sigma = math.sqrt(p * (1 - p) / n)
    assert abs(rate - (1 - p)) <= 6 * sigma + 1e-12
    if p == 1.0:
        assert torch.equal(out, torch.zeros_like(x))
    elif p == 0.0:
        assert torch.equal(out, x)
    else:
        torch.testing.assert_close(out[kept], torch.full_like(out[kept], 1 / (1 - p)))
    assert counts["fallback"] == 0


def test_independence_across_elements_and_calls():
    def fn(x):
        return F.dropout(x, 0.5, True)

    x = torch.ones(512, 512)
    sf, _ = _scripted(fn, x)
    a = (sf(x) != 0).float().view(-1)
    b = (sf(x) != 0).float().view(-1)
    n = a.numel()
    bound = 6 / math.sqrt(n)
    corr = lambda u, v: ((u - u.mean()) * (v - v.mean())).mean().item() / (u.std() * v.std()).item()
    assert abs(corr(a[:-1], a[1:])) < bound            # neighbours
    assert abs(corr(a[:-512], a[512:])) < bound        # rows
    assert abs(corr(a, b)) < bound                     # consecutive calls
    assert not torch.equal(a, b)


@pytest.mark.parametrize("device", DEVICES)
def test_same_seed_same_mask_different_seed_different(device):
    def fn(x):
        return F.dropout(x.sin(), 0.5, True)

    x = torch.randn(64, 64, device=device)
    sf, _ = _scripted(fn, x)
    torch.manual_seed(11)
    a1, a2 = sf(x), sf(x)
    torch.manual_seed(11)
    b1, b2 = sf(x), sf(x)
    torch.manual_seed(12)
    c1 = sf(x)
    assert torch.equal(a1, b1) and torch.equal(a2, b2)
    assert not torch.equal(a1, a2) and not torch.equal(a1, c1)


def test_same_seed_same_mask_across_processes(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "run.py"
    script.write_text(
        "import torch, graphfuser\nimport torch.nn.functional as F\n"
        "def fn(x):\n    return F.dropout(x + 1.0, 0.5, True)\n"
        "sf = graphfuser.script(fn)\nx = torch.ones(100)\n"
        "for _ in range(4):\n    sf(x)\n"
        "torch.manual_seed(7)\nprint(''.join('1' if v else '0' for v in (sf(x) != 0).tolist()))\n")
    import os

    env = dict(os.environ, PYTHONPATH=os.getcwd())
    runs = [subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, check=True).stdout
            for _ in range(2)]
    assert runs[0] == runs[1] and len(runs[0].strip()) == 100


# -- rand_like, bernoulli, native_dropout -------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_rand_like(dtype):
    def fn(x):
        return torch.rand_like(x) * 2.0

    x = torch.zeros(300, 301, dtype=dtype)
    sf, counts = _scripted(fn, x)
    out = sf(x) / 2.0
    assert out.dtype == dtype and out.min() >= 0 and out.max() < 1
    assert abs(out.float().mean().item() - 0.5) < 0.01
    assert counts["fallback"] == 0


def test_bernoulli_tensor_and_float_p():
    def fn_t(p):
        return torch.bernoulli(p * 1.0)

    def fn_f(x):
        return torch.bernoulli(x, 0.3) + 0.0

    p = torch.linspace(0, 1, 400).repeat(500, 1)
    sf, counts = _scripted(fn_t, p)
    out = sf(p)
    assert set(out.unique().tolist()) <= {0.0, 1.0}
    rate = out.mean(0)
    assert (rate - p[0]).abs().max() < 6 * math.sqrt(0.25 / 500)
    assert out[:, 0].sum() == 0 and out[:, -1].sum() == 500
    x = torch.zeros(400, 500)
    sf, counts2 = _scripted(fn_f, x)
    assert abs(sf(x).mean().item() - 0.3) < 6 * math.sqrt(0.21 / x.numel())
    assert counts["fallback"] == 0 and counts2["fallback"] == 0


def test_native_dropout():
    def fn(x):
        out, mask = torch.native_dropout(x * 3.0, 0.2, True)
        return out, mask

    x = torch.randn(40, 41)
    sf, counts = _scripted(fn, x, seed=2)
    torch.manual_seed(2)
    out, mask = sf(x)
    seed, off = _state(x, 2)
    assert torch.equal(mask, dropout_mask(x, 0.2, seed, off))
    torch.testing.assert_close(out, x * 3.0 * mask / 0.8)
    assert counts["fallback"] == 0
    assert "graphfuser::native_dropout" in str(fusion_groups(sf._optimized)[0].subgraph)


def test_runtime_training_flag_specializes():
    """``F.dropout(x, p, training)`` with a run-time bool profiled as a constant specializes on it
    (a guarded constant): the fused Philox dropout while it holds, the other value still right."""
    def fn(x, training: bool):
        return F.dropout(x + 1.0, 0.5, training)

    x = torch.ones(64, 64)
    sf = graphfuser.script(fn)
    for _ in range(4):
        out = sf(x, True)
    assert set(out.unique().tolist()) <= {0.0, 4.0}
    assert "graphfuser::dropout" in str(sf._optimized)
    assert torch.equal(sf(x, False), x + 1.0)


# -- backward ------------------------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_dropout_backward_regenerates_the_mask(device, dtype):
    from graphfuser.autodiff.function import live_groups

    def fn(x, b):
        return F.dropout(torch.tanh(x * b), 0.4, True) + x

    x = torch.randn(32, 17, dtype=dtype, device=device, requires_grad=True)
    b = torch.randn(17, dtype=dtype, device=device, requires_grad=True)
    sf = graphfuser.script(fn)
    for _ in range(4):
        sf(x, b).sum().backward()
    x.grad = b.grad = None
    torch.manual_seed(21)
    out = sf(x, b)
    g = torch.randn_like(out)
    out.backward(g)
    seed, off = _state(x, 21)
    keep = dropout_mask(x, 0.4, seed, off)
    x2, b2 = x.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    ref = torch.tanh(x2 * b2) * keep / 0.6 + x2
    ref.backward(g)
    tol = {torch.bfloat16: 4e-2}.get(dtype, 1e-5)
    torch.testing.assert_close(out, ref, rtol=tol, atol=tol)
    torch.testing.assert_close(x.grad, x2.grad, rtol=tol, atol=tol)
    torch.testing.assert_close(b.grad, b2.grad, rtol=tol, atol=tol)
    # no mask is saved: the backward graph draws it again from (seed, offset)
    dgs = [dg for dg in live_groups() if "graphfuser::dropout" in str(dg.group.subgraph)]
    assert dgs and "graphfuser::dropout(%grad" in str(dgs[-1].plan.graph)


@pytest.mark.cuda
def test_cuda_schedules_and_unroll_with_rng_give_the_same_numbers(monkeypatch):
    """On the GPU: block sizes, unroll factors, vectorized or not, and unroll_with_rng all draw
    the same numbers (bit-equal), and equal the torch reference."""
    import graphfuser.executor.compiled as compiled

    def fn(x):
        return F.dropout(x * 1.5, 0.3, True) + torch.rand_like(x)

    x = torch.randn(257, 1031, device="cuda", dtype=torch.float16)
    results = []
    settings = [({}, []), ({"block_size": 64, "unroll": 4}, []),
                ({"block_size": 256, "unroll": 1}, []), ({}, ["unroll_with_rng"])]
    for cuda, disable in settings:
        monkeypatch.setattr(compiled, "_MEMORY", {})
        with config.override(cuda=dict(config.cuda, **cuda), disable=disable):
            sf, counts = _scripted(fn, x, seed=6)
            torch.manual_seed(6)
            results.append(sf(x))
            assert counts["fallback"] == 0
    for r in results[1:]:
        assert torch.equal(r, results[0])


def test_captured_calls_take_offsets_relative_to_a_device_base():
    """While a training call is captured into a CUDA graph (executor/cuda_graphs_train.py), each
    random op gets the address of {seed, base} as its seed and an offset counted from 0 within
    the call, marked by bit 63, rounded up to 4 per op as the generator's offsets are; a
    recompute hands out one replay's absolute offsets again in the same order."""
    from graphfuser.ops.philox import _MARK, _Capture

    c = _Capture(None, 0xABC0, 0)
    assert c.take(10) == (0xABC0, _MARK + 0)
    assert c.take(5) == (0xABC0, _MARK + 12)
    assert c.take(4) == (0xABC0, _MARK + 20)
    assert c.used == 24
    f = _Capture(7, 100, 0)
    assert [f.take(10), f.take(5), f.take(4)] == [(7, 100), (7, 112), (7, 120)]


def test_fallback_refuses_a_device_base_offset():
    """A group's fallback cannot read the base from device memory: during a capture it raises
    (the capture fails and the call keeps its host program) instead of drawing other numbers."""
    from graphfuser.ops.philox import _MARK, philox_uniform

    with pytest.raises(RuntimeError, match="captured"):
        philox_uniform(0xABC0, _MARK + 8, (4, 4), "cpu")
    assert philox_uniform(3, 8, (4, 4), "cpu").shape == (4, 4)


def test_signed_seed_is_the_int64_of_the_seed_bits():
    from graphfuser.ops.philox import signed_seed

    g = torch.Generator()
    for seed, want in ((5, 5), (2 ** 63 - 1, 2 ** 63 - 1), (2 ** 63, -2 ** 63), (2 ** 64 - 1, -1)):
        g.manual_seed(seed)
        assert signed_seed(g) == want
