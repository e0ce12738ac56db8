"""A/B timing of CPU reduction kernels rendered with two chunk sizes (``CPP.sum_block``), in one
process, timed alternately (min and median of many calls), so the machine's load hits both alike.

    PYTHONPATH=$PWD python tools/measure/ab_blocks.py 1024 64
"""
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.codegen import dialects


def rows(x): return (x * 2.0).sum(-1)
def one_row(x): return (x * x).sum()
def cols(x): return (x * 2.0).sum(0)
def ln(x, w, b): return F.layer_norm(x, [x.shape[-1]], w, b, 1e-5)
def softmax(x): return torch.softmax(x, -1)


def bn_bwd(x, s0, s1, s2, g, w):
    xh = ((x - s0) - s1) * s2
    gw = g * w
    m1 = gw.mean([0, 2, 3], True)
    m2 = (gw * xh).mean([0, 2, 3], True)
    return s2 * ((gw - m1) - xh * m2), (g * xh).sum([0, 2, 3]), g.sum([0, 2, 3])


def bn_train(x, rm, rv, w, b): return F.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5)


def r(*s): return torch.randn(*s)


CASES = [
    ("sum(-1) f32 [4096,4096]", rows, lambda: (r(4096, 4096),)),
    ("(x*x).sum() f32 [16M]", one_row, lambda: (r(16 * 1024 * 1024),)),
    ("sum(0) f32 [65536,256]", cols, lambda: (r(65536, 256),)),
    ("layer_norm f32 [4096,4096]", ln, lambda: (r(4096, 4096), r(4096), r(4096))),
    ("softmax f32 [4096,4096]", softmax, lambda: (r(4096, 4096),)),
    ("batch_norm train fwd f32 [32,64,56,56]", bn_train,
     lambda: (r(32, 64, 56, 56), r(64), r(64).abs() + 1, r(64), r(64))),
    ("batch_norm bwd sums f32 [32,64,56,56]", bn_bwd,
     lambda: (r(32, 64, 56, 56), r(1, 64, 1, 1), r(1, 64, 1, 1), r(1, 64, 1, 1).abs(), r(32, 64, 56, 56), r(64, 1, 1))),
]


def main() -> None:
    blocks = [int(a) for a in sys.argv[1:3]] or [1024, 64]
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 15
    only = sys.argv[4] if len(sys.argv) > 4 else ""
    print(f"| case | B={blocks[0]} min / median ms | B={blocks[1]} min / median ms | ratio (min) |")
    print("|---|---|---|---|")
    for name, fn, make in CASES:
        if only not in name:
            continue
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
        for _ in range(reps):
            for k, f in enumerate(fs):
                t = time.perf_counter()
                f(*args)
                times[k].append((time.perf_counter() - t) * 1e3)
        (a, b) = times
        print(f"| {name} | {min(a):.2f} / {statistics.median(a):.2f} | {min(b):.2f} / {statistics.median(b):.2f} "
              f"| {min(b) / min(a):.3f} |", flush=True)


if __name__ == "__main__":
    main()
