"""CUDA row reductions with a tensor strided along the row (no GPU needed: the source is read
and compiled with NVRTC): the dense tensors keep vector loads, the strided one is gathered lane
by lane with its row stride, a strided output is scattered, the launcher checks only the dense
tensors' alignment, and ``PYTORCH_NVFUSER_DISABLE=vector_gather`` or a transposed tile (a
channels-last tensor among NCHW ones in a group norm) keeps scalar accesses throughout."""
from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.config import config
from graphfuser.executor.compiled_reduction import ReductionGroup, launcher_source
from graphfuser.ir import parse_graph, print_graph

from helpers import cuda_ptx, biased_scores_and_softmax, fusion_groups, masked_softmax


def residual_group_norm(x, y, w, b):
    return F.group_norm(x + y, 1, w, b, 1e-5)


def _cuda_group(fn, *args, **disable) -> ReductionGroup:
    sf = graphfuser.script(fn)
    for _ in range(3):
        sf(*args)
    (g,) = fusion_groups(sf._optimized)
    sub = parse_graph(print_graph(g.subgraph).replace("device=cpu", "device=cuda:0"))
    with config.override(**disable):
        return ReductionGroup(sub, "cuda", torch.device("cuda", 0), "k")


def _softmax_group(**disable) -> ReductionGroup:
    scores = torch.randn(2, 4, 8, 64)
    bias = torch.randn(2, 8, 64, 4, dtype=torch.bfloat16).permute(0, 3, 1, 2)
    return _cuda_group(masked_softmax, scores, bias, **disable)


def test_dense_tensors_load_vectors_and_the_strided_one_is_gathered():
    cg = _softmax_group()
    tags = [v[2].tag for v in cg.variants]
    assert "p4_v4" in tags and "mp_v4" in tags, tags
    src = cg.source
    params = re.search(r"k_p4_v4_i32\((.*?)\)", src).group(1)
    assert "const float* __restrict__ t0" in params and "const unsigned short* __restrict__ t1" in params
    assert re.search(r"b_t1\[v\] = t1\[.* \+ v \* st1_3\];", src)          # the bias, lane by lane
    assert "gf_cp_async<16>" in src and "gf_load<4>(b_t0" in src          # the scores, staged vectors
    assert not re.search(r"gf_cp_async<\d+>\([^;]*&t1\[", src)             # the bias is never staged
    assert "gf_store<4>(t2" in src
    from graphfuser.runtime import nvrtc
    if nvrtc.available()[0]:
        names = re.findall(r"__global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(", src)
        ptx = cuda_ptx(src, names[0], 90)
        assert all(f".entry {n}(".encode() in ptx for n in names)


def test_the_launcher_checks_only_the_dense_tensors_alignment():
    src = launcher_source(_softmax_group())
    vec = next(line for line in src.splitlines() if line.strip().startswith("vec = not"))
    assert "a[0]" in vec and "a[2]" in vec and "a[1]" not in vec, vec


def test_a_strided_output_is_scattered():
    bias = torch.randn(2, 8, 64, 4, dtype=torch.bfloat16).permute(0, 3, 1, 2)
    cg = _cuda_group(biased_scores_and_softmax, bias, torch.randn(2, 4, 8, 64))
    k = cg.kernel
    strided = [p for p, t in enumerate(k.tensors) if t.is_output and t.dim_kinds[-1] == "strided"]
    assert k.kind == "inner" and strided, [(t.name, t.dim_kinds) for t in k.tensors]
    assert any(v[2].tag.endswith("_v4") for v in cg.variants)
    p = strided[0]
    assert re.search(rf"for \(int v = 0; v < 4; \+\+v\) t{p}\[.* \+ v \* st{p}_\d+\] = b_t{p}\[v\];", cg.source)


def test_no_gathers_beside_inputs_no_wider_than_the_strided_one():
    """A strided tensor as wide as every contiguous input (a transposed float32 activation beside
    float32 scores or a bool mask) keeps the scalar variants: the vectors' NVRTC time buys less."""
    bias = torch.randn(2, 8, 64, 4).permute(0, 3, 1, 2)
    cg = _cuda_group(masked_softmax, torch.randn(2, 4, 8, 64), bias)
    assert all(v[2].vector == 1 for v in cg.variants)


def test_the_knob_keeps_scalar_variants():
    cg = _softmax_group(disable=["vector_gather"])
    assert all(v[2].vector == 1 for v in cg.variants)


def test_a_transposed_tile_keeps_scalar_variants():
    x = torch.randn(4, 16, 8, 8).contiguous(memory_format=torch.channels_last)
    cg = _cuda_group(residual_group_norm, x, torch.randn(4, 16, 8, 8), torch.randn(16), torch.randn(16))
    assert all(v[2].vector == 1 for v in cg.variants)
