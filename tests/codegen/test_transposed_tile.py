"""Rows over two reduced roots that tensors walk in different orders (no GPU needed): a group
norm over C, H * W of a residual add whose stream is channels-last while the block's other
tensors are NCHW (timm's poolformer). The GPU's multi-pass and split variants walk such rows in
tiles of one 32-byte sector along H * W for each channel in turn
(``reduction_schedule.transposed_tile``), so both layouts read whole sectors; rows of one
layout, persistent variants and the CPU keep the plain order. NVRTC compiles the tiled variants.
GPU runs: tests/cuda/test_cuda_transposed_tile.py."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.codegen.reduction.schedule import transposed_tile
from graphfuser.executor.compiled_reduction import ReductionGroup
from helpers import fusion_groups
from test_outer_split import _compile


def residual_group_norm(x, y, p, ls, w, b):
    xn = x + ls * (p - y)
    return xn, F.group_norm(xn, 1, w, b, 1e-5)


def _group(dtype, x_cl: bool, target: str = "cuda"):
    x = torch.randn(2, 6, 5, 3, dtype=dtype)
    if x_cl:
        x = x.contiguous(memory_format=torch.channels_last)
    y, p = torch.randn(2, 6, 5, 3, dtype=dtype), torch.randn(2, 6, 5, 3, dtype=dtype)
    ls, w, b = torch.randn(6, 1, 1, dtype=dtype), torch.randn(6, dtype=dtype), torch.randn(6, dtype=dtype)
    sf = graphfuser.script(residual_group_norm)
    with torch.no_grad():
        for _ in range(4):
            sf(x, y, p, ls, w, b)
    (n,) = fusion_groups(sf._optimized)
    device = torch.device("cuda", 0) if target == "cuda" else torch.device("cpu")
    return ReductionGroup(n.subgraph, target, device, "k")


@pytest.mark.parametrize("dtype, tile", [(torch.float32, 8), (torch.bfloat16, 16), (torch.float16, 16)])
def test_mixed_layouts_walk_sector_tiles(dtype, tile):
    cg = _group(dtype, x_cl=True)
    assert transposed_tile(cg.kernel) == tile
    names = [v[0] for v in cg.variants]
    for name, src in zip(names, cg.variant_sources):
        tiled = f") / {tile})" in src and f") % {tile})" in src
        assert tiled == ("_mp_" in name or "_split_" in name), name
    _compile(cg, names)


def test_one_layout_and_the_cpu_keep_the_plain_order():
    assert transposed_tile(_group(torch.float32, x_cl=False).kernel) == 0
    cpu = _group(torch.float32, x_cl=True, target="cpu")
    assert ") / 8)" not in cpu.source
