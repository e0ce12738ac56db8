"""Sweep the CUDA pointwise schedule knobs (block size, unroll, blocks per SM) on bench cases.

    python tools/sweep_pointwise.py [name filters...]   # prints a table, best first per case
    SWEEP="256/4/8,512/2/16" python -m graphfuser sweep_pointwise     # block/unroll/blocks-per-SM
"""
from __future__ import annotations

import itertools
import os
import sys
from typing import Optional

import graphfuser
from graphfuser.config import config

from . import bench


def main(argv: Optional[list[str]] = None) -> int:
    filters = bench.case_filters("sweep_pointwise", __doc__, argv)
    copy_bw = bench.copy_bandwidth("cuda")
    cases = [c for c in bench.cuda_cases() if any(k in c.name for k in filters)]
    grid = list(itertools.product([128, 256, 512], [1, 2, 4, 8], [4, 8, 16, 64]))
    if os.environ.get("SWEEP"):
        grid = [tuple(int(v) for v in c.split("/")) for c in os.environ["SWEEP"].split(",")]
    for case in cases:
        args = case.make("cuda")
        nbytes = bench._nbytes(args, case.fn(*args))
        rows = []
        for block, unroll, bps in grid:
            with config.override(cuda={"block_size": block, "unroll": unroll, "blocks_per_sm": bps}):
                f = graphfuser.script(case.fn)
                t = bench.time_cuda(f, args, iters=30)
            rows.append((100 * nbytes / t / copy_bw, block, unroll, bps, t * 1e3))
        rows.sort(reverse=True)
        print(f"\n{case.name}")
        for pct, block, unroll, bps, ms in rows[:8] + rows[8:][-3:]:
            print(f"  block={block:4d} unroll={unroll} blocks/SM={bps:3d}: {ms:.4f} ms  {pct:.1f}% of copy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
