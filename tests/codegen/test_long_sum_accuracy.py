"""Long reductions with a large mean, judged against float64 beside eager: sum (one row split
across threads, rows, columns, batch norm's N/H/W sums), mean, var, layer_norm and softmax over
about a million elements near 1000 (float32, and bfloat16 read into float32 sums), on the CPU
and (GPU-marked) on CUDA; every CUDA source these groups lower to compiles with NVRTC on any
machine, with its chunked, compensated sums.

A result farther from float64 than 2x eager's distance plus a floor (an ulp or so of the result)
fails. A serial float sum of 250,000 values near 1000 is some 300 ulps off, eager's cascade one,
so these cases tell a serial sum from a chunked one (``codegen/reduction/blocks.py``)."""
from __future__ import annotations

import re
from typing import Callable

import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.executor.compiled_reduction import ReductionGroup
from graphfuser.runtime import nvrtc
from helpers import cuda_compiles, fusion_groups


def sum_all(x, one):
    return (x * one).sum()


def sum_rows(x, one):
    return (x * one).sum(-1)


def sum_cols(x, one):
    return (x * one).sum(0)


def sum_channels(x, one):
    return (x * one).sum([0, 2, 3])


def mean_rows(x, one):
    return (x * one).mean(-1)


def var_rows(x, one):
    return (x * one).var(-1)


def layer_norm(x, one):
    return F.layer_norm(x * one, [x.shape[-1]])


def softmax(x, one):
    return torch.softmax(x * one, -1)


def log_softmax(x, one):
    return torch.log_softmax(x * one, -1)


CASES: list[tuple[Callable, tuple[int, ...]]] = [
    (sum_all, (1_000_003,)),
    (sum_rows, (4, 250_001)),
    (sum_cols, (250_001, 4)),
    (sum_channels, (16, 4, 125, 127)),
    (mean_rows, (4, 250_001)),
    (var_rows, (4, 250_001)),
    (layer_norm, (4, 250_001)),
    (softmax, (4, 250_001)),
    (log_softmax, (4, 250_001)),
]
IDS = [f.__name__ for f, _ in CASES]


def _data(fn: Callable, shape: tuple[int, ...], dtype: torch.dtype, device: str) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    x = torch.rand(shape, generator=g, dtype=torch.float64) * 2 + (0 if fn in (softmax, log_softmax) else 1000)
    return x.to(dtype).to(device)


def _fused(fn: Callable, *args: torch.Tensor) -> torch.Tensor:
    sf = graphfuser.script(fn)
    for _ in range(3):
        out = sf(*args)
    assert "FusionGroup" in str(graphfuser.last_executed_optimized_graph())
    return out


def check_against_float64(fn: Callable, x: torch.Tensor) -> None:
    """``one`` (a float32 [1] tensor) makes a bfloat16 input's values float32 (1-dim tensors take
    part in type promotion) and a float64 copy's stay float64, the reference."""
    one = torch.ones(1, device=x.device)
    out = _fused(fn, x, one)
    ref = fn(x.double(), one.double())
    eager = fn(x, one)
    d_eager = float((eager.double() - ref).abs().max())
    d_fused = float((out.double() - ref).abs().max())
    floor = torch.finfo(out.dtype).eps * float(ref.abs().max())
    assert d_fused <= 2 * d_eager + floor, f"graphfuser {d_fused:.3e}, eager {d_eager:.3e} from float64"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("fn,shape", CASES, ids=IDS)
def test_long_reductions_cpu(fn, shape, dtype):
    check_against_float64(fn, _data(fn, shape, dtype, "cpu"))


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("fn,shape", CASES, ids=IDS)
def test_long_reductions_cuda(fn, shape, dtype):
    check_against_float64(fn, _data(fn, shape, dtype, "cuda"))


@pytest.mark.parametrize("fn,shape", CASES, ids=IDS)
def test_long_reductions_cuda_sources_compile(fn, shape):
    """The CUDA kernels of these groups (every variant, 32- and 64-bit indices) compile, and a
    thread's serial sums run in compensated chunks wherever a variant has such a loop."""
    ok, why = nvrtc.available()
    if not ok:
        pytest.skip(f"NVRTC unavailable: {why}")
    x = _data(fn, tuple(min(s, 64) for s in shape), torch.float32, "cpu")
    sf = graphfuser.script(fn)
    for _ in range(3):
        sf(x, torch.ones(1))
    (group,) = fusion_groups(sf._optimized)
    cg = ReductionGroup(group.subgraph, "cuda", torch.device("cuda", 0), "k")
    cuda_compiles(cg.source, cg.variants[0][0], 90)
    if fn not in (softmax, log_softmax):     # (a sum of exponentials is a max / sum pair, online)
        assert "c = t - t == 0 ? (t - acc" in cg.source


def _nan_inf_rows(x):
    return (x * 2.0).sum(-1), (x * 2.0).sum()


def test_chunked_sums_keep_nan_inf_and_constant_rows():
    """NaN and infinities anywhere in a chunk end the compensation and reach the result as in
    eager; a constant row sums exactly; a sum that overflows part way is inf."""
    x = torch.full((6, 5003), 1000.5)
    x[0, 10], x[1, 4000], x[2, 3], x[2, 4500] = float("inf"), float("nan"), float("inf"), -float("inf")
    x[3, 4999] = -float("inf")
    x[4] = 1e35                              # 5003 * 2e35 overflows float32 part way
    got, want = _fused(_nan_inf_rows, x), _nan_inf_rows(x)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, equal_nan=True)
    assert float(got[0][5]) == 2001 * 5003          # every partial sum an integer below 2^24


@pytest.mark.parametrize("fn,block", [(softmax, 256), (log_softmax, 256), (sum_rows, 32), (var_rows, 32)])
def test_sums_of_exponentials_take_longer_chunks_on_the_cpu(fn, block):
    """Positive terms cancel nothing: softmax's sum of exponentials adds 256 values a chunk (32
    a simd lane), the other float sums 32 (the accuracy tests above hold for both)."""
    x = _data(fn, (4, 1000), torch.float32, "cpu")
    sf = graphfuser.script(fn)
    for _ in range(3):
        sf(x, torch.ones(1))
    (group,) = fusion_groups(sf._optimized)
    src = ReductionGroup(group.subgraph, "cpu", torch.device("cpu"), "k").source
    chunks = set(re.findall(r"i\d+b \+= (\d+)\)", src))
    assert chunks == {str(block)}, chunks
