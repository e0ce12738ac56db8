"""A/B timing on the GPU of reduction kernels rendered with and without chunked, compensated
per-thread sums (``CUDA.sum_block``: 0 = one serial accumulator per thread, as before), in one
process, timed alternately with CUDA events (50 calls queued back to back, 7 rounds, min and median).

    PYTHONPATH=$PWD python tools/measure/ab_blocks_cuda.py 0 16
"""
import statistics
import sys

import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.codegen import dialects


def rows(x): return (x * 2.0).sum(-1)
def one_row(x): return (x * x).sum()
def cols(x): return (x * 2.0).sum(0)
def ln(x, w, b): return F.layer_norm(x, [x.shape[-1]], w, b, 1e-5)
def rms(x, w): return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
def softmax(x): return torch.softmax(x, -1)
def bn_train(x, rm, rv, w, b): return F.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5)


def bn_bwd(x, s0, s1, s2, g, w):
    xh = ((x - s0) - s1) * s2
    gw = g * w
    m1 = gw.mean([0, 2, 3], True)
    m2 = (gw * xh).mean([0, 2, 3], True)
    return s2 * ((gw - m1) - xh * m2), (g * xh).sum([0, 2, 3]), g.sum([0, 2, 3])


def r(*s, dtype=torch.float32):
    return torch.randn(*s, device="cuda").to(dtype)


bf = torch.bfloat16
CASES = [
    ("sum(-1) f32 [16384,4096]", rows, lambda: (r(16384, 4096),)),
    ("sum(-1) f32 [64,1048576]", rows, lambda: (r(64, 1 << 20),)),
    ("(x*x).sum() f32 [64M]", one_row, lambda: (r(64 << 20),)),
    ("sum(0) f32 [65536,1024]", cols, lambda: (r(65536, 1024),)),
    ("layer_norm bf16 [16384,4096]", ln, lambda: (r(16384, 4096, dtype=bf), r(4096, dtype=bf), r(4096, dtype=bf))),
    ("RMSNorm bf16 [16384,4096]", rms, lambda: (r(16384, 4096, dtype=bf), r(4096, dtype=bf))),
    ("softmax f32 [512,65536]", softmax, lambda: (r(512, 65536),)),
    ("batch_norm train fwd f32 [64,256,56,56]", bn_train,
     lambda: (r(64, 256, 56, 56), r(256), r(256).abs() + 1, r(256), r(256))),
    ("batch_norm bwd sums f32 [64,256,56,56]", bn_bwd,
     lambda: (r(64, 256, 56, 56), r(1, 256, 1, 1), r(1, 256, 1, 1), r(1, 256, 1, 1).abs(), r(64, 256, 56, 56),
              r(256, 1, 1))),
]


def timed(f, args, n=50) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        f(*args)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / n


def main() -> None:
    blocks = [int(a) for a in sys.argv[1:3]] or [0, 16]
    print(f"device: {torch.cuda.get_device_name()}")
    print(f"| case | sum_block={blocks[0]} min / median ms | sum_block={blocks[1]} min / median ms | ratio (min) |")
    print("|---|---|---|---|")
    for name, fn, make in CASES:
        torch.manual_seed(0)
        args = make()
        fs = []
        for B in blocks:
            dialects.CUDA.sum_block = B
            f = graphfuser.script(fn)
            for _ in range(5):
                f(*args)
            fs.append(f)
        torch.cuda.synchronize()
        times = [[], []]
        for _ in range(7):
            for k, f in enumerate(fs):
                times[k].append(timed(f, args))
        a, b = times
        print(f"| {name} | {min(a):.3f} / {statistics.median(a):.3f} | {min(b):.3f} / {statistics.median(b):.3f} "
              f"| {min(b) / min(a):.3f} |", flush=True)


if __name__ == "__main__":
    main()
