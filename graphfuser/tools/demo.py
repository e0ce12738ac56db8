"""graphfuser in one screen: script an MLP block, run it, show the optimized graph, check vs eager.

    .venv/bin/python tools/demo.py            # CPU, and CUDA too when a GPU is present
    python -m graphfuser demo                 # the same

The block is Linear -> bias + GELU(tanh) -> residual -> an RMSNorm-style chain
(x * rsqrt(mean(x^2) + eps) * w). The matmul stays an aten call; the pointwise (and, where the
backend takes it, reduction) work around it is fused. Exit code 1 when any output differs from
eager beyond the dtype's tolerance.
"""
from __future__ import annotations

import sys
import time
import warnings
from typing import Optional

import torch

import graphfuser


class MLPBlock(torch.nn.Module):
    def __init__(self, dim: int = 256, hidden: int = 256, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(hidden, dim) / dim ** 0.5)
        self.bias = torch.nn.Parameter(torch.randn(hidden) * 0.1)
        self.norm_weight = torch.nn.Parameter(1.0 + 0.1 * torch.randn(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.linear(x, self.weight)
        h = torch.nn.functional.gelu(h + self.bias, approximate="tanh")
        h = h + x
        scale = torch.rsqrt((h * h).mean(-1, keepdim=True) + self.eps)
        return h * scale * self.norm_weight


def print_graph(text: str, title: str) -> None:
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.syntax import Syntax

        console = Console()
        console.rule(title)
        console.print(Syntax(text, "python", theme="monokai", word_wrap=True))
    else:
        print(f"===== {title} =====\n{text}")


def fusion_summary(graph) -> tuple[int, int]:
    """(aten nodes fused, groups); the fallback copies are not counted."""
    groups = [n for n in graph.all_nodes() if n.kind.endswith("FusionGroup")]
    nodes = sum(1 for g in groups for n in g.subgraph.nodes() if n.kind.startswith("aten::"))
    return nodes, len(groups)


def run(device: str, runs: int = 5) -> bool:
    torch.manual_seed(0)
    model = MLPBlock().to(device).eval()
    scripted = graphfuser.script(model)
    x = torch.randn(8, 64, 256, device=device)
    with torch.no_grad():
        start = time.perf_counter()
        for _ in range(runs):
            out = scripted(x)
        if device == "cuda":
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        ref = model(x)
        # a new batch size reuses the specialization (sizes are run-time arguments)
        x2 = torch.randn(3, 17, 256, device=device)
        out2, ref2 = scripted(x2), model(x2)

    graph = graphfuser.last_executed_optimized_graph()
    print_graph(str(graph), f"optimized graph ({device})")
    nodes, groups = fusion_summary(graph)
    print(f"[{device}] fused {nodes} nodes into {groups} group(s); {runs} calls took {elapsed:.2f} s "
          f"(profiling, compile and steady state)")

    ok = True
    for name, got, want in (("batch 8x64", out, ref), ("batch 3x17", out2, ref2)):
        diff = (got - want).abs().max().item()
        close = torch.allclose(got, want, rtol=1e-4, atol=1e-4)
        ok &= close
        print(f"[{device}] {name}: max abs difference vs eager {diff:.3e}  {'OK' if close else 'FAIL'}")
    return ok


def main(argv: Optional[list[str]] = None) -> int:
    import argparse

    argparse.ArgumentParser(prog="demo", description=__doc__.splitlines()[0]).parse_args(argv)
    warnings.simplefilter("default")
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    results = [run(d) for d in devices]
    ok = all(results)
    print("OK" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
