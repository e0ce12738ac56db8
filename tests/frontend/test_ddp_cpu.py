"""DistributedDataParallel over ``graphfuser.script(module)`` trains like eager DDP (gloo, 2 CPU processes)."""
from __future__ import annotations

import copy
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

WORLD = 2
STEPS = 5
TOL = {"rtol": 1e-5, "atol": 1e-6}     # fused fp32 kernels round differently in the last bits


class ConvMLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.fc1 = torch.nn.Linear(8 * 6 * 6, 32)
        self.fc2 = torch.nn.Linear(32, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.conv(x)).flatten(1)
        h = torch.tanh(self.fc1(h)) * 0.5 + h.mean(1, keepdim=True)
        return self.fc2(h)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _train(rank: int, port: int, out_dir: str) -> None:
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        import graphfuser
        from graphfuser.executor.fusion import STATS

        torch.manual_seed(0)                       # the same initial weights on both ranks
        eager = ConvMLP()
        if rank == 1:                              # DDP broadcasts rank 0's weights: both start alike
            with torch.no_grad():
                for p in eager.parameters():
                    p.add_(1.0)
        scripted = graphfuser.script(copy.deepcopy(eager))
        ddp_e, ddp_s = DDP(eager), DDP(scripted)
        opt_e = torch.optim.SGD(ddp_e.parameters(), lr=0.05, momentum=0.9)
        opt_s = torch.optim.SGD(ddp_s.parameters(), lr=0.05, momentum=0.9)
        gen = torch.Generator().manual_seed(100 + rank)  # each rank its own shard
        losses_e, losses_s = [], []
        for _ in range(STEPS):
            x, y = torch.randn(4, 3, 6, 6, generator=gen), torch.randn(4, 5, generator=gen)
            for ddp, opt, losses in ((ddp_e, opt_e, losses_e), (ddp_s, opt_s, losses_s)):
                opt.zero_grad()
                loss = F.mse_loss(ddp(x), y)
                loss.backward()
                opt.step()
                losses.append(loss.item())
        torch.testing.assert_close(losses_s, losses_e, **TOL)
        for (name, a), b in zip(ddp_s.module.named_parameters(), ddp_e.module.parameters()):
            torch.testing.assert_close(a, b, **TOL, msg=lambda m: f"rank {rank} {name}: {m}")
        assert scripted._optimized is not None and "FusionGroup" in str(scripted._optimized)
        # the ranks stayed in step: rank 1's final weights are rank 0's
        flat = torch.cat([p.detach().flatten() for p in scripted.parameters()])
        both = [torch.empty_like(flat) for _ in range(WORLD)]
        dist.all_gather(both, flat)
        torch.testing.assert_close(both[0], both[1])
        torch.save({"losses": losses_s, "profiling_calls": STATS["profiling_calls"]},
                   os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="needs torch.distributed with gloo")
def test_ddp_over_scripted_module_trains_like_eager_ddp(tmp_path):
    mp.spawn(_train, args=(_free_port(), str(tmp_path)), nprocs=WORLD, join=True)
    results = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]
    assert all(len(r["losses"]) == STEPS for r in results)
    assert results[0]["losses"] != results[1]["losses"]     # different shards, one model
