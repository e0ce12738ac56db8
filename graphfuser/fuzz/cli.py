"""``python tools/fuzz.py`` / ``python -m graphfuser fuzz``: run a campaign, write the report."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Optional


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--graphs", type=int, default=200, help="number of random graphs")
    p.add_argument("--seed", type=int, default=1, help="hypothesis seed (CI uses 20261122)")
    p.add_argument("--out", default="logs", help="directory for fuzz-<device>.md/.json")
    p.add_argument("--repros", default=None, help="directory for repro files (default: <out>/fuzz-repros)")
    p.add_argument("--jobs", type=int, default=1, help="worker processes")
    p.add_argument("--timeout", type=float, default=90.0, help="seconds per graph before it counts as a hang")
    p.add_argument("--shrink", type=int, default=12, help="failure classes to shrink (0: none)")
    p.add_argument("--shrink-seconds", type=float, default=60.0, help="budget per shrunk class")
    p.add_argument("--max-ops", type=int, default=5, help="statements per graph at most")
    p.add_argument("--no-fallback", action="store_true",
                   help="run with the fallback disabled (PYTORCH_NVFUSER_DISABLE=fallback): compile errors raise")
    p.add_argument("--emulate-precision", action="store_true",
                   help="turn on emulate_precision_casts where the config has it (pointwise chains exact)")


def run_args(args: argparse.Namespace) -> int:
    from ..config import DEFAULTS
    from . import campaign, report

    knobs: dict = {}
    if args.no_fallback:
        knobs["disable"] = ["fallback"]
    if args.emulate_precision:
        if "emulate_precision_casts" in DEFAULTS:
            knobs["emulate_precision_casts"] = True
        else:
            print("fuzz: this build has no emulate_precision_casts knob; judging half types with tolerance",
                  file=sys.stderr)
    res = campaign.run(args.graphs, args.seed, args.device, args.jobs, args.timeout, knobs, args.shrink,
                       args.shrink_seconds, args.max_ops, progress=lambda s: print(f"fuzz: {s}", file=sys.stderr))
    md, js = report.write(res, args.out, args.repros or os.path.join(args.out, "fuzz-repros"))
    print(f"{res['graphs']} graphs: {res['failed_graphs']} failing; "
          + ", ".join(f"{k} {v}" for k, v in res["counts"].items() if v)
          + f"; fusion rate {100 * res['fusion_rate']:.1f}%. Report: {md}")
    return 1 if res["failed_graphs"] else 0


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="tools/fuzz.py", description="fuzz graphfuser against eager PyTorch")
    add_arguments(p)
    return run_args(p.parse_args(argv))
