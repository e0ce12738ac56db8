"""The CUDA grid of row reductions and their static shared memory (no GPU needed: the launcher
and the source are read, not run).

One-phase normalizations (RMSNorm, the one-pass layer norm) get one block per row; softmax
(two phases) keeps the grid of the blocks that fit at once, striding over the rows; the knob
``cuda.reduction_blocks_per_sm`` overrides both. Inner reductions declare 1 KB of static shared
memory for their combines, not the 8 KB outer ones need."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.config import config
from graphfuser.executor.compiled_reduction import ReductionGroup, launcher_source

from helpers import fusion_groups


def _ln(x, w, b):
    return F.layer_norm(x, [x.shape[-1]], w, b, 1e-5)


def _rms(x, w, b):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def _softmax(x, w, b):
    return torch.softmax(x, -1)


def _group(fn, **cuda) -> tuple[ReductionGroup, str]:
    x = torch.randn(8, 64, dtype=torch.bfloat16)
    w, b = torch.randn(64, dtype=torch.bfloat16), torch.randn(64, dtype=torch.bfloat16)
    sf = graphfuser.script(fn)
    for _ in range(3):
        sf(x, w, b)
    (g,) = fusion_groups(sf._optimized)
    with config.override(cuda=cuda):
        cg = ReductionGroup(g.subgraph, "cuda", torch.device("cuda", 0), "k")
        return cg, launcher_source(cg)


@pytest.mark.parametrize("fn, uncapped", [(_ln, True), (_rms, True), (_softmax, False)],
                         ids=["layer_norm", "rms_norm", "softmax"])
def test_one_phase_normalizations_get_a_block_per_row(fn, uncapped):
    cg, src = _group(fn)
    assert cg.uncapped is uncapped
    assert ("grid = (rows if rows < 2147483647 else 2147483647, 1, 1)" in src) is uncapped
    # one-warp blocks (narrow rows) keep the resident grid
    assert ("if block[0] >= 64:" in src) is uncapped


@pytest.mark.parametrize("fn", [_ln, _rms, _softmax], ids=["layer_norm", "rms_norm", "softmax"])
def test_the_knob_caps_every_grid(fn):
    for per_sm, text in ((0, "f.resident_blocks(block[0], sh)"), (4, "_sms * 4")):
        cg, src = _group(fn, reduction_blocks_per_sm=per_sm)
        assert not cg.uncapped
        assert f"cap = {text}" in src


def test_inner_kernels_declare_small_static_shared_memory():
    cg, _ = _group(_ln)
    assert "__shared__ double gf_smem[128];" in cg.source
    assert "gf_smem[1024]" not in cg.source
