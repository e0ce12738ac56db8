"""Reduction schedulers: a heuristic lists ``ReductionParams``; each schedule is a sequence of the
pointwise scheduler's primitives (merge / split / reorder / parallelize) on the roots
``[kept..., reduced...]`` of a ``ReductionKernel``.

Kernels never specialize on sizes, so one kernel source holds a few variants and the launcher
picks one from the run-time row size (``cuda`` only; the CPU has one variant):

- inner, persistent (GPU): kept -> BIDx (grid-stride over rows); reduced -> ``split(V)``
  (vector lanes), ``split(P, inner_split=False)`` -> ``[Unroll(P), TIDx(ceilDiv(R / V, P)), V]``.
  The TIDx extent is a run-time value (the launcher sets blockDim.x to it, rounded to a warp),
  each thread keeps its ``P * V`` elements in registers, so softmax / layer norm read the row
  once however many passes they make; the next row is prefetched meanwhile (the renderer's
  ``prefetch``; rows are a grid-stride loop over a grid sized to what fits on the device).
  Each persistent schedule is rendered twice on CUDA: the second form (``_mr``) runs
  ``blockDim.y`` rows per block, one per ``blockDim.x`` group of threads (its row loop starts
  at ``blockIdx.x * blockDim.y + threadIdx.y``); the launcher takes it for rows of a warp's
  threads or fewer (a channels-last layer norm over 96 channels), where one row per block
  left most lanes idle and an SM at 32 blocks.
- inner, multi-pass (GPU, rows too wide to persist): ``[BIDx, Serial, TIDx(512), V]``; every
  pass re-reads the row (from L2 when it fits), and softmax's max and sum share one online pass.
  Its vectors, and the split variant's, take rows of any length (the row's partial last vector
  lane by lane after the loop: ``vectors.py``); the persistent ones rows a multiple of V long.
- inner, split (GPU, few long rows, single-pass kernels: ``x.sum()``, ``x.abs().amax()``):
  ``[BIDx, BIDy, TIDx(512), V]``, the BIDy leaf a grid-stride loop over the row's chunks; the
  row's blocks combine through a workspace, the last one stores the row outputs.
- outer (GPU): kept -> ``[BIDx, TIDx(32)]`` (coalesced along the contiguous kept dim), reduced ->
  ``[Serial, TIDy(16)]``, combined across TIDy at the end of each pass. The vector variants give
  each thread V adjacent columns (``[BIDx, TIDx(32), Serial, TIDy(16), Vectorize(V)]``): 16-byte
  loads and stores and V accumulators per thread, so a warp moves 512 bytes per access where the
  scalar variant moves 64 (bf16); the launcher takes them when the column count, the strides
  and the pointers allow.
- outer, split (GPU, few kept columns, long columns: batch norm's statistics over N, H, W of a
  channels-last tensor, ``x.sum(0)``): the same with the reduced chunks on ``BIDy`` (a grid-stride
  loop over chunks of 16 reduced indices), so ``ceilDiv(C, 32) * gridDim.y`` blocks fill the
  device. The blocks of a column tile combine through a workspace: single-pass kernels let the
  tile's last block store the outputs; multi-pass ones (a normalization's epilogue, a backward's
  second reduction) meet at a barrier of the tile's blocks after each reduction pass, then every
  block combines the partials in the same order (identical, deterministic values) and goes on.
  The barrier needs every block resident: those kernels are launched cooperatively.
  Why one kernel with barriers rather than a statistics kernel and a pointwise epilogue kernel:
  both read the input twice (a [64, 256, 56, 56] fp32 tensor is 205 MB, more than the GPU holds
  on chip, so the epilogue re-reads it either way), but one kernel has no launch between the
  passes, keeps the per-channel values (mean, rstd, the backward's sums) in registers instead of
  a round trip through memory, and starts each pass with the chunks its blocks read last (passes
  alternate direction), which are still in L2. Inner split kernels (NCHW: a channel's N * H * W
  row across blocks) use the same barriers.
- inner (CPU): kept -> BIDx (OpenMP over rows), reduced -> one simd loop per pass.
- outer (CPU): kept -> ``split(W)`` -> ``[BIDx, Serial(reduced), Unroll(W)]``: W accumulators
  per thread across the contiguous kept dim (an unrolled loop the compiler vectorizes).
- none (normalizations without a reduction, e.g. batch-norm inference): the pointwise schedule.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...config import config

from ..pointwise import PointwiseParams, schedule_pointwise, vector_width
from .lower import ReductionKernel
from ..schedule import LoopNest, ParallelType

MAX_THREADS = 512          # launch bound of the inner GPU schedules
REGISTER_ELEMENTS = 32     # elements a persistent thread holds per cached value (config knob)
MULTIPASS_THREADS = 512
PERSISTENT_CHUNKS = (1, 2, 4)   # P of the persistent variants (few: each costs NVRTC time)
MIN_THREADS = 64           # the launcher takes the largest P that leaves a row this many threads
# outer GPU reductions: 32 column threads x 32 row threads. A column's loads in flight are its
# row threads': measured on an H100 (kernel us, 32x16 -> 32x32), channels-last statistics
# [64, 256, 56, 56] f32 112 -> 98.5, bf16 [32, 64, 112, 112] 138 -> 95.6, (x - mean).relu()
# [64, 128, 56, 56] 190 -> 135, the batch-norm + ReLU training backward [64, 256, 56, 56]
# 628 -> 530; fewer row threads (32x8, 32x4, 64x4) were slower on every one
OUTER_BLOCK = (32, 32)
# ... and 16 x 64 where the columns are few: the vector variants' 32 x V columns would leave
# half the threads of a 32 x 32 block without a column (``_outer_choice`` in
# executor/reduction_launch.py). Measured on an H100, batch norm (train) + ReLU forward and
# backward, bf16 channels-last [32, 64, 56, 56]: 149 -> 121 us (eager 101); 168.8 us before the
# y reductions became trees (cuda_reduction_prelude.gf_block_reduce_y)
OUTER_NARROW_BLOCK = (16, 64)
# ... and the split variants' (few column tiles, long columns: batch norm's statistics): 32
# columns (x V) by ``cuda.reduction_outer_split_block_y`` rows (null: 32)
def outer_split_block() -> tuple[int, int]:
    return OUTER_BLOCK[0], int(config.cuda.get("reduction_outer_split_block_y") or OUTER_BLOCK[1])


NONE_BLOCK = (256, 2)      # (threads, unroll) of normalizations without a reduction (the pointwise ones)
CPU_LANES = 16
SECTOR_BYTES = 32          # a DRAM sector: what a transposed tile keeps whole (transposed_tile)
# CPU: longest row whose computed values go to a per-thread row buffer (dialects._CPU_ROW_SCRATCH;
# 16M bytes a float value); longer rows recompute them in each pass
SCRATCH_ROWS = 1 << 22


@dataclass(frozen=True)
class ReductionParams:
    target: str                 # "cuda" | "cpu"
    kind: str                   # "inner" | "outer" | "none"
    persistent: int = 0         # P: register chunks per thread (0: passes re-read memory)
    vector: int = 1             # V: elements per vector access
    block: tuple[int, int] = (0, 1)   # constant (TIDx, TIDy) extents; TIDx 0 = set at launch
    max_threads: int = MAX_THREADS
    lanes: int = 1              # CPU outer: kept elements per thread
    online: bool = False        # softmax's max and sum in one pass (multi-pass GPU schedule)
    split: bool = False         # GPU: the reduced extent is split across gridDim.y blocks
    scratch: bool = False       # CPU: computed values for later passes in a per-row array
    unroll: int = 1             # "none": vectors per thread per grid-stride step

    @property
    def tag(self) -> str:
        if self.target == "cpu":
            return f"{self.kind}_scratch" if self.scratch else self.kind
        if self.kind != "inner":
            narrow = "_n" if self.kind == "outer" and self.block == OUTER_NARROW_BLOCK else ""
            return f"{self.kind}_{'split_' if self.split else ''}v{self.vector}{narrow}"
        if self.split:
            return f"split_v{self.vector}"
        return f"p{self.persistent}_v{self.vector}" if self.persistent else f"mp_v{self.vector}"


def reduction_variants(kernel: ReductionKernel, target: str,
                       register_elements: int = REGISTER_ELEMENTS) -> list[ReductionParams]:
    """Every variant the kernel source holds, in the order the launcher tests them.
    ``register_elements``: the most elements of a row a persistent thread keeps per cached value."""
    # PYTORCH_NVFUSER_DISABLE=unroll_with_rng: kernels drawing random numbers get no vectors
    # (as pointwise ones; the numbers stay the same)
    no_vector = kernel.has_random() and config.is_disabled("unroll_with_rng")
    if kernel.kind == "none":
        if target == "cpu":
            return [ReductionParams("cpu", "none")]
        v = 1 if no_vector else vector_width(kernel)
        tx, unroll = NONE_BLOCK
        return [ReductionParams("cuda", "none", vector=w, block=(tx, 1), max_threads=tx, unroll=unroll)
                for w in sorted({1, v})]
    if target == "cpu":
        if kernel.kind == "outer":
            return [ReductionParams("cpu", "outer", lanes=CPU_LANES)]
        # rows up to SCRATCH_ROWS elements keep exp(x - max) & co. in a row buffer (launcher picks)
        return [ReductionParams("cpu", "inner", scratch=True), ReductionParams("cpu", "inner")]
    if kernel.kind == "outer":
        # scalar variants, then (when every tensor walks the contiguous kept root with unit
        # stride or broadcasts along it) the ones whose threads hold V adjacent columns each
        threads = OUTER_BLOCK[0] * OUTER_BLOCK[1]
        v = 1 if no_vector else vector_width(kernel, vector_root(kernel))
        sb = outer_split_block()
        out = [ReductionParams("cuda", "outer", vector=w, block=sb if split else OUTER_BLOCK,
                               max_threads=sb[0] * sb[1] if split else threads, split=split)
               for w in sorted({1, v}) for split in (False, True)]
        if v > 1:
            out += [ReductionParams("cuda", "outer", vector=v, block=OUTER_NARROW_BLOCK, max_threads=threads,
                                    split=split) for split in (False, True)]
        return out
    out = []
    widths = [1]
    # a tensor strided along the row (T5's permuted position bias beside dense attention scores)
    # is gathered lane by lane and the dense ones keep their vector accesses; not where a
    # transposed tile serves the strided tensor better (its scalar multi-pass variant)
    gather = not config.is_disabled("vector_gather") and not transposed_tile(kernel)
    v = 1 if no_vector else vector_width(kernel, gather=gather)
    if v > 1:
        widths.append(v)
    for w in widths:
        chunks = [p for p in PERSISTENT_CHUNKS if p * w <= register_elements] or [1]
        if w == 1:
            chunks = [4]          # ragged rows: up to 4 * MAX_THREADS elements stay in registers
        out += [ReductionParams("cuda", "inner", persistent=p, vector=w) for p in chunks]
        out.append(ReductionParams("cuda", "inner", vector=w, block=(MULTIPASS_THREADS, 1), online=True))
    for w in widths if not kernel.has_columns() else ():
        # few rows, long ones: each row split across blocks (when the kernel allows; a kernel
        # with column sums keeps each row in one block, whose threads own their columns)
        out.append(ReductionParams("cuda", "inner", vector=w, block=(MULTIPASS_THREADS, 1), split=True))
    return out


def transposed_tile(kernel: ReductionKernel) -> int:
    """T for rows over two reduced roots [Ra, Rb] that one full-size tensor walks with unit
    stride along Ra and another along Rb (a channels-last tensor among NCHW ones in a group
    norm over C, H * W); 0 otherwise. Walked in Ra-major order, a warp's loads of the Ra-unit
    tensor are 4 bytes out of each 32-byte sector (8x the traffic): a [64, 64, 56, 56] fp32
    residual add + group norm took 437 us on an H100 with one such input, 140 us without."""
    red = kernel.red_roots
    if kernel.kind != "inner" or len(red) != 2:
        return 0
    a, b = red
    full = [t for t in kernel.tensors if t.dim_kinds and not t.partials and "bcast" not in (t.dim_kinds[a], t.dim_kinds[b])]
    along_a = [t for t in full if t.dim_kinds[a] == "unit"]
    if not along_a or not any(t.dim_kinds[b] == "unit" for t in full):
        return 0
    return max(1, SECTOR_BYTES // min(t.dtype.itemsize for t in along_a))


def vector_root(kernel: ReductionKernel) -> int:
    """The root a vector variant's lanes walk: the innermost one (inner kernels: the reduced
    row), or the last kept one (outer kernels: adjacent columns)."""
    if kernel.kind == "outer":
        return kernel.n_dims - len(kernel.red_roots) - 1
    return kernel.n_dims - 1


def schedule_reduction(kernel: ReductionKernel, params: ReductionParams) -> LoopNest:
    """The loop nest of one variant (see the module docstring)."""
    P = ParallelType
    if params.kind == "none":
        pw = PointwiseParams(params.target, vector=params.vector, block=params.block[0] or 128, unroll=params.unroll)
        return schedule_pointwise(kernel, pw)
    nest = LoopNest(kernel.n_dims)
    n_kept = kernel.n_dims - len(kernel.red_roots)
    for _ in range(n_kept - 1):
        nest.merge(0)
    r = 1 if n_kept else 0
    tile = transposed_tile(kernel) if params.target == "cuda" and params.vector == 1 and not params.persistent else 0
    if tile:
        # [K, Ra, Rb] -> [K, Rb/T, Ra, T] -> [K, R]: T adjacent Rb indices (one 32-byte sector
        # of the tensors unit-strided along Rb) for each Ra in turn, so the tensors unit-strided
        # along Ra (channels-last among NCHW) read whole sectors across a block too
        nest.split(r + 1, tile)
        nest.reorder({r + 1: r})
        nest.merge(r)
    for _ in range(len(kernel.red_roots) - 1):
        nest.merge(r)
    if params.target == "cpu":
        if params.kind == "outer":
            nest.split(0, params.lanes)
            nest.reorder({1: 2, 2: 1})
            nest.parallelize(2, P.Unroll)      # W lanes of the contiguous kept dim (gcc vectorizes them)
        else:
            nest.parallelize(r, P.Vectorize)
        return _rows(nest, n_kept)
    if params.kind == "outer":
        tx, ty = params.block
        if params.vector > 1:
            nest.split(0, params.vector)       # [K/V, V, R]: V adjacent columns per thread
        nest.split(0, tx)
        nest.parallelize(1, P.TIDx)
        red = 3 if params.vector > 1 else 2
        nest.split(red, ty)
        nest.parallelize(red + 1, P.TIDy)
        if params.split:
            nest.parallelize(red, P.BIDy)      # grid-stride over the chunks of ty reduced indices
        if params.vector > 1:
            # the column lanes go innermost: [BIDx, TIDx(tx), R/ty, TIDy(ty), Vectorize(V)]
            nest.reorder({2: 4})
            nest.contiguous_root = n_kept - 1
            nest.parallelize(4, P.Vectorize)
        return _rows(nest, n_kept)
    if params.vector > 1:
        nest.split(r, params.vector)
    if params.persistent:
        nest.split(r, params.persistent, inner_split=False)
        nest.parallelize(r, P.Unroll)
    else:
        nest.split(r, params.block[0])
        if params.split:
            nest.parallelize(r, P.BIDy)        # grid-stride over the row's chunks, across blocks
    nest.parallelize(r + 1, P.TIDx)
    if params.vector > 1:
        nest.parallelize(r + 2, P.Vectorize)
    return _rows(nest, n_kept)


def _rows(nest: LoopNest, n_kept: int) -> LoopNest:
    """Kept rows (the outermost leaf) go to blocks: OpenMP threads on the CPU."""
    if n_kept:
        nest.parallelize(0, ParallelType.BIDx)
    return nest
