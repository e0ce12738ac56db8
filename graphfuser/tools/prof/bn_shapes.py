"""Batch norm in training at every batch-norm shape of a model: kernel time of one forward +
backward of ``relu(batch_norm(x))``, graphfuser channels-last and NCHW beside eager's and
Inductor's (``torch.compile``, default mode, compiled afresh per shape), summed with the model's
count of each shape.

    python -m graphfuser prof bn-shapes --device cuda            # resnet50's shapes, bf16, batch 32

Kernel time: the CUDA kernels torch.profiler records over ``--calls`` steps after warm-up, per
step. The sum weighs each shape by how often resnet50 has it, so it stands for the model's batch
norms (not its ReLUs: bottleneck ends add the residual first). Prints text, never asserts.
"""
from __future__ import annotations

import argparse
import itertools
from typing import Optional

import torch
import torch.nn.functional as F

# resnet50's 53 batch norms: (channels, height) -> how many (224 x 224 inputs, as the race's)
RESNET50 = [((64, 112), 1), ((64, 56), 6), ((256, 56), 4), ((128, 56), 1), ((128, 28), 7), ((512, 28), 5),
            ((256, 28), 1), ((256, 14), 11), ((1024, 14), 7), ((512, 14), 1), ((512, 7), 5), ((2048, 7), 4)]


def bn_relu(x, w, b, rm, rv):
    return F.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5).relu()


def _inputs(n: int, c: int, h: int, channels_last: bool, dtype: torch.dtype, device: str) -> tuple:
    x = torch.randn(n, c, h, h, device=device, dtype=dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    w = torch.rand(c, device=device).add(0.5).to(dtype).requires_grad_()
    b = torch.randn(c, device=device).to(dtype).requires_grad_()
    rm, rv = torch.zeros(c, device=device, dtype=dtype), torch.ones(c, device=device, dtype=dtype)
    return (x.requires_grad_(), w, b, rm, rv), torch.randn_like(x)


def kernel_us(fn, args: tuple, grad: torch.Tensor, calls: int, kernels: Optional[dict] = None) -> float:
    """Kernel microseconds per forward + backward step (CUDA kernels in torch.profiler's record);
    ``kernels`` receives (us, launches) per step by kernel name."""
    from .common import kernel_us_per_step

    return kernel_us_per_step(lambda: fn(*args).backward(grad), calls, kernels=kernels)


def main(argv: Optional[list[str]] = None) -> int:
    import graphfuser
    from ...config import config

    p = argparse.ArgumentParser(prog="prof bn-shapes", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--no-inductor", action="store_true")
    p.add_argument("--sweep", default="",
                   help='also graphfuser channels-last at each combination of split knobs, e.g. "rows=32,256 by=8,32" '
                        "(cuda.reduction_outer_split_rows, cuda.reduction_outer_split_block_y)")
    p.add_argument("--kernels", action="store_true", help="each backend's kernels per shape")
    args = p.parse_args(argv)
    if args.device != "cuda" or not torch.cuda.is_available():
        print("prof bn-shapes times CUDA kernels: it needs a GPU")
        return 0
    dtype = getattr(torch, args.dtype)
    backends = {"graphfuser_cl": (graphfuser.script(bn_relu), True), "graphfuser_nchw": (graphfuser.script(bn_relu), False),
                "eager_cl": (bn_relu, True), "eager_nchw": (bn_relu, False)}
    knobs = {}
    names = {"rows": "reduction_outer_split_rows", "by": "reduction_outer_split_block_y"}
    axes = [(k, [int(v) for v in vals.split(",")]) for k, vals in (a.split("=") for a in args.sweep.split())]
    for combo in itertools.product(*[v for _, v in axes]) if axes else ():
        label = "gf_cl_" + "_".join(f"{k}{v}" for (k, _), v in zip(axes, combo))
        knobs[label] = {names[k]: v for (k, _), v in zip(axes, combo)}
        backends[label] = (graphfuser.script(bn_relu), True)
    if not args.no_inductor:
        backends["inductor_cl"] = (None, True)
    total = dict.fromkeys(backends, 0.0)
    print(f"{torch.cuda.get_device_name()}, {args.dtype}, batch {args.batch}: kernel us per forward + backward")
    print("| shape | count | " + " | ".join(backends) + " |")
    print("|---|---:|" + "---:|" * len(backends))
    detail: list[str] = []
    for (c, h), count in RESNET50:
        cells = []
        for name, (fn, cl) in backends.items():
            if fn is None:              # Inductor: a fresh compile per shape (no recompile limit)
                torch._dynamo.reset()
                fn = torch.compile(bn_relu)
            a, g = _inputs(args.batch, c, h, cl, dtype, args.device)
            ks: dict = {}
            with config.override(cuda=knobs.get(name, {})):
                us = kernel_us(fn, a, g, args.calls, ks)
            if args.kernels:
                detail.append(f"[{args.batch}, {c}, {h}, {h}] {name}: " + "; ".join(
                    f"{k[:60]} {t:.1f}us x{n:g}" for k, (t, n) in sorted(ks.items(), key=lambda kv: -kv[1][0])))
            total[name] += us * count
            cells.append(f"{us:.1f}")
        print(f"| [{args.batch}, {c}, {h}, {h}] | {count} | " + " | ".join(cells) + " |")
    print("| resnet50 (sum x count) | | " + " | ".join(f"{v:.0f}" for v in total.values()) + " |")
    print("\n".join(detail))
    return 0
