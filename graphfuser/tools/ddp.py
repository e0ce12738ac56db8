"""DDP training through ``graphfuser.script`` beside eager DDP, one process per GPU.

Run with::

    torchrun --nproc_per_node 2 -m graphfuser.tools.ddp --out logs/ddp-gpu.json

Per model (torchvision resnet50; GPT-2 from ``GPT2Config`` with random weights where
``transformers`` is importable) and mode (``eager``: DDP(model); ``graphfuser``:
DDP(graphfuser.script(model)); ``graphfuser_compile``: torch.compile(DDP(model), backend="graphfuser"), where
Dynamo's ``optimize_ddp`` splits the graph at the gradient buckets; optionally ``inductor``: the same with
Inductor), every rank
starts from the same weights (seed 0), draws its own batches (seed 1000 + rank), and runs
``--steps`` SGD steps. Rank 0 writes JSON: per-step losses (averaged over the ranks), per-step
wall milliseconds, the steady median, the largest relative loss difference from eager, and any
error a mode raised (a model ``torch.jit.script`` cannot take is reported, not fatal).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import traceback
from typing import Any, Callable, Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def resnet50() -> tuple[torch.nn.Module, Callable[[torch.Generator, int, torch.device], tuple]]:
    import torchvision

    def batch(gen: torch.Generator, n: int, device: torch.device) -> tuple:
        x = torch.randn(n, 3, 224, 224, generator=gen, device=device)
        y = torch.randint(0, 1000, (n,), generator=gen, device=device)
        return x, y

    return torchvision.models.resnet50(), batch


def gpt2() -> tuple[torch.nn.Module, Callable[[torch.Generator, int, torch.device], tuple]]:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_positions=512, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(cfg)
    model.config.use_cache = False

    def batch(gen: torch.Generator, n: int, device: torch.device) -> tuple:
        ids = torch.randint(0, cfg.vocab_size, (n, 256), generator=gen, device=device)
        return ids, ids

    return model, batch


class _Tiny(torch.nn.Module):
    """A module of its own, not a bare ``nn.Sequential``: Dynamo does not start tracing in
    ``torch.nn``'s files, so after its graph break inside DDP's forward it would compile nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
                                        torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                        torch.nn.Linear(8, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def tiny() -> tuple[torch.nn.Module, Callable[[torch.Generator, int, torch.device], tuple]]:
    """A small conv net with batch norm: a smoke test of this script on the CPU (``--cpu``)."""
    model = _Tiny()

    def batch(gen: torch.Generator, n: int, device: torch.device) -> tuple:
        x = torch.randn(n, 3, 16, 16, generator=gen, device=device)
        return x, torch.randint(0, 10, (n,), generator=gen, device=device)

    return model, batch


MODELS: dict[str, tuple[Callable, int]] = {"resnet50": (resnet50, 32), "gpt2": (gpt2, 8), "tiny": (tiny, 8)}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def loss_of(name: str, out: Any, y: torch.Tensor) -> torch.Tensor:
    if name == "gpt2":
        logits = out["logits"] if isinstance(out, dict) else (out.logits if hasattr(out, "logits") else out[0])
        return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), y[:, 1:].flatten())
    return F.cross_entropy(out.float(), y)


def train(name: str, mode: str, steps: int, batch_size: int, amp: Optional[torch.dtype], rank: int,
          device: torch.device) -> dict:
    import graphfuser

    make, _ = MODELS[name]
    torch.manual_seed(0)
    model, batch = make()
    model = model.to(device).train()
    t0 = time.perf_counter()
    if mode == "graphfuser":
        model = graphfuser.script(model)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    if mode == "inductor":
        ddp = torch.compile(ddp)
    elif mode == "graphfuser_compile":
        from ..frontend.dynamo import registered_backend

        ddp = torch.compile(ddp, backend=registered_backend())
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    gen = torch.Generator(device=device).manual_seed(1000 + rank)
    losses, times = [], []
    first_s = None
    for step in range(steps):
        x, y = batch(gen, batch_size, device)
        sync(device)
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=amp, enabled=amp is not None):
            out = ddp(x)
        loss = loss_of(name, out, y)
        loss.backward()
        opt.step()
        sync(device)
        end = time.perf_counter()
        if first_s is None:
            first_s = end - t0
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / dist.get_world_size())
        times.append(1e3 * (end - start))
    steady = times[len(times) // 2:]
    result: dict = {"losses": losses, "step_ms": times, "steady_ms": statistics.median(steady),
                    "first_step_s": first_s}
    if mode.startswith("graphfuser"):
        from ..executor.fusion import live_fusion_groups

        result["fusion_groups"] = live_fusion_groups()    # forward and backward graphs alive now
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="JSON file rank 0 writes")
    ap.add_argument("--models", default="resnet50,gpt2")
    ap.add_argument("--modes", default="eager,graphfuser,graphfuser_compile", help="eager, graphfuser, graphfuser_compile, inductor")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--amp", choices=("none", "bf16", "fp16"), default="none")
    ap.add_argument("--cpu", action="store_true", help="gloo on the CPU (a smoke test: --models tiny)")
    ap.add_argument("--tf32", action="store_true", help="allow TF32 (off by default: losses comparable)")
    args = ap.parse_args()

    rank, local = int(os.environ.get("RANK", 0)), int(os.environ.get("LOCAL_RANK", 0))
    if args.cpu:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    else:
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    amp = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}[args.amp]

    report: dict = {"world_size": dist.get_world_size(),
                    "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                    "torch": torch.__version__, "amp": args.amp, "tf32": args.tf32, "steps": args.steps, "models": {}}
    for name in [m for m in args.models.split(",") if m]:
        if name == "gpt2":
            try:
                import transformers  # noqa: F401
            except ImportError:
                report["models"][name] = {"skipped": "transformers is not importable"}
                continue
        _, batch_size = MODELS[name]
        entry: dict = {"batch_per_rank": batch_size}
        for mode in [m for m in args.modes.split(",") if m]:
            try:
                entry[mode] = train(name, mode, args.steps, batch_size, amp, rank, device)
            except Exception as e:  # noqa: BLE001 - reported per model and mode
                entry[mode] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
            dist.barrier()
            if device.type == "cuda":
                torch.cuda.empty_cache()
        ref = entry.get("eager", {}).get("losses")
        for mode, res in entry.items():
            if isinstance(res, dict) and ref and res.get("losses") and mode != "eager":
                res["max_rel_loss_diff_vs_eager"] = max(abs(a - b) / max(abs(b), 1e-12)
                                                        for a, b in zip(res["losses"], ref))
                res["speedup_vs_eager"] = entry["eager"]["steady_ms"] / res["steady_ms"]
        report["models"][name] = entry
        if rank == 0:
            summary = {m: {k: v for k, v in r.items() if k in ("steady_ms", "max_rel_loss_diff_vs_eager", "error",
                                                               "fusion_groups", "speedup_vs_eager")}
                       for m, r in entry.items() if isinstance(r, dict)}
            print(name, json.dumps(summary), flush=True)
    if rank == 0:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
        print(f"wrote {args.out}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
