"""Distributed training through graphfuser trains like eager (gloo, 2 CPU processes): DDP over
``graphfuser.script(module)``, DDP under the ``torch.compile`` backend (Dynamo's DDP optimizer
splits the graph at the gradient buckets), and FSDP2 (``fully_shard``) under the backend."""
from __future__ import annotations

import copy
import os

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


def _side_by_side(rank: int, *models: tuple) -> list[list[float]]:
    """``STEPS`` SGD steps of each ``(model, parameters)`` on the same batches (each rank its own
    shard of the data); the per-step losses of each."""
    steps = [(model, torch.optim.SGD(params, lr=0.05, momentum=0.9), []) for model, params in models]
    gen = torch.Generator().manual_seed(100 + rank)
    for _ in range(STEPS):
        x, y = torch.randn(4, 3, 6, 6, generator=gen), torch.randn(4, 5, generator=gen)
        for model, opt, losses in steps:
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return [losses for _, _, losses in steps]


def _train_compiled(rank: int, mode: str, out_dir: str) -> None:
    """DDP (``mode`` "compile_ddp") or FSDP2 ("compile_fsdp2") under the backend, beside the same
    wrapper without it: the per-step losses and each rank's parameters (shards) agree."""
    from graphfuser.executor.fusion import live_fusion_groups
    from graphfuser.frontend.dynamo import graphfuser_backend

    torch.manual_seed(0)
    eager = ConvMLP()
    fused = copy.deepcopy(eager)
    if mode == "compile_ddp":
        model_e, wrapped = DDP(eager), DDP(fused)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (WORLD,))
        model_e, wrapped = fully_shard(eager, mesh=mesh), fully_shard(fused, mesh=mesh)
    model_g = torch.compile(wrapped, backend=graphfuser_backend)
    losses_e, losses_g = _side_by_side(rank, (model_e, eager.parameters()), (model_g, fused.parameters()))
    torch.testing.assert_close(losses_g, losses_e, **TOL)
    for (name, a), b in zip(fused.named_parameters(), eager.parameters()):
        a, b = (t.to_local() if hasattr(t, "to_local") else t for t in (a, b))
        torch.testing.assert_close(a, b, **TOL, msg=lambda m: f"rank {rank} {name}: {m}")
    assert live_fusion_groups() > 0
    torch.save({"losses": losses_g}, os.path.join(out_dir, f"rank{rank}.pt"))


def _train(rank: int, out_dir: str, mode: str = "script") -> None:
    torch.set_num_threads(1)
    # rendezvous through a file of the test's own directory: no TCP port another test process
    # could take between choosing and binding it (a suite run in parallel workers)
    dist.init_process_group("gloo", init_method=f"file://{os.path.join(out_dir, 'rendezvous')}",
                            rank=rank, world_size=WORLD)
    try:
        if mode != "script":
            _train_compiled(rank, mode, out_dir)
            return
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
        losses_e, losses_s = _side_by_side(rank, (ddp_e, ddp_e.parameters()), (ddp_s, ddp_s.parameters()))
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
    mp.spawn(_train, args=(str(tmp_path),), nprocs=WORLD, join=True)
    results = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]
    assert all(len(r["losses"]) == STEPS for r in results)
    assert results[0]["losses"] != results[1]["losses"]     # different shards, one model


@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="needs torch.distributed with gloo")
@pytest.mark.parametrize("mode", ["compile_ddp", "compile_fsdp2"])
def test_ddp_and_fsdp2_under_the_backend_train_like_eager(tmp_path, mode):
    mp.spawn(_train, args=(str(tmp_path), mode), nprocs=WORLD, join=True)
    results = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]
    assert all(len(r["losses"]) == STEPS for r in results)
    assert results[0]["losses"] != results[1]["losses"]     # different shards, one model
