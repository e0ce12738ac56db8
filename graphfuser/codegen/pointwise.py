"""The pointwise scheduler: a heuristic fills ``PointwiseParams``; the schedule is a sequence of
the same primitives users call by hand (merge / split / parallelize).

GPU: merge every root into one domain, split by the vector width, by the block size and by the
unroll factor, then ``[BIDx (grid-stride), Unroll, TIDx, Vectorize]``.
CPU: roots ``[outer..., inner]``; the outer roots merge into one OpenMP-parallel loop and the
innermost root is a simd loop. A single root is split so that OpenMP has chunks to share.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..config import config
from ..ir.kir import Kernel
from .schedule import LoopNest, ParallelType


@dataclass(frozen=True)
class PointwiseParams:
    target: str           # "cuda" | "cpu"
    vector: int = 1       # elements per 16-byte access (GPU); 1 = scalar
    block: int = 128      # threads per block (GPU)
    unroll: int = 1       # vectors per thread per grid-stride step (GPU)
    cpu_chunk: int = 4096 # elements per OpenMP chunk for a single-root kernel
    grid_cap: bool = True # the grid is capped at blocks_per_sm per SM (a grid-stride loop covers the rest)


def vector_width(kernel: Kernel, root: int = -1, gather: bool = False) -> int:
    """Largest width such that every vector access is 16 bytes at most; 1 if the innermost root
    (or ``root``) of some tensor is strided (not contiguous), unless ``gather`` and an input
    contiguous along it is wider than the strided ones: the renderer reads and writes the
    strided tensors lane by lane (inner CUDA reductions), and the others set the width."""
    if gather:
        # worth the vector variants' NVRTC time only where a contiguous input is wider than every
        # strided tensor, which then carries the lesser part of the bytes (T5's float32 scores
        # beside its bf16 bias). A bf16 softmax + dropout over a transposed input, beside its
        # dense gradient and bool mask, compiled in 19.7 s with the vector variants against 4.6
        # without (NVRTC on this project's CPU machine, forward and backward)
        full = [t for t in kernel.tensors if t.dim_kinds and not t.partials]
        dense = [t.dtype.itemsize for t in full if not t.is_output and t.dim_kinds[root] == "unit"]
        strided = [t.dtype.itemsize for t in full if t.dim_kinds[root] == "strided"]
        gather = bool(dense) and max(dense) > max(strided, default=0)
    widest = 0
    # pointwise kernels: inputs no expression loads are only sized by (reductions read tensors
    # through other expressions too, so all of theirs count)
    accessed = None if hasattr(kernel, "red_roots") else kernel.accessed()
    for p, t in enumerate(kernel.tensors):
        if not t.dim_kinds or t.partials:
            continue            # (column-sum partials are accumulated lane by lane)
        if accessed is not None and p not in accessed:
            continue            # (an input read for its sizes only: dense_copy's expanded view)
        if t.dim_kinds[root] == "strided":
            if gather:
                continue
            return 1
        if t.dim_kinds[root] != "bcast":
            widest = max(widest, t.dtype.itemsize)
    if widest == 0:
        return 1          # every tensor broadcasts along the innermost root: nothing to vectorize
    return max(1, min(8, 16 // widest))


def needs_division(kernel: Kernel) -> bool:
    """True when some tensor's offset needs per-root indices (div/mod of the flat index)."""
    return kernel.n_dims > 1 and any(not t.dense for t in kernel.tensors)


FLAT_BLOCK = 1024   # threads per block of flat-indexed pointwise kernels


def pointwise_heuristics(kernel: Kernel, target: str, cuda_knobs: dict, vectorize: bool = True) -> PointwiseParams:
    if target == "cuda":
        # PYTORCH_NVFUSER_DISABLE=unroll_with_rng: kernels drawing random numbers are neither
        # unrolled nor vectorized (values stay the same: they depend on the element only)
        no_unroll = kernel.has_random() and config.is_disabled("unroll_with_rng")
        v = vector_width(kernel) if vectorize and not no_unroll else 1
        block, unroll = int(cuda_knobs["block_size"]), int(cuda_knobs["unroll"])
        if no_unroll:
            return PointwiseParams("cuda", vector=1, block=block, unroll=1)
        if not needs_division(kernel) and cuda_knobs.get("auto", True):
            # One flat index and no div/mod per element: wider blocks without unrolling measured
            # best on H200 (tools/sweep_pointwise.py), 1024 threads on an H100: the training
            # steps of SwiGLU bf16 [16384, 8192] and the f32 pointwise chain, kernel us per step,
            # 719.4 / 719.6 with 512 x 1, 716.9 / 716.1 with 512 x 2, 710.0 / 710.2 with 1024 x 1.
            # Nor a grid-stride loop: one vector per thread over a full grid measured 0.5-1%
            # faster than the grid capped at 64 blocks per SM (H100, forward / backward kernel us:
            # pointwise chain 264.8 / 445.8 capped, 262.3 / 442.5 full; SwiGLU 263.9 / 442.2,
            # 261.8 / 438.5; 16 and 32 blocks per SM were slower still)
            return PointwiseParams("cuda", vector=v, block=max(block, FLAT_BLOCK), unroll=1, grid_cap=False)
        return PointwiseParams("cuda", vector=v, block=block, unroll=unroll)
    return PointwiseParams("cpu")


def schedule_pointwise(kernel: Kernel, params: PointwiseParams) -> LoopNest:
    nest = LoopNest(max(kernel.n_dims, 1))
    P = ParallelType
    if params.target == "cuda":
        for _ in range(len(nest.leaves) - 1):
            nest.merge(0)
        if params.vector > 1:
            nest.split(0, params.vector)
        nest.split(0, params.block)
        if params.unroll > 1:
            nest.split(0, params.unroll)
        nest.parallelize(0, P.BIDx)
        k = 1
        if params.unroll > 1:
            nest.parallelize(k, P.Unroll)
            k += 1
        nest.parallelize(k, P.TIDx)
        if params.vector > 1:
            nest.parallelize(k + 1, P.Vectorize)
        return nest
    if len(nest.leaves) == 1:
        nest.split(0, params.cpu_chunk)
        nest.parallelize(0, P.BIDx)
        nest.parallelize(1, P.Vectorize)
        return nest
    for _ in range(len(nest.leaves) - 2):
        nest.merge(0)
    nest.parallelize(0, P.BIDx)
    nest.parallelize(1, P.Vectorize)
    return nest
