"""The compute cost of the chunks alone: ``ab_blocks`` cases on cache-resident sizes, one thread
(OMP_NUM_THREADS=1), 200 alternating calls each, min and median.

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python tools/measure/ab_blocks_cached.py 1024 64
"""
import statistics
import sys
import time

import torch

import ab_blocks
import graphfuser
from graphfuser.codegen import dialects

r = ab_blocks.r
CASES = [
    ("sum(-1) f32 [64,4096]", ab_blocks.rows, lambda: (r(64, 4096),)),
    ("(x*x).sum() f32 [256K]", ab_blocks.one_row, lambda: (r(256 * 1024),)),
    ("sum(0) f32 [4096,64]", ab_blocks.cols, lambda: (r(4096, 64),)),
    ("layer_norm f32 [64,4096]", ab_blocks.ln, lambda: (r(64, 4096), r(4096), r(4096))),
    ("batch_norm bwd sums f32 [4,16,56,56]", ab_blocks.bn_bwd,
     lambda: (r(4, 16, 56, 56), r(1, 16, 1, 1), r(1, 16, 1, 1), r(1, 16, 1, 1).abs(), r(4, 16, 56, 56), r(16, 1, 1))),
]
blocks = [int(a) for a in sys.argv[1:3]]
print(f"| case (1 thread, in cache) | B={blocks[0]} min / median us | B={blocks[1]} min / median us | ratio (min) |")
print("|---|---|---|---|")
for name, fn, make in CASES:
    torch.manual_seed(0)
    args = make()
    fs = []
    for B in blocks:
        dialects.CPP.sum_block = B
        f = graphfuser.script(fn)
        for _ in range(4):
            f(*args)
        fs.append(f)
    times = [[], []]
    for _ in range(200):
        for k, f in enumerate(fs):
            t = time.perf_counter()
            f(*args)
            times[k].append((time.perf_counter() - t) * 1e6)
    a, b = times
    print(f"| {name} | {min(a):.0f} / {statistics.median(a):.0f} | {min(b):.0f} / {statistics.median(b):.0f} "
          f"| {min(b) / min(a):.3f} |", flush=True)
