"""Sweep the CUDA reduction schedule knobs on the reduction bench cases.

    python tools/sweep_reductions.py [name filters...]
    SWEEP="prefetch=1,0 stages=0,2 reg=16,32 min_threads=64,128 bps=0,32" python tools/sweep_reductions.py softmax
    python -m graphfuser sweep_reductions softmax      # the same

Each knob combination scripts the case afresh (the knobs are part of the kernel cache key) and
times it; one table per case, best first, in % of measured copy bandwidth. torch.compile is
timed once per case for reference.
"""
from __future__ import annotations

import itertools
import os
import sys
from typing import Optional

import torch

import graphfuser
from graphfuser.config import config

from . import bench, bench_reductions

KNOBS = {"reg": "reduction_register_elements", "min_threads": "reduction_min_threads",
         "bps": "reduction_blocks_per_sm", "cbps": "column_blocks_per_sm", "stages": "reduction_prefetch_stages",
         "cache": "reduction_cache_computed", "rows": "reduction_row_block_threads",
         "split_rows": "reduction_outer_split_rows",
         "split_by": "reduction_outer_split_block_y"}


def grid() -> list[dict[str, int]]:
    spec = os.environ.get("SWEEP", "prefetch=1,0 reg=16,32 min_threads=64,128,256 bps=0")
    axes = [(k, [int(v) for v in vals.split(",")]) for k, vals in (a.split("=") for a in spec.split())]
    return [dict(zip([k for k, _ in axes], combo)) for combo in itertools.product(*[v for _, v in axes])]


def main(argv: Optional[list[str]] = None) -> int:
    filters = bench.case_filters("sweep_reductions", __doc__, argv)
    copy_bw = bench.copy_bandwidth("cuda")
    print(f"copy bandwidth {copy_bw / 1e9:.0f} GB/s on {torch.cuda.get_device_name()}")
    for name, fn, make in bench_reductions.cases("cuda"):
        if not any(f in name for f in filters):
            continue
        args = make("cuda")
        ref = fn(*args)
        nbytes = bench._nbytes(args, ref)
        t_ind = bench.time_cuda(torch.compile(fn), args, iters=30)
        rows = []
        for combo in grid():
            cuda = {KNOBS[k]: v for k, v in combo.items() if k in KNOBS}
            disable = [] if combo.get("prefetch", 1) else ["prefetch"]
            with config.override(cuda=cuda, disable=disable):
                f = graphfuser.script(fn)
                out = f(*args)
                torch.testing.assert_close(out.float(), ref.float(), rtol=2e-2, atol=2e-2)
                t = bench.time_cuda(f, args, iters=30)
            rows.append((100 * nbytes / t / copy_bw, combo, t * 1e3))
        rows.sort(key=lambda r: -r[0])
        print(f"\n{name}: torch.compile {t_ind * 1e3:.4f} ms ({100 * nbytes / t_ind / copy_bw:.1f}%)")
        for pct, combo, ms in rows:
            knobs = " ".join(f"{k}={v}" for k, v in combo.items())
            print(f"  {knobs:48s} {ms:.4f} ms  {pct:5.1f}% of copy  {t_ind * 1e3 / ms:.2f}x Inductor")
    return 0


if __name__ == "__main__":
    sys.exit(main())
