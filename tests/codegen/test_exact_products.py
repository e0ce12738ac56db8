"""Kernels with a max / min reduction round every product before adding
(``cstyle_reduction.exact_products``): their later passes recompute what they took the max of
and subtract the max, and a multiply-add contraction turned the max element's difference into
the product's rounding error (8192 for 200 * 1e10 in float32) and exp of it into inf: a
log_softmax of ``x * 1e10`` came out -inf everywhere (fuzz seed 10606, graph 1621). The CPU
source carries a GCC pragma, CUDA variants compile with NVRTC's ``--fmad=false``; kernels
without a max / min keep their multiply-adds. GPU runs: tests/cuda/test_cuda_exact_products.py."""
from __future__ import annotations

import pytest
import torch

import graphfuser
from graphfuser.config import config
from graphfuser.executor.compiled_reduction import ReductionGroup
from graphfuser.runtime import nvrtc
from helpers import cuda_compiles, fusion_groups


def scaled_log_softmax(x, s: float, dim: int):
    return torch._log_softmax(x * s, dim, False)


def scaled_softmax_minus_max(x, s: float):
    y = x * s
    return torch.softmax(y, -1), y - y.amax(-1, keepdim=True)


def scaled_layer_norm(x, s: float):
    return torch.nn.functional.layer_norm(x * s, x.shape[-1:])


ROWS = torch.tensor([[[7.0] * 4, [200.0] * 4, [13.0] * 4]])


@pytest.mark.parametrize("dim", [-1, -2])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
@pytest.mark.parametrize("s", [1e10, 1e30, 3.0])
def test_scaled_log_softmax_matches_eager(dim, dtype, s):
    x = ROWS.repeat(4, 1, 1).to(dtype)
    if dim == -1:
        x = x.transpose(1, 2).contiguous()
    sf = graphfuser.script(scaled_log_softmax)
    with config.override(disable=["fallback"]):
        for _ in range(4):
            got = sf(x, s, dim)
    torch.testing.assert_close(got, scaled_log_softmax(x, s, dim), rtol=1e-6, atol=0.0)
    assert fusion_groups(sf._optimized)


def test_softmax_and_max_differences_match_eager():
    x = torch.tensor([[7.0, 200.0, 13.0, 200.0, 1.0]]).repeat(3, 1)
    sf = graphfuser.script(scaled_softmax_minus_max)
    with config.override(disable=["fallback"]):
        for _ in range(4):
            got = sf(x, 1e10)
    for g, w in zip(got, scaled_softmax_minus_max(x, 1e10)):
        torch.testing.assert_close(g, w, rtol=1e-6, atol=0.0)


def _group(fn, *args, target="cpu"):
    sf = graphfuser.script(fn)
    for _ in range(4):
        sf(*args)
    (n,) = fusion_groups(sf._optimized)
    device = torch.device("cuda", 0) if target == "cuda" else torch.device("cpu")
    return ReductionGroup(n.subgraph, target, device, "k")


def test_only_kernels_with_a_max_or_min_give_up_multiply_adds():
    x = torch.randn(4, 16)
    soft, norm = _group(scaled_log_softmax, x, 2.0, -1), _group(scaled_layer_norm, x, 2.0)
    assert soft.exact_products and soft.source.startswith('#pragma GCC optimize ("fp-contract=off")')
    assert not norm.exact_products and "fp-contract" not in norm.source
    cuda = _group(scaled_log_softmax, x, 2.0, -1, target="cuda")
    assert cuda.exact_products and all("fp-contract" not in s for s in cuda.variant_sources)
    ok, why = nvrtc.available()
    if not ok:
        pytest.skip(why)
    for (fname, *_), src in zip(cuda.variants, cuda.variant_sources):
        assert cuda_compiles(src, fname, 90, ("--fmad=false",))
