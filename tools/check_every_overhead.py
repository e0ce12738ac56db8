"""Steady-state cost of ``check_every``: ms per call with the knob off and at N, interleaved rounds.

Usage::

    python tools/check_every_overhead.py --device cpu --out logs/check-every-cpu.md
    python tools/check_every_overhead.py --device cuda --models resnet50,small-resnet,gpt2-blocks \\
        --out logs/check-every-cuda.md          # resnet50: the zoo's (torchvision)

Each model is scripted twice: once with ``check_every`` 0 and once with N (every N-th call of
the function runs its checking host program: each group fused and eagerly, compared with one host
sync at the end of the call; the other calls are the steady program, CUDA graph replay included).
On CUDA the ``added by checks`` columns time asynchronous work on the host (the checked call's
sync waits for the work queued before it): there the medians are the measurement. After warm-up, rounds alternate between the two (order
flipped every round); a round is ``--calls`` calls (at least N, so every round of the checked
copy includes each group's check). The table gives the median over rounds of the mean ms per
call, and the overhead of the median. Inference runs under ``torch.no_grad``; ``:train`` runs
forward, backward and an SGD step.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
from typing import Any, Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "models"))

import graphfuser  # noqa: E402
from graphfuser.config import config  # noqa: E402
from graphfuser.executor import fusion  # noqa: E402
from graphfuser.executor.fusion import STATS, FusionSite  # noqa: E402

CHECK_SECONDS = [0.0]     # inside checks: each checked call's kernel run, eager run and comparison
ADDED_SECONDS = [0.0]     # what the checks add: the eager runs and the comparisons


def _timed(fn: Callable, *counters: list) -> Callable:
    def timed(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            for c in counters:
                c[0] += time.perf_counter() - t0
    return timed


FusionSite.check = _timed(FusionSite.check, CHECK_SECONDS)
FusionSite.quick_check = _timed(FusionSite.quick_check, CHECK_SECONDS)
fusion.compare = _timed(fusion.compare, ADDED_SECONDS)
_eager_of = FusionSite.eager_of
FusionSite.eager_of = lambda self, group: _timed(_eager_of(self, group), ADDED_SECONDS)


def small_resnet() -> tuple[nn.Module, tuple[int, ...]]:
    from corpus import BasicBlock

    m = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
                      BasicBlock(16), BasicBlock(16, stride=2), BasicBlock(16), BasicBlock(16),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))
    return m, (3, 32, 32)


def gpt2_blocks() -> tuple[nn.Module, tuple[int, ...]]:
    from corpus import GPT2Block

    return nn.Sequential(*[GPT2Block(d=64, heads=4, ctx=32) for _ in range(2)]), (32, 64)


def zoo(name: str) -> Callable[[], tuple[nn.Module, tuple[int, ...]]]:
    def build() -> tuple[nn.Module, tuple[int, ...]]:
        from graphfuser.tools.zoo import build as zoo_build

        return zoo_build(name)
    return build


MODELS = {"small-resnet": small_resnet, "gpt2-blocks": gpt2_blocks}


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def make_step(sm: Any, model: nn.Module, x: torch.Tensor, train: bool) -> Callable[[], Any]:
    if not train:
        def infer() -> Any:
            with torch.no_grad():
                return sm(x)
        return infer
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step() -> Any:
        opt.zero_grad(set_to_none=True)
        out = sm(x)
        F.mse_loss(out, torch.zeros_like(out)).backward()
        opt.step()
    return step


def measure(name: str, device: str, batch: int, every: int, rounds: int, calls: int, train: bool) -> dict:
    build = MODELS.get(name) or zoo(name)
    torch.manual_seed(0)
    base, size = build()
    base = base.to(device).train(train)
    x = torch.randn(batch, *size, device=device)
    steps = {}
    groups = {}
    for mode, n in (("off", 0), (f"N={every}", every)):
        config.set(check_every=n)          # read when the host programs are built
        model = copy.deepcopy(base)
        sm = graphfuser.script(model)
        step = make_step(sm, model, x, train)
        for _ in range(every + 5):        # past the first check: its eager programs are built
            step()
        sync(device)
        fn = sm.function._specialized()
        groups[mode] = sum(1 for s in set(fn._sites.values()))
        steps[mode] = step
    config.set(check_every=0)
    checks0, seconds0, added0 = STATS["checks"], CHECK_SECONDS[0], ADDED_SECONDS[0]
    per_round: dict[str, list[float]] = {m: [] for m in steps}
    order = list(steps)
    for r in range(rounds):
        for mode in (order if r % 2 == 0 else order[::-1]):
            step = steps[mode]
            sync(device)
            t0 = time.perf_counter()
            for _ in range(calls):
                step()
            sync(device)
            per_round[mode].append(1e3 * (time.perf_counter() - t0) / calls)
    off, on = (statistics.median(per_round[m]) for m in order)
    off_min, on_min = (min(per_round[m]) for m in order)
    in_checks = 1e3 * (CHECK_SECONDS[0] - seconds0) / (rounds * calls)
    added = 1e3 * (ADDED_SECONDS[0] - added0) / (rounds * calls)
    return {"added_ms_per_call": added, "added_pct": 100.0 * added / off_min, "off_min_ms": off_min,
            "on_min_ms": on_min, "min_overhead_pct": 100.0 * (on_min - off_min) / off_min,
            "check_ms_per_call": in_checks, "check_pct": 100.0 * in_checks / off_min,
            "model": name + (":train" if train else ""), "device": device, "batch": batch, "groups": groups[order[1]],
            "off_ms": off, "on_ms": on, "overhead_pct": 100.0 * (on - off) / off, "every": every,
            "rounds": rounds, "calls_per_round": calls, "checks": STATS["checks"] - checks0,
            "per_round": per_round}


def markdown(results: list[dict], title: str) -> str:
    lines = [f"# {title}", "",
             "Steady-state ms per call, median over interleaved rounds (order flipped each round) of the "
             "mean over a round's calls; `off`: `check_every` 0 (the host program calls the kernels "
             "themselves); `N`: every N-th call of the function runs each group fused and eagerly and compares (one host sync per checked call).", "",
             "`added by checks`: the wall time of the checks' eager runs and comparisons, per model call, "
             "and as % of the fastest knob-off round, measured directly (far less exposed to the "
             "round-to-round noise of a shared machine than the difference of two medians); `in checks` "
             "also counts the kernel run of each checked call (made anyway). The per-call counting "
             "wrapper is in the timed rounds only.", "",
             "| model | device | batch | groups | N | off ms (median / min) | checked ms (median / min) | "
             "overhead median | overhead min | added by checks, ms per call | added % | in checks % | checks | "
             "rounds x calls |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['model']} | {r['device']} | {r['batch']} | {r['groups']} | {r['every']} | "
                     f"{r['off_ms']:.3f} / {r['off_min_ms']:.3f} | {r['on_ms']:.3f} / {r['on_min_ms']:.3f} | "
                     f"{r['overhead_pct']:+.1f}% | {r['min_overhead_pct']:+.1f}% | {r['added_ms_per_call']:.4f} | "
                     f"{r['added_pct']:.2f}% | {r['check_pct']:.2f}% | {r['checks']} | "
                     f"{r['rounds']} x {r['calls_per_round']} |")
    lines += ["", "Per-round ms (off / checked):", ""]
    for r in results:
        off, on = (r["per_round"][m] for m in r["per_round"])
        lines.append(f"- {r['model']}: off " + ", ".join(f"{v:.3f}" for v in off)
                     + "; checked " + ", ".join(f"{v:.3f}" for v in on))
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--models", default="small-resnet,small-resnet:train,gpt2-blocks")
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: as set)")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    results = []
    for spec in [m for m in args.models.split(",") if m]:
        name, train = spec.removesuffix(":train"), spec.endswith(":train")
        rounds = max(args.rounds // 2, 3) if train else args.rounds
        r = measure(name, args.device, args.batch, args.every, rounds, max(args.calls, args.every), train)
        print(json.dumps({k: v for k, v in r.items() if k != "per_round"}), flush=True)
        results.append(r)
    dev = torch.cuda.get_device_name() if args.device == "cuda" else f"CPU, {torch.get_num_threads()} thread(s)"
    text = markdown(results, f"check_every overhead ({dev}, torch {torch.__version__})")
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
            f.write("\nCommand: `python tools/check_every_overhead.py " + " ".join(sys.argv[1:]) + "`\n")


if __name__ == "__main__":
    main()
