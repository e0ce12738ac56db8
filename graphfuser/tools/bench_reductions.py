"""Reduction and normalization bench cases (issue 5), for ``tools/bench.py``.

``cases(device)`` lists ``(name, fn, make)``; ``tools/bench.py`` runs them side by side with
eager, torch.jit.script and torch.compile. Run alone, this tool times only these cases:

    python tools/bench_reductions.py --device cuda [--only softmax] [--quick]
    python -m graphfuser bench_reductions --device cuda     # the same
"""
from __future__ import annotations

import argparse
import sys
from typing import Callable, Optional

import torch
import torch.nn.functional as F


def softmax(x):
    return torch.softmax(x, -1)


def layer_norm(x, w, b):
    return F.layer_norm(x, [x.shape[-1]], w, b, 1e-5)


def rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def add_mul3_sum(t0, t1):
    return ((t0 + t1) * 3).sum(-1)


def sum_of_squares(x):
    return (x * x).sum()


def batch_norm_eval(x, rm, rv, w, b):
    return F.batch_norm(x, rm, rv, w, b, False, 0.1, 1e-5)


def _r(*shape, dtype=torch.float32, device="cpu"):
    return torch.randn(*shape, device=device).to(dtype)


def cases(device: str, quick: bool = False) -> list[tuple[str, Callable, Callable[[str], tuple]]]:
    bf = torch.bfloat16
    rows = 4096 if quick else 16384
    out = [
        (f"softmax bf16 [{rows},4096]", softmax, lambda d: (_r(rows, 4096, dtype=bf, device=d),)),
        (f"layer_norm bf16 [{rows},4096] affine", layer_norm,
         lambda d: (_r(rows, 4096, dtype=bf, device=d), _r(4096, dtype=bf, device=d), _r(4096, dtype=bf, device=d))),
        (f"RMSNorm bf16 [{rows},4096]", rms_norm,
         lambda d: (_r(rows, 4096, dtype=bf, device=d), _r(4096, dtype=bf, device=d))),
        ("((t0+t1)*3).sum(-1) f32 [128,1,2048]+[128,512,2048]", add_mul3_sum,
         lambda d: (_r(128, 1, 2048, device=d), _r(128, 512, 2048, device=d))),
        ("batch_norm eval f32 [64,256,56,56]", batch_norm_eval,
         lambda d: (_r(64, 256, 56, 56, device=d), _r(256, device=d), _r(256, device=d).abs() + 0.5,
                    _r(256, device=d), _r(256, device=d))),
        ("softmax f32 [512,65536]", softmax, lambda d: (_r(512, 65536, device=d),)),
        ("(x*x).sum() f32 [64M] (one row, split across blocks)", sum_of_squares,
         lambda d: (_r(64 * 1024 * 1024, device=d),)),
    ]
    # narrow rows: the channels-last layer norms of a ConvNeXt-T's four stages at batch 64
    # (rows of 96..768 channels), and an RMSNorm of 96
    for n, h in ((200704, 96), (50176, 192), (12544, 384), (3136, 768)):
        out.append((f"layer_norm bf16 [{n},{h}] affine (narrow)", layer_norm,
                    lambda d, n=n, h=h: (_r(n, h, dtype=bf, device=d), _r(h, dtype=bf, device=d),
                                         _r(h, dtype=bf, device=d))))
    out.append(("RMSNorm bf16 [200704,96] (narrow)", rms_norm,
                lambda d: (_r(200704, 96, dtype=bf, device=d), _r(96, dtype=bf, device=d))))
    out.append(("softmax bf16 [200704,96] (narrow)", softmax, lambda d: (_r(200704, 96, dtype=bf, device=d),)))
    for h in (1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384):
        n = max(1, rows * 4096 // h)
        out.append((f"layer_norm bf16 [{n},{h}] affine (sweep)", layer_norm,
                    lambda d, n=n, h=h: (_r(n, h, dtype=bf, device=d), _r(h, dtype=bf, device=d),
                                         _r(h, dtype=bf, device=d))))
    return out


def main(argv: Optional[list[str]] = None) -> int:
    from . import bench

    ap = argparse.ArgumentParser(prog="bench_reductions", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--only", default="")
    ap.add_argument("--skip", default="", help="substring filter: leave these cases out")
    ap.add_argument("--quick", action="store_true", help="4096 rows instead of 16384")
    ap.add_argument("--backends", default="", help="comma list to keep, e.g. eager,graphfuser")
    args = ap.parse_args(argv)
    dev = args.device
    torch.manual_seed(0)
    copy_bw = bench.copy_bandwidth(dev) if dev == "cuda" else None
    name = torch.cuda.get_device_name() if dev == "cuda" else "CPU"
    print(f"device: {name}" + (f", copy {copy_bw / 1e9:.0f} GB/s" if copy_bw else ""))
    if args.backends:
        keep = set(args.backends.split(","))
        full = bench.backends
        bench.backends = lambda fn, d: {k: v for k, v in full(fn, d).items() if k in keep}
    for case_name, fn, make in cases(dev, args.quick):
        if (args.only and args.only not in case_name) or (args.skip and args.skip in case_name):
            continue
        row = bench.run_case(bench.Case(case_name, fn, make), dev, copy_bw)
        cells = []
        for b, e in row["backends"].items():
            if "error" in e:
                cells.append(f"{b}: {e['error'][:80]}")
            else:
                pct = f" {e['pct_copy_bw']:.0f}%" if "pct_copy_bw" in e else ""
                cells.append(f"{b}: {e['ms']:.3f} ms {e['GB/s']:.0f} GB/s{pct}")
        print(f"{case_name:55s} | " + " | ".join(cells), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
