"""GPU checks of the torch.compile backend (needs a CUDA GPU; every check compares with eager).

    python tools/measure/cuda_backend_check.py

- a model with a tensor slice (a Python call free of effects) fuses and replays as a CUDA graph
  (``cuda_graphs.STATS["replays"]`` grows) under ``mode="reduce-overhead"``;
- parameters are read in place by replays: an in-place update of a weight (an optimizer step)
  is seen by the next replayed call; a replaced parameter tensor captures anew;
- the same at a second batch size (sizes are run-time arguments);
- bf16 autocast around the compiled model, and a training step (forward and backward fused)
  against eager's gradients.
Prints one line per check and exits non-zero on the first failure.
"""
from __future__ import annotations

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

from graphfuser.executor import cuda_graphs
from graphfuser.frontend.dynamo import graphfuser_backend


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(256, 512)
        self.ln = nn.LayerNorm(512)
        self.fc2 = nn.Linear(512, 256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.ln(self.fc1(x)))
        h = h[:, : h.shape[1] // 2].repeat(1, 2)       # a pure Python call in the graph
        return self.fc2(h * torch.sigmoid(h)) + x


def check(name: str, got: torch.Tensor, want: torch.Tensor, **tol) -> None:
    torch.testing.assert_close(got, want, **tol)
    print(f"ok  {name}")


def main() -> None:
    assert torch.cuda.is_available(), "needs a CUDA GPU"
    torch.manual_seed(0)
    m = Net().cuda().eval()
    c = torch.compile(m, backend=graphfuser_backend, mode="reduce-overhead")
    x = torch.randn(64, 256, device="cuda")
    with torch.no_grad():
        for _ in range(8):
            out = c(x)
        check("inference", out, m(x))
        before = cuda_graphs.STATS["replays"]
        for _ in range(4):
            out = c(x)
        print(f"    replays: {cuda_graphs.STATS['replays'] - before} of 4 calls, captures "
              f"{cuda_graphs.STATS['captures']}, last error {cuda_graphs.STATS.get('last_error')}")
        check("inference while replaying", out, m(x))
        m.fc1.weight.add_(0.5)                         # in place: the replay reads it
        check("in-place weight update seen", c(x), m(x))
        m.fc2.weight = nn.Parameter(m.fc2.weight.detach() * 2.0)   # a new tensor: a new capture
        for _ in range(5):
            out = c(x)
        check("replaced parameter seen", out, m(x))
        y = torch.randn(16, 256, device="cuda")
        for _ in range(5):
            out = c(y)
        check("second batch size", out, m(y))
        with torch.autocast("cuda", dtype=torch.bfloat16):
            for _ in range(5):
                out = c(x)
            ref = m(x)
        check("bf16 autocast", out.float(), ref.float(), rtol=4e-2, atol=4e-2)

    torch._dynamo.reset()
    m.train()
    ref_m = copy.deepcopy(m)
    c = torch.compile(m, backend=graphfuser_backend)
    for step in range(6):
        x = torch.randn(64, 256, device="cuda")
        c(x).pow(2).mean().backward()
        ref_m(x).pow(2).mean().backward()
        for p, q in zip(m.parameters(), ref_m.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
            p.grad = q.grad = None
    print("ok  training gradients (6 steps)")
    import graphfuser

    g = str(graphfuser.last_executed_optimized_graph())
    assert "prim::CudaFusionGroup" in g, g
    print("ok  CUDA fusion groups present")


if __name__ == "__main__":
    main()
