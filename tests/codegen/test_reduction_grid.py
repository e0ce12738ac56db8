"""The CUDA grid of row reductions and their static shared memory (no GPU needed: the launcher
and the source are read, not run).

One-phase normalizations (RMSNorm, the one-pass layer norm) get one block per row; softmax
(two phases) keeps the grid of the blocks that fit at once, striding over the rows; the knob
``cuda.reduction_blocks_per_sm`` overrides both. Rows of a warp's threads or fewer share
blocks (``cuda.reduction_row_block_threads``). Inner reductions declare 1 KB of static shared
memory for their combines, not the 8 KB outer ones need.

The launcher's choice is run here as Python, with a stand-in for the driver's occupancy query."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.config import config
from graphfuser.executor.compiled_reduction import ReductionGroup, launcher_source
from graphfuser.executor.reduction_launch import cuda_choice

from helpers import fusion_groups


def _ln(x, w, b):
    return F.layer_norm(x, [x.shape[-1]], w, b, 1e-5)


def _rms(x, w, b):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def _softmax(x, w, b):
    return torch.softmax(x, -1)


SMS = 132


class _Fn:
    """A variant's stand-in: its index and the resident-block query (64 warps, 32 blocks an SM)."""
    cooperative = False

    def __init__(self, i: int) -> None:
        self.i = i

    def resident_blocks(self, threads: int, shared: int = 0) -> int:
        return SMS * min(2048 // threads, 32)


def _launch(cg: ReductionGroup, rows: int, nr: int, **cuda) -> dict:
    """The launcher's variant, block and grid for ``rows`` rows of ``nr`` elements (16-byte
    aligned, dense)."""
    with config.override(cuda=cuda):
        lines = cuda_choice(cg, 0)
    ns = {"rows": rows, "nr": nr, "n0": rows, "n1": nr, "a": (0,) * 16, "_sms": SMS,
          "_fns": [_Fn(i) for i in range(len(cg.variants))], "_load": None,
          "_scratch": lambda *a: (0, 0, None), "_stream": lambda i: None, "_devidx": 0}
    exec("\n".join(lines), ns)
    return ns


def _group(fn, dtype=torch.bfloat16, **cuda) -> tuple[ReductionGroup, str]:
    x = torch.randn(8, 64, dtype=dtype)
    w, b = torch.randn(64, dtype=dtype), torch.randn(64, dtype=dtype)
    sf = graphfuser.script(fn)
    for _ in range(3):
        sf(x, w, b)
    (g,) = fusion_groups(sf._optimized)
    with config.override(cuda=cuda):
        cg = ReductionGroup(g.subgraph, "cuda", torch.device("cuda", 0), "k")
        src = launcher_source(cg)
    compile(src, "<launcher>", "exec")      # the whole launcher, as it is built
    return cg, src


@pytest.mark.parametrize("fn, dtype, uncapped, stages",
                         [(_ln, torch.float32, True, 2), (_rms, torch.bfloat16, True, 2), (_rms, torch.float32, True, 2),
                          (_ln, torch.bfloat16, False, 1), (_softmax, torch.bfloat16, False, 1)],
                         ids=["layer_norm_f32", "rms_norm_bf16", "rms_norm_f32", "layer_norm_bf16", "softmax"])
def test_one_phase_normalizations_get_a_block_per_row(fn, dtype, uncapped, stages):
    """Except the layer norm of 2-byte rows (its moments shift by the row's first element, a
    dependent load the resident grid's prefetch covers), and softmax (two phases)."""
    cg, src = _group(fn, dtype)
    assert cg.uncapped is uncapped
    assert cg.stages == stages
    assert ("grid = (rows if rows < 2147483647 else 2147483647, 1, 1)" in src) is uncapped
    run = _launch(cg, 16384, 4000)        # (rows that are not even: 4096 takes the even twin)
    assert run["block"][1] == 1 and run["block"][0] >= 64 and not run["ev"]
    assert run["grid"][0] == (16384 if uncapped else min(16384, _Fn(0).resident_blocks(run["block"][0])))


@pytest.mark.parametrize("fn", [_ln, _rms, _softmax], ids=["layer_norm", "rms_norm", "softmax"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_even_rows_take_a_twin_without_checks(fn, dtype):
    """Rows of exactly P vectors for each of a multiple of 32 threads (64 or more) launch the
    variant's even-rows twin, one block a row without bounds checks; other rows do not. The twin
    loads its row into registers, or (the layer norm of fp16 rows) stages it by asynchronous
    copies, with the shared memory that takes."""
    cg, src = _group(fn, dtype)
    V = 16 // dtype.itemsize
    staged = fn is _ln and dtype == torch.float16
    for nr in (2048, 3072, 4096, 16384) if V == 8 else (1024, 2048, 3072, 4096):
        run = _launch(cg, 16384, nr)
        i = run["f"].i
        assert run["ev"] and cg.even[i] and cg.variants[i][0].endswith("_e_i32"), nr
        assert cg.variants[i - 1 - cg.multirow[i - 1]][2] == cg.variants[i][2]
        assert run["grid"] == (16384, 1, 1)
        assert run["block"][0] * cg.variants[i][2].persistent * V == nr
        text = cg.variant_sources[i].split("__global__")[-1]
        assert "for (int i0 = blockIdx.x; i0 < n0; i0 = n0)" in text
        assert "< n1" not in text and "< x2" not in text
        assert ("gf_cp_async" in text) is staged
        assert run["sh"] == (cg.variants[i][5] * run["block"][0] if staged else 0)
        assert (cg.variants[i][5] > 0) is staged
    for nr in (4000, 4088, 2080, 256):      # not a whole number of vectors a thread, or one warp
        assert not _launch(cg, 16384, nr)["ev"], nr
    with config.override(disable=["even_rows"]):
        cg, _ = _group(fn, dtype)
    assert not any(cg.even) and not _launch(cg, 16384, 4096)["ev"]


@pytest.mark.parametrize("dtype, vector", [(torch.bfloat16, 8), (torch.float32, 4)])
def test_softmax_rows_take_64_threads_at_every_width(dtype, vector):
    """Two-phase kernels: the largest P that leaves a row 64 threads, wide rows too (a floor of
    256 threads for rows of 512 vectors or more measured 65% of copy bandwidth against 80% on
    bf16 [16384, 4096])."""
    cg, _ = _group(_softmax, dtype)
    for nv, p in ((256, 4), (512, 4), (1024, 4), (2048, 4), (200, 2)):
        tx = -(-nv // p)
        assert _launch(cg, 16384, nv * vector)["block"][0] == (tx + 31) // 32 * 32, nv


@pytest.mark.parametrize("fn", [_ln, _rms, _softmax], ids=["layer_norm", "rms_norm", "softmax"])
@pytest.mark.parametrize("nr, block", [(96, (8, 16, 1)), (192, (8, 16, 1)), (8, (1, 128, 1)), (40, (8, 16, 1)),
                                       (384, (16, 8, 1)), (768, (32, 4, 1))])
def test_narrow_rows_share_blocks(fn, nr, block):
    # 96 bf16 channels: 12 vectors of 8 a row, 2 a thread (the narrow floor of 4 threads a
    # row), 6 threads a row rounded to 8, 16 rows a block of 128 threads, as many blocks as fit
    # at once; 192 channels: 24 vectors, 4 a thread; 40 channels: 5 vectors, one a thread;
    # 384 channels: 48 vectors, 4 a thread, 12 threads a row rounded to 16; 768: 96 vectors, 24
    # threads rounded to 32
    cg, _ = _group(fn)
    run = _launch(cg, 200704, nr)
    assert run["mr"] and run["block"] == block
    assert cg.multirow[run["f"].i]
    assert run["grid"] == (min(-(-200704 // block[1]), SMS * 16), 1, 1)
    # fewer rows than a block holds: one block of those rows
    assert _launch(cg, 3, nr)["block"] == (block[0], 3, 1)
    # the knob: 1 thread a block is one row per (warp-sized) block, as before
    one = _launch(cg, 200704, nr, reduction_row_block_threads=1)
    assert one["block"] == (32, 1, 1) and one["grid"] == (SMS * 32, 1, 1)
    assert _launch(cg, 200704, nr, reduction_row_block_threads=256)["block"] == (block[0], 256 // block[0], 1)
    # a thread floor set by the knob holds for narrow rows too: 96 channels, 12 threads a row
    if nr == 96:
        cg, _ = _group(fn, reduction_min_threads=64)
        assert _launch(cg, 200704, nr, reduction_min_threads=64)["block"] == (16, 8, 1)


@pytest.mark.parametrize("fn", [_ln, _softmax], ids=["layer_norm", "softmax"])
def test_narrow_row_kernels_index_rows_by_block_and_thread_row(fn):
    cg, _ = _group(fn)
    src = cg.variant_sources[cg.multirow.index(True)]
    assert "i0 = blockIdx.x * blockDim.y + threadIdx.y; i0 < n0; i0 += gridDim.x * blockDim.y" in src
    # the shuffles of a row name only its lanes (rows of a warp may leave the loop apart)
    assert "__shfl_xor_sync(0xffffffffu" not in src.split("gf_block_reduce_x")[0].split("gf_group_mask")[1]
    # each twin follows its one-row-a-block variant; those keep their row loop
    for i, mr in enumerate(cg.multirow):
        if mr:
            assert not cg.multirow[i - 1] and cg.variants[i - 1][2] == cg.variants[i][2]
        else:
            assert "blockDim.y" not in cg.variant_sources[i].split("__global__")[-1]
    # wide rows take the variant without the twin
    wide = _launch(cg, 16384, 4096)
    assert not cg.multirow[wide["f"].i] and wide["block"][1] == 1


@pytest.mark.parametrize("fn", [_ln, _rms, _softmax], ids=["layer_norm", "rms_norm", "softmax"])
def test_the_knob_caps_every_grid(fn):
    for per_sm, text in ((0, "f.resident_blocks(block[0], sh)"), (4, "_sms * 4")):
        cg, src = _group(fn, reduction_blocks_per_sm=per_sm)
        assert not cg.uncapped
        assert f"cap = {text}" in src


def _ln_and_column_sum(x, w, b):
    y = F.layer_norm(x, [x.shape[-1]], w, b, 1e-5)
    return y, y.sum(0)


def test_column_kernels_take_their_own_cap():
    """``column_blocks_per_sm`` caps the grid of row kernels with column sums (each block leaves
    a slot of partials to finalize), ahead of ``reduction_blocks_per_sm``; other kernels ignore it."""
    for knobs, text in (({}, "f.resident_blocks(block[0] * block[1], sh)"),
                        ({"column_blocks_per_sm": 8}, "_sms * 8"),
                        ({"reduction_blocks_per_sm": 4}, "_sms * 4"),
                        ({"reduction_blocks_per_sm": 4, "column_blocks_per_sm": 0},
                         "f.resident_blocks(block[0] * block[1], sh)")):
        cg, src = _group(_ln_and_column_sum, torch.float32, **knobs)
        assert cg.kernel.has_columns()
        assert f"cap = {text}" in src, knobs
    _, src = _group(_ln, torch.bfloat16, column_blocks_per_sm=8)
    assert "_sms * 8" not in src


def test_inner_kernels_declare_small_static_shared_memory():
    cg, _ = _group(_ln)
    assert "__shared__ double gf_smem[128];" in cg.source
    assert "gf_smem[1024]" not in cg.source


def test_twins_render_on_first_use():
    """A group's several-rows twins render when a launch first takes one (most rows are wide):
    the group's dumped source holds the other variants; reading a twin's source renders it."""
    cg, _ = _group(_ln)
    twins = [i for i, mr in enumerate(cg.multirow) if mr]
    assert twins and "_mr_i32" not in cg.source
    src = cg.variant_sources[twins[0]]
    assert cg.variants[twins[0]][0] in src and "blockDim.y" in src


def test_narrow_row_twins_of_the_half_layer_norm_keep_two_stages():
    """The bf16 layer norm's wide rows take one prefetch stage, its several-rows twins (narrow
    rows: ConvNeXt's 96..768 channels) two, with the launch's shared memory to match."""
    cg, _ = _group(_ln, torch.bfloat16)
    assert cg.stages == 1
    twins = [i for i, m in enumerate(cg.multirow) if m and cg.variants[i][2].vector > 1]
    assert twins
    for i in twins:
        assert cg.variants[i][5] == 2 * cg.variants[i - 1][5] > 0
        assert "gf_cur = gf_cur + 1 == 2 ? 0" in cg.variant_sources[i]
        assert "gf_cur = gf_cur + 1 == 1 ? 0" in cg.variant_sources[i - 1]
    run = _launch(cg, 12544, 384)
    assert run["mr"] >= 0 and cg.multirow[run["f"].i] and run["sh"] == cg.variants[run["f"].i][5] * 16 * 8
