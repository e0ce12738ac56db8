"""Column sums (outer reductions) at a transformer's and a ConvNeXt's training shapes: kernel time
per call of eager, Inductor and graphfuser, and of a residual add + layer norm's forward and backward (its weight and bias
gradients summed over the rows in the row kernel, ``passes/column_sums.py``).

    python -m graphfuser prof outer-sums --device cuda

Kernel time: the CUDA kernels torch.profiler records over ``--calls`` calls after warm-up, per
call (a lone ``sum`` is left to eager's kernel by graphfuser: single ops do not fuse), with
training replay off (``cuda_graphs_training``): a replayed step of one small graph copies its
arguments, outputs and gradients, which a model's whole graph does not pay per layer. Prints a
table, never asserts.
"""
from __future__ import annotations

import argparse
from typing import Callable, Optional

import torch
import torch.nn.functional as F


def sum_cast(x):
    return x.sum(0).to(torch.bfloat16).float()


def two_sums(g, x):
    return g.sum(0), (g * x).sum(0)


def lone_sum(x):
    return x.sum(0)


def add_layer_norm(x, r, w, b):
    return F.layer_norm(x + r, [x.shape[-1]], w, b, 1e-5)


def _r(*shape, dtype=torch.float32, device="cuda", grad=False):
    return torch.randn(*shape, device=device).to(dtype).requires_grad_(grad)


def cases(device: str) -> list[tuple[str, Callable, Callable[[], tuple], bool]]:
    """(name, fn, inputs, backward): ``backward`` times a forward + backward step."""
    bf = torch.bfloat16
    out = [
        ("x.sum(0) -> bf16 f32 [4096,768]", sum_cast, lambda: (_r(4096, 768, device=device),), False),
        ("g.sum(0), (g*x).sum(0) f32 [4096,768]", two_sums,
         lambda: (_r(4096, 768, device=device), _r(4096, 768, device=device)), False),
        ("x.sum(0) bf16 [100352,96]", lone_sum, lambda: (_r(100352, 96, dtype=bf, device=device),), False),
        ("x.sum(0) bf16 [25088,192]", lone_sum, lambda: (_r(25088, 192, dtype=bf, device=device),), False),
    ]
    for n, h in ((4096, 768), (4096, 1024), (100352, 96)):
        out.append((f"layer_norm(x + r) fwd+bwd f32 [{n},{h}]", add_layer_norm,
                    lambda n=n, h=h: (_r(n, h, device=device, grad=True), _r(n, h, device=device, grad=True),
                                      _r(h, device=device, grad=True), _r(h, device=device, grad=True)), True))
    return out


def kernel_us(fn: Callable, args: tuple, backward: bool, calls: int, kernels: Optional[dict] = None) -> float:
    from .common import kernel_us_per_step

    def step():
        out = fn(*args)
        if backward:
            out.backward(torch.ones_like(out))

    return kernel_us_per_step(step, calls, kernels=kernels)


def main(argv: Optional[list[str]] = None) -> int:
    import graphfuser

    p = argparse.ArgumentParser(prog="prof outer-sums", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--calls", type=int, default=30)
    p.add_argument("--kernels", action="store_true", help="after the table: each cell's kernels, us and launches per call")
    args = p.parse_args(argv)
    if args.device != "cuda" or not torch.cuda.is_available():
        print("prof outer-sums times CUDA kernels: it needs a GPU")
        return 0
    print(f"{torch.cuda.get_device_name()}: kernel us per call")
    print("| case | eager | inductor | graphfuser |")
    print("|---|---:|---:|---:|")
    detail = []
    for name, fn, make, backward in cases(args.device):
        cells = []
        for label, wrap in (("eager", lambda f: f), ("inductor", torch.compile), ("graphfuser", graphfuser.script)):
            torch.manual_seed(0)
            kernels: dict = {}
            # kernels only: a replayed training step of so small a graph would add its copies in
            # and out (its arguments are a model's activations, its outputs the caller's)
            with graphfuser.config.override(disable=["cuda_graphs_training"]):
                cells.append(f"{kernel_us(wrap(fn), make(), backward, args.calls, kernels):.1f}")
            detail.append((f"{name}, {label}", kernels))
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
    if args.kernels:
        for title, kernels in detail:
            print(f"\n{title}:")
            for k, (us, n) in sorted(kernels.items(), key=lambda kv: -kv[1][0]):
                print(f"  {us:8.1f} us  x{n:g}  {k[:110]}")
    return 0
