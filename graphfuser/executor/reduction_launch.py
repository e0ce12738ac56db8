"""The CUDA launch choices of reduction groups: which variant a row takes, the block and the
grid, as lines of the generated launcher (``compiled_reduction.launcher_source``), and the
per-kernel defaults of the knobs they read (``auto_knobs``)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..codegen.reduction.schedule import (MAX_THREADS, outer_split_block, OUTER_BLOCK, OUTER_NARROW_BLOCK, ReductionParams,
                                          vector_root)
from ..codegen.cstyle import stride_args
from ..config import config
from ..ir.kir import FirstLoad, topo_exprs

if TYPE_CHECKING:
    from .compiled_reduction import ReductionGroup

INDEX_LIMIT = 2 ** 31 - 2 ** 24   # 32-bit variants: every offset (and loop overshoot) below 2**31

def _small_index(cg: ReductionGroup, first_stride: int) -> str:
    """The launcher's test that every tensor's largest offset fits the 32-bit variants."""
    k = cg.kernel
    st = {pr: s for s, pr in enumerate(stride_args(k))}
    tests = ["rows * nr"]
    for p, t in enumerate(k.tensors):
        terms = [f"n{r}" if kind == "unit" else f"a[{first_stride + st[(p, r)]}] * n{r}"
                 for r, kind in enumerate(t.dim_kinds) if kind != "bcast" and not (kind == "unit" and t.is_output)]
        if terms and not t.is_output:
            tests.append(" + ".join(terms))
    return " and ".join(f"{x} < {INDEX_LIMIT}" for x in dict.fromkeys(tests))


def cuda_choice(cg: ReductionGroup, n_args: int) -> list[str]:
    """Lines choosing ``f``, ``grid`` and ``block`` among the CUDA variants: ``o`` selects the
    32-bit half of ``_fns`` (0) or the 64-bit half."""
    k = cg.kernel
    half = len(cg.variants) // 2
    variants = [v[2] for v in cg.variants[:half]]
    st = stride_args(k)
    first_stride = len(k.tensors) + k.n_dims
    V = max(p.vector for p in variants)
    vr = vector_root(k)
    # the vector multi-pass variant takes rows of any length (inner kernels, ``vectors.py``)
    ragged = V > 1 and any(cg.ragged[i] for i, p in enumerate(variants) if p.vector == V and not p.persistent
                           and not p.split)
    # (a tensor strided along the row is gathered lane by lane: no alignment to check)
    vec_tensors = [p for p, t in enumerate(k.tensors) if t.dim_kinds and t.dim_kinds[vr] not in ("bcast", "strided")]
    lines = [f"small = {_small_index(cg, first_stride)}", f"o = 0 if small else {half}"]
    if V > 1:
        aligned = " | ".join(f"a[{p}]" for p in vec_tensors) or "0"
        strides = "".join(f" and a[{first_stride + s}] % {V} == 0" for s, (p, _) in enumerate(st) if p in vec_tensors)
        if ragged:
            # vectors that take rows of any length (the multi-pass and split variants: a row's
            # partial last vector lane by lane) need aligned row starts only; the persistent ones
            # a row a multiple of V long too. A row that is not takes the vector variants where
            # the scalar persistent ones cannot hold it (those read it once), else the scalar ones.
            cap = max([MAX_THREADS * p.persistent for p in variants if p.vector == 1], default=0)
            lines += [f"vec = not (({aligned}) & 15){strides}", f"whole = n{vr} % {V} == 0",
                      f"vec = vec and (whole or nr > {cap})"]
        else:
            lines.append(f"vec = n{vr} % {V} == 0 and not (({aligned}) & 15){strides}")
    else:
        lines.append("vec = False")
    if k.kind == "none":
        scalar = next(i for i, p in enumerate(variants) if p.vector == 1)
        vector = next((i for i, p in enumerate(variants) if p.vector > 1), scalar)
        per = variants[scalar].block[0] * variants[scalar].unroll
        lines.append(f"j, per = ({vector}, {per * V}) if vec else ({scalar}, {per})")
        lines.append("f = _fns[j + o] or _load(j + o)")
        for j in sorted({scalar, vector}):
            divs = cg.variants[j][4]
            if divs:
                lines.append(f"if small and j == {j}:")
                lines.append("    a = a + " + " + ".join(f"(_MG({d}) or _magic({d}))" for d in divs))
        lines.append("grid = (rows * nr + per - 1) // per")
        lines.append("grid = (grid if grid < _maxgrid else _maxgrid, 1, 1)")
        lines.append(f"block = ({variants[scalar].block[0]}, 1, 1)")
        return lines
    if k.kind == "outer":
        return lines + _outer_choice(cg, variants)

    def whole(i: int) -> str:
        """The test a vector variant that takes whole vectors only adds to its condition."""
        return "whole and " if ragged and variants[i].vector > 1 and not cg.ragged[i] else ""

    for w, cond in ((V, "if vec:"), (1, "else:")):
        if w == 1 and V == 1:
            cond = "if True:"
        lines.append(cond)
        lines.append(f"    nv = (nr + {w - 1}) // {w}")
        chosen = [(i, p) for i, p in enumerate(variants) if p.vector == w and p.persistent and not cg.multirow[i]
                  and not cg.even[i]]
        multi = next(i for i, p in enumerate(variants) if p.vector == w and not p.persistent and not p.split)
        split = next((i for i, p in enumerate(variants) if p.vector == w and p.split), None)
        branch = "if"
        if split is not None:
            # a kernel whose blocks meet at barriers splits rows that leave the device half
            # idle (its alternative re-reads whole rows in one block each); one that does not
            # splits only the fewest, longest rows
            if cg.grid_sync[split]:
                few = f"rows <= {SPLIT_SYNC_ROWS} * _sms and nv >= {SPLIT_SYNC_MIN_VECTORS}"
            else:
                few = f"rows * {SPLIT_ROWS} <= _sms and nv >= {SPLIT_MIN_VECTORS}"
            lines.append(f"    if {whole(split)}{few}:")
            lines.append(f"        f, tx, sh, chunks = {split}, "
                         f"{variants[split].block[0]}, 0, (nv + {variants[split].block[0] - 1}) // "
                         f"{variants[split].block[0]}")
            branch = "elif"
        lo, wide = cg.min_threads
        floor = [f"    lo = {wide} if nv >= {WIDE_ROW_VECTORS} else {lo}" if wide != lo else f"    lo = {lo}"]
        # (not a kernel with column sums: its register partials grow with P too; vit_small's
        # bf16 layer norm backward, [6304, 384], took 128 registers and spilled at P = 4, 26.7 us
        # against 25.3 at P = 1 on an H200; its rows of a warp or fewer share blocks at P = 1)
        if cg.narrow_min_threads and any(cg.multirow) and not k.has_columns():
            floor.append(f"    lo = {cg.narrow_min_threads} if nv <= {NARROW_MAX_VECTORS} else lo")
        at = len(lines) - (2 if split is not None else 0)
        lines[at:at] = floor
        for i, p in sorted(chosen, key=lambda c: -c[1].persistent):
            P = p.persistent
            lines.append(f"    {branch} {whole(i)}{P} * lo <= nv <= {MAX_THREADS * P}:")
            lines.append(f"        f, tx, sh = {i}, (nv + {P - 1}) // {P}, {cg.variants[i][5]}")
            if _twin(cg, i) is not None:
                lines.append(f"        mr, msh = {_twin(cg, i)}, {cg.variants[_twin(cg, i)][5]}")
            lines += _even_choice(cg, i, P)
            branch = "elif"
        i, p = min(chosen, key=lambda c: c[1].persistent)
        lines.append(f"    elif {whole(i)}nv <= {MAX_THREADS * p.persistent}:")
        lines.append(f"        f, tx, sh = {i}, (nv + {p.persistent - 1}) // {p.persistent}, "
                     f"{cg.variants[i][5]}")
        if _twin(cg, i) is not None:
            lines.append(f"        mr, msh = {_twin(cg, i)}, {cg.variants[_twin(cg, i)][5]}")
        lines += _even_choice(cg, i, p.persistent)
        lines.append("    else:")
        lines.append(f"        f, tx, sh = {multi}, {variants[multi].block[0]}, 0")
    lines.insert(2, "mr, ev = -1, False")
    lines += _row_block(cg)
    if any(p.split for p in variants):
        n_red = len(k.reductions())
        lines.append("if chunks:")
        lines.append("    cap = f.resident_blocks(block[0], sh)     # every block resident: the barriers need it")
        lines.append("    gx = rows if rows < cap else cap")
        lines.append("    gy = cap // gx")
        lines.append("    gy = chunks if chunks < gy else (gy if gy > 1 else 1)")
        lines.append("    grid = (gx, gy, 1)")
        lines.append(f"    wp, sp, keep = _scratch(_stream(_devidx), {n_red} * rows * gy, rows, f.cooperative)")
        lines.append("    a = a + (wp, sp)")
        lines.append("else:")
        lines += ["    " + line for line in _row_grid(cg)]
        lines.insert(2, "chunks = 0")
    else:
        lines += _row_grid(cg)
    return lines


MAX_GRID_X = 2 ** 31 - 1
UNCAPPED_MIN_THREADS = 64    # an uncapped kernel's blocks of fewer threads take the resident grid


MULTIROW_MAX_THREADS = 32   # rows of at most this many threads share blocks (one warp's worth)


EVEN_ROWS_MIN_THREADS = 64   # even rows of fewer threads (one warp) keep the variant with checks


def even_rows_twin(kernel, params) -> bool:
    """Whether a CUDA variant gets an even-rows twin (``RenderOptions.even_rows``): the
    persistent vector ones of inner reductions without column sums (whose grid is their
    slots). ``PYTORCH_NVFUSER_DISABLE=even_rows``: none."""
    return (params.kind == "inner" and params.persistent > 0 and params.vector > 1 and not params.split
            and not kernel.has_columns() and not config.is_disabled("even_rows"))


def even_rows_stages(kernel) -> int:
    """Prefetch stages of a kernel's even-rows twins: its one row a block staged into shared
    memory by asynchronous copies (1) where the kernel reads the row's first element over fp16
    rows (the layer norm's shift, ``_shifted_half_rows``), else loaded straight into registers
    (0). H200, whole calls, % of copy bandwidth at 2048 / 3072 / 4096 / 8192 / 16384 columns
    (``logs/sweep-even-rows-cuda-H200.md``): fp16 layer norm 86 / 84 / 85 / 82 / 73 staged
    against 78 / 71 / 74 / 58 / 53 in registers, but bf16 84 / 82 / 84 / 81 / 73 staged against
    88 / 85 / 84 / 82 / 75 in registers; the bf16 twin alone, [16384, 4096] / [32768, 2048]:
    83.9 / 85.3% staged, 85.8 / 88.7% in registers (``logs/sweep-layer-norm-twins-cuda-H200.md``).
    Softmax, RMSNorm and the float32 layer norm within 2 points either way at up to 4096
    columns, registers ahead past it (bf16 softmax 85 / 79 against 83 / 76)."""
    if not _shifted_half_rows(kernel):
        return 0
    return 1 if any(t.dtype == torch.float16 for t in kernel.tensors if t.dim_kinds and "bcast" not in t.dim_kinds) \
        else 0


def _even_choice(cg: ReductionGroup, i: int, P: int) -> list[str]:
    """Lines taking variant ``i``'s even-rows twin (rendered right after it, or after its
    several-rows twin) where a row is exactly ``P`` vectors for each of ``tx`` threads, ``tx`` a
    multiple of 32 and at least ``EVEN_ROWS_MIN_THREADS``: every thread's chunks are in the row,
    so the twin has no bounds checks. It runs one block a row (its row loop runs once), its row
    loaded into registers or staged (``even_rows_stages``). H200, bf16 softmax [16384, 4096],
    the kernel alone: 49% of copy bandwidth with the checks, 93% without them and the loop
    (``logs/sweep-even-rows-cuda-H200.md``)."""
    j = next((j for j in (i + 1, i + 2) if j < len(cg.even) and cg.even[j] and cg.variants[j][2] == cg.variants[i][2]),
             None)
    if j is None:
        return []
    return [f"        if tx % 32 == 0 and tx >= {EVEN_ROWS_MIN_THREADS} and tx * {P} == nv and rows <= {MAX_GRID_X}:",
            f"            f, sh, ev = {j}, {cg.variants[j][5]}, True"]


def _twin(cg: ReductionGroup, i: int):
    """The index of variant ``i``'s several-rows-a-block twin (rendered right after it), or None."""
    j = i + 1
    return j if j < len(cg.multirow) and cg.multirow[j] and cg.variants[j][2] == cg.variants[i][2] else None


def _row_block(cg: ReductionGroup) -> list[str]:
    """The block of a row kernel: ``tx`` threads a row rounded up to a warp, or, for rows of
    one warp or less of a variant with a twin (``mr``: its index), the twin, blockDim.y rows of
    blockDim.x threads each (``tx`` rounded up to a power of two) in blocks of ``cuda.reduction_row_block_threads``.

    One row per warp-sized block left most lanes idle on narrow rows (a 96-channel layer
    norm: 12 of 32 lanes with 8-element vectors) and capped an SM at 32 blocks, half its
    warps."""
    threads = config.cuda["reduction_row_block_threads"]
    threads = ROW_BLOCK_THREADS if threads is None else int(threads)
    lines = ["block = ((tx + 31) // 32 * 32 if tx > 32 else 32, 1, 1)"]
    if threads > 1 and any(cg.multirow):
        lines += [f"if mr >= 0 and tx <= {MULTIROW_MAX_THREADS}:",
                  "    f, sh = mr, msh     # (the twin's own stages)",
                  "    bx = 1 << (tx - 1).bit_length()",
                  f"    by = {threads} // bx",
                  "    by = by if by < rows else (rows if rows > 1 else 1)",
                  "    block = (bx, by, 1)"]
    # the chosen variant is loaded (compiled on first use) only now: a variant its twin replaces
    # is never compiled (the forecast of a 384-column layer norm compiled the plain variant, then
    # its several-rows twin, one after the other: 0.27 + 0.28 s of NVRTC, H200 host)
    lines.append("f = _fns[f + o] or _load(f + o)")
    lines.append("sh = sh * block[0] * block[1]")
    return lines


ROW_BLOCK_THREADS = 128     # threads of a block of several narrow rows (the knob's null)


def _row_grid(cg: ReductionGroup) -> list[str]:
    """The grid of a kernel whose rows are not split: one block per row (``uncapped``, rows
    beyond gridDim.x's limit grid-stride) or as many as ``_grid_cap`` allows; blocks of several
    rows take the resident grid."""
    capped = [f"cap = {_grid_cap('block[0] * block[1]', 'sh', cg.kernel.has_columns())}",
              "nb = (rows + block[1] - 1) // block[1]",
              "grid = (nb if nb < cap else cap, 1, 1)"]
    if any(cg.even):
        capped = ["if ev:", "    grid = (rows, 1, 1)", "else:"] + ["    " + line for line in capped]
    if cg.uncapped:
        # narrow rows (a block of one warp) keep the resident grid: blocks of 32 threads over
        # one short row each hold too few bytes in flight (layer norm [200704, 96] bf16 on an
        # H200: 0.126 ms uncapped, 0.073 ms resident)
        return [f"if block[0] >= {UNCAPPED_MIN_THREADS} and block[1] == 1:",
                f"    grid = (rows if rows < {MAX_GRID_X} else {MAX_GRID_X}, 1, 1)",
                "else:"] + ["    " + line for line in capped]
    return capped


def _outer_choice(cg: ReductionGroup, variants: list[ReductionParams]) -> list[str]:
    """Outer reductions: ``ceilDiv(rows, TIDx * V)`` column tiles of one block each, or (few
    tiles, long columns) the split variant, ``gridDim.y`` blocks per tile, as many as are
    resident at once (its barriers need every block resident; rows beyond the grid
    grid-stride). The vector variants (V adjacent columns per thread) run where ``vec``."""
    k = cg.kernel
    tx, ty = OUTER_BLOCK
    V = max(p.vector for p in variants)

    def index(vector: int, split: bool, block=OUTER_BLOCK):
        return next((i for i, p in enumerate(variants) if p.vector == vector and p.split == split
                     and p.block == block), None)

    sx, sy = outer_split_block()
    scalar, scalar_split = index(1, False), index(1, True, (sx, sy))
    wide, wide_split = (index(V, False), index(V, True, (sx, sy))) if V > 1 else (None, None)
    narrow, narrow_split = (index(V, False, OUTER_NARROW_BLOCK), index(V, True, OUTER_NARROW_BLOCK)) \
        if V > 1 else (None, None)
    lines = [f"block, ty = ({tx}, {ty}, 1), {ty}"]
    split_rows = int(config.cuda.get("reduction_outer_split_rows") or OUTER_SPLIT_BLOCK_ROWS)
    if wide is not None and (wide_split is None) == (scalar_split is None):
        lines += [f"cols = {tx * V} if vec else {tx}",
                  f"j, js = ({wide}, {wide_split}) if vec else ({scalar}, {scalar_split})"]
        if narrow is not None and (narrow_split is None) == (scalar_split is None):
            # few columns: 16 x V of them per tile, 64 rows at a time (OUTER_NARROW_BLOCK)
            nx, ny = OUTER_NARROW_BLOCK
            lines += [f"if vec and rows <= {nx * V}:",
                      f"    block, ty, cols, j, js = ({nx}, {ny}, 1), {ny}, {nx * V}, {narrow}, {narrow_split}"]
    else:
        lines += [f"cols = {tx}", f"j, js = {scalar}, {scalar_split}"]
    lines.append("tiles = (rows + cols - 1) // cols")
    branch = "if True:"
    if scalar_split is not None:
        lines.append(f"if tiles < {OUTER_SPLIT_TILES} * _sms and nr >= {OUTER_SPLIT_MIN_ROWS}:")
        if (sx, sy) != (tx, ty):      # the wide split variants' own block (the narrow ones keep theirs)
            lines.append(f"    if ty == {ty}:")
            lines.append(f"        block, ty = ({sx}, {sy}, 1), {sy}")
        lines.append("    f = _fns[js + o] or _load(js + o)")
        lines.append("    cap = f.resident_blocks(block[0] * block[1], 0)")
        lines.append("    gx = tiles if tiles < cap else cap")
        lines.append(f"    sr = ty if ty > {split_rows} else {split_rows}")
        lines.append("    gy, chunks = cap // gx, (nr + sr - 1) // sr")
        lines.append("    gy = chunks if chunks < gy else (gy if gy > 1 else 1)")
        lines.append("    grid = (gx, gy, 1)")
        lines.append(f"    wp, sp, keep = _scratch(_stream(_devidx), {len(k.reductions())} * rows * gy, tiles, "
                     "f.cooperative)")
        lines.append("    a = a + (wp, sp)")
        branch = "else:"
    lines.append(branch)
    lines.append("    f = _fns[j + o] or _load(j + o)")
    lines.append(f"    cap = {_grid_cap(tx * ty)}")
    lines.append("    grid = (tiles if tiles < cap else cap, 1, 1)")
    return lines


NARROW_MIN_THREADS = 4     # rows of NARROW_MAX_VECTORS vectors or fewer: the thread floor (auto only)
# ... which rows of 33..128 vectors take too: at the floor they hold 4 vectors a thread, 32
# threads or fewer, and share blocks. H200, the bias add + layer norm of ConvNeXt-T's bf16
# autocast stages (bf16 in and out, float32 weights: 4-element vectors), kernel time alone:
# [50176, 192] (48 vectors) 42.4 us at 48 threads a row, one row a block, 22.5 us at 12 threads
# a row, 8 rows a block; [12544, 384] (96 vectors) 17.2 us at 96 threads, 13.0 us at 24 threads,
# 4 rows a block (Inductor 54.7 and 23.4). Rows of 192 vectors are faster with their 96 threads
# (7.1 us) than with 48 threads in 64-thread blocks (8.8)
NARROW_MAX_VECTORS = 128


def auto_knobs(kernel) -> tuple[int, tuple[int, int], bool]:
    """(prefetch stages, (fewest threads per row, the same for wide rows), uncapped grid) for a
    kernel, unless the config sets them.

    Whole calls on an H200 (CUDA events over back-to-back calls, % of copy bandwidth; bf16 rows
    of 1024 / 2048 / 4096 / 16384 unless said; the sweeps are in
    ``logs/sweep-row-knobs-cuda-H200.md``):

    - Pure reductions stream best with one stage and the resident grid.
    - Two-phase kernels (softmax, log_softmax: a max, then a sum of what it shifts) take 64
      threads a row at every width, one stage, the resident grid: softmax 66 / 81 / 80 / 61%
      against 52 / 53 / 65 / 61% with the 256-thread floor wide rows had (set when layer norm
      was two-phase), f32 softmax 80% against 64% at 1024; log_softmax the same way.
    - One-phase normalizations without column sums (RMSNorm, the one-pass layer norm) launch one
      block per row (``uncapped``: the hardware schedules the next block onto an SM as one
      finishes) with two stages: RMSNorm 91-93% against 80-84% on the resident grid, f32 layer
      norm 93-95% against 82-87%. The exception is a kernel that shifts its moments by the row's
      first element (``FirstLoad``: the layer norm) over 2-byte inputs: resident grid, one stage,
      67 / 80 / 81 / 71% against 62 / 77 / 76 / 69% (a residual add + layer norm 84 / 80 / 82%
      at 1024 / 2048 / 4096 against 80 / 69 / 71%). Each block of such a row starts with a
      dependent scalar load of the first element, and a block of a 2-byte row holds half the
      bytes of a float one; the resident grid's prefetch of the next row covers the wait.
    - Rows of 96 or 192 elements (one warp a row) are 2-3x slower uncapped; the launcher keeps
      the resident grid for one-warp blocks.

    Narrow rows (128 vectors or fewer) share blocks (``_row_block``) and take a thread
    floor of ``NARROW_MIN_THREADS``: fewer threads a row, each with more of it, fewer copies of
    the per-row arithmetic. H200, bf16 [200704, 96], whole calls: layer norm 0.092 ms one row
    a block, 0.044 ms 8 rows a block of 16 threads each, 0.034 ms with 8 threads each (2
    vectors a thread); RMSNorm 0.042 / 0.026 / 0.024 ms; softmax 0.078 / 0.038 / 0.031 ms."""
    stages, lo = config.cuda["reduction_prefetch_stages"], config.cuda["reduction_min_threads"]
    uncapped = _one_phase_normalization(kernel) and not kernel.has_columns() and not _shifted_half_rows(kernel)
    auto = (2 if uncapped else 1, 64, 64)
    per_sm = config.cuda["reduction_blocks_per_sm"]
    uncapped = uncapped if per_sm is None else False
    return (auto[0] if stages is None else int(stages)), \
        ((auto[1], auto[2]) if lo is None else (int(lo), int(lo))), uncapped


def twin_stages(kernel) -> int:
    """Prefetch stages of the several-rows twins (narrow rows), unless the config sets them:
    two for one-phase normalizations, the layer norm of 2-byte rows included, whose wide rows
    take one (``auto_knobs``). Two is what these rows ran with in every record; the one H200
    bench of one stage for them had bf16 [12544, 384] and [3136, 768] at 0.027 ms against
    0.019 (a run where torch.jit.script's times for them rose too, so not a clean measure)."""
    stages = config.cuda["reduction_prefetch_stages"]
    if stages is not None:
        return int(stages)
    return 2 if _one_phase_normalization(kernel) else 1


def _one_phase_normalization(kernel) -> bool:
    """Full-size stores after at most one chain of reductions (RMSNorm, the one-pass layer norm;
    not softmax, whose sum reads its max)."""
    full = any(not kernel.is_row(p) for p, _ in kernel.stores)
    return full and kernel.reduction_phases() <= 1


def _shifted_half_rows(kernel) -> bool:
    """Whether the kernel reads a row's first element (moments shifted by it: the layer norm)
    and its full-size tensors (not the weights) are 2-byte (see ``auto_knobs``)."""
    exprs = topo_exprs([e for _, e in kernel.stores])
    if not any(isinstance(e, FirstLoad) for e in exprs):
        return False
    sizes = [t.dtype.itemsize for t in kernel.tensors if t.dim_kinds and "bcast" not in t.dim_kinds]
    return bool(sizes) and max(sizes) <= 2


WIDE_ROW_VECTORS = 512     # rows of this many vectors or more count as wide for the thread floor


SPLIT_ROWS = 2             # rows split across blocks when rows * SPLIT_ROWS <= SM count ...
SPLIT_MIN_VECTORS = 8192   # ... and a row has at least this many vectors
SPLIT_SYNC_ROWS = 2        # kernels with barriers: rows split when rows <= SPLIT_SYNC_ROWS * SM count ...
SPLIT_SYNC_MIN_VECTORS = 1024   # ... and a row has two blocks' worth of vectors (later passes re-read
                                # from L2 when the tensor fits there; one block per row leaves SMs idle)
OUTER_SPLIT_TILES = 2      # outer: columns split across blocks when tiles < OUTER_SPLIT_TILES * SM count ...
OUTER_SPLIT_MIN_ROWS = 256  # ... and a column has at least this many elements
OUTER_SPLIT_BLOCK_ROWS = 32  # the fewest reduced indices a block of the split grid takes (knob's null)


def _grid_cap(threads, shared="0", columns: bool = False) -> str:
    """Python for the most blocks a reduction grid gets: the blocks that fit at once
    (``reduction_blocks_per_sm``: 0 or null) or that many per SM; for a kernel with column sums
    (a slot of partials per block) ``column_blocks_per_sm`` first. Rows beyond it grid-stride."""
    per_sm = config.cuda["column_blocks_per_sm"] if columns else None
    per_sm = int((config.cuda["reduction_blocks_per_sm"] if per_sm is None else per_sm) or 0)
    return f"_sms * {per_sm}" if per_sm else f"f.resident_blocks({threads}, {shared})"
