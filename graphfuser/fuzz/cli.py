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
    p.add_argument("--graph", default=None,
                   help="comma-separated graph numbers: run only these graphs of --seed (or of --replay) "
                        "and print their findings")
    p.add_argument("--replay", default=None, metavar="FUZZ_JSON",
                   help="rerun the failing graphs recorded in a fuzz-<device>.json report (with --graph: only those)")
    p.add_argument("--frontend", default="script", choices=("script", "compile"),
                   help="the entry point the graphs go through: graphfuser.script, or torch.compile's backend")
    p.add_argument("--focus", default=None, metavar="OP",
                   help="every graph starts with this op (e.g. rotary, cross_entropy, repeat_kv: patterns a pass rewrites)")
    p.add_argument("--cuda-decisions", action="store_true",
                   help="on the CPU, take the graph decisions made only for CUDA too (conv bias splits under "
                        "autocast, bias gradients through the consumer's group), so CPU campaigns check them")
    p.add_argument("--emulate-precision", action="store_true",
                   help="turn on emulate_precision_casts where the config has it (pointwise chains exact)")


def run_args(args: argparse.Namespace) -> int:
    from ..config import DEFAULTS
    from . import campaign, report

    knobs: dict = {}
    os.environ["GRAPHFUSER_FUZZ_FRONTEND"] = args.frontend      # the workers inherit it
    if args.cuda_decisions:
        os.environ["GRAPHFUSER_FUZZ_CUDA_DECISIONS"] = "1"
    if args.no_fallback:
        knobs["disable"] = ["fallback"]
    if args.emulate_precision:
        if "emulate_precision_casts" in DEFAULTS:
            knobs["emulate_precision_casts"] = True
        else:
            print("fuzz: this build has no emulate_precision_casts knob; judging half types with tolerance",
                  file=sys.stderr)
    if args.graph is not None or args.replay is not None:
        return _replay(args, knobs)
    res = campaign.run(args.graphs, args.seed, args.device, args.jobs, args.timeout, knobs, args.shrink,
                       args.shrink_seconds, args.max_ops, progress=lambda s: print(f"fuzz: {s}", file=sys.stderr),
                       focus=args.focus)
    md, js = report.write(res, args.out, args.repros or os.path.join(args.out, "fuzz-repros"))
    print(f"{res['graphs']} graphs: {res['failed_graphs']} failing; "
          + ", ".join(f"{k} {v}" for k, v in res["counts"].items() if v)
          + f"; fusion rate {100 * res['fusion_rate']:.1f}%. Report: {md}")
    return 1 if res["failed_graphs"] else 0


def _replay(args: argparse.Namespace, knobs: dict) -> int:
    """Run single graphs (``--graph`` of ``--seed``, or the failures of a ``--replay`` report) and print
    each one's source and findings; 1 if any still fails."""
    import json

    from . import campaign
    from .worker import Worker

    wanted = [int(g) for g in args.graph.split(",")] if args.graph else None
    if args.replay:
        with open(args.replay) as f:
            recorded = {x["graph"]: x.get("case") for x in json.load(f)["failures"]}
        missing = [g for g, c in recorded.items() if c is None and (wanted is None or g in wanted)]
        if missing:
            print(f"fuzz: {args.replay} does not hold the cases of graphs {missing} (an older report): "
                  "rerun them with --seed and --graph", file=sys.stderr)
        todo = [(g, c) for g, c in sorted(recorded.items()) if c is not None and (wanted is None or g in wanted)]
    else:
        todo = list(zip(wanted, campaign.cases_at(args.seed, wanted, args.max_ops, args.focus)))
    worker = Worker(args.device, args.timeout, knobs)
    failed = 0
    try:
        for g, case in todo:
            res = worker.run(case)
            failed += bool(res["findings"])
            print(f"--- graph {g}: {', '.join(case['ops'])}\n{case['source'].split(chr(10) * 3, 1)[-1].rstrip()}")
            print(f"inputs: {case['inputs']}\ncalls: {case['calls']}, seed {case['seed']}")
            for f in res["findings"]:
                print(f"{f['category']} (call {f['call']}): {f['detail']}")
            print("no difference from eager" if not res["findings"] else "")
    finally:
        worker.close()
    print(f"{len(todo)} graph(s): {failed} failing")
    return 1 if failed else 0


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="tools/fuzz.py", description="fuzz graphfuser against eager PyTorch")
    add_arguments(p)
    return run_args(p.parse_args(argv))
