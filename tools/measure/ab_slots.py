"""A/B timing of a CPU layer-norm training step (its backward's column sums) with two slot sizes
(``compiled_reduction.SLOT_ROWS``), in one process, timed alternately.

    PYTHONPATH=$PWD python tools/measure/ab_slots.py 1000000000 64
"""
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.executor import compiled_reduction


def ln(x, w, b):
    return F.layer_norm(x * 1.5, [x.shape[-1]], w, b, 1e-5) * 2.0


def main() -> None:
    sizes = [int(a) for a in sys.argv[1:3]]
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    print("| case | slots of %d rows: min / median ms | slots of %d rows: min / median ms | ratio (min) |" % tuple(sizes))
    print("|---|---|---|---|")
    for rows, h in ((16384, 1024), (65536, 256)):
        torch.manual_seed(0)
        x = torch.randn(rows, h).requires_grad_()
        w, b = torch.randn(h).requires_grad_(), torch.randn(h).requires_grad_()
        gy = torch.randn(rows, h)
        fs = []
        for n in sizes:
            compiled_reduction.SLOT_ROWS = n
            f = graphfuser.script(ln)
            for _ in range(6):
                torch.autograd.grad(f(x, w, b), [x, w, b], gy)
            fs.append(f)
        times = [[], []]
        for _ in range(reps):
            for k, f in enumerate(fs):
                t = time.perf_counter()
                torch.autograd.grad(f(x, w, b), [x, w, b], gy)
                times[k].append((time.perf_counter() - t) * 1e3)
        a, c = times
        print(f"| layer_norm fwd+bwd f32 [{rows},{h}] | {min(a):.2f} / {statistics.median(a):.2f} | "
              f"{min(c):.2f} / {statistics.median(c):.2f} | {min(c) / min(a):.3f} |", flush=True)


if __name__ == "__main__":
    main()
