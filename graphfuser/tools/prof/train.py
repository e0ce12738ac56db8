"""Per-kernel CUDA times of the training cases (``bench_train``), graphfuser against
torch.compile, one forward + backward step at a time::

    python -m graphfuser prof train --only RMSNorm,GELU     # case names containing any of these

For each case and backend: a few warm steps (profiling runs, compilation), then ``--steps``
steps under ``torch.profiler``; prints every CUDA kernel's time per step, slowest first, and the
total. Gradients are compared with eager's where the case has no randomness.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any, Optional

import torch

import graphfuser

from .. import bench_train
from .common import cuda_kernel_times


def _backends(fn: Any, names: list[str]) -> dict:
    make = {"eager": lambda f: f, "compile": torch.compile, "graphfuser": graphfuser.script}
    return {n: make[n](fn) for n in names}


def print_groups(sf: Any) -> None:
    """Each differentiable group's backward fusion groups: node kinds and output types."""
    import graphfuser.autodiff.function as adf

    inner = sf._specialized() if getattr(sf, "_variants", None) is not None else sf
    for r in getattr(inner, "_runners", {}).values():
        if not isinstance(r, adf.DifferentiableGroup) or r.backward._optimized is None:
            continue
        for n in r.backward._optimized.all_nodes():
            if n.kind.endswith("FusionGroup"):
                kinds = [k.kind.replace("aten::", "") for k in n.subgraph.block.nodes
                         if k.kind not in ("prim::Constant", "prim::ListConstruct")]
                outs = [str(o.type).split(", strides")[0] + ")" for o in n.subgraph.outputs]
                print(f"   backward group: {' '.join(kinds)} -> {', '.join(outs)}")


def profile_case(case: bench_train.TrainCase, steps: int, warm: int, backends: tuple = ("compile", "graphfuser"),
                 groups: bool = False, ops: int = 0) -> None:
    from torch.profiler import ProfilerActivity, profile

    dev = "cuda"
    module = case.fn.to(dev) if isinstance(case.fn, torch.nn.Module) else None
    if module is not None:
        module.train()
    args = case.make(dev)
    grad, ref = bench_train.reference_grads(case, module, args, dev)
    for name, f in _backends(case.fn, list(backends)).items():
        for _ in range(warm):
            bench_train._zero(module, args)
            bench_train._step(f, args, grad, case.autocast, dev)
        err = ""
        if case.exact:
            err = f" grad rel err {bench_train.grad_rel_err(bench_train._grads(module, args), ref):.2e}"
        torch.cuda.synchronize()
        acts = [ProfilerActivity.CUDA] + ([ProfilerActivity.CPU] if ops else [])
        with profile(activities=acts, record_shapes=bool(ops)) as prof:
            for _ in range(steps):
                bench_train._zero(module, args)
                bench_train._step(f, args, grad, case.autocast, dev)
            torch.cuda.synchronize()
        times, counts = cuda_kernel_times(prof)
        total = sum(times.values()) / steps / 1e3
        print(f"== {case.name} [{name}] kernel total/step {total:.3f} ms{err}")
        for k, t in sorted(times.items(), key=lambda kv: -kv[1]):
            print(f"   {t / steps / 1e3:8.3f} ms  x{counts[k] // steps}  {k[:110]}")
        if ops:     # which host-side op launched the device time (copies included), with shapes
            table = prof.key_averages(group_by_input_shape=True)
            try:
                print(table.table(sort_by="self_device_time_total", row_limit=ops, max_name_column_width=60))
            except (AttributeError, KeyError, ValueError):      # older torch spells it cuda
                print(table.table(sort_by="self_cuda_time_total", row_limit=ops, max_name_column_width=60))
        if groups and name == "graphfuser":
            with (torch.autocast(dev, dtype=case.autocast) if case.autocast else torch.autocast(dev, enabled=False)):
                print_groups(f)
    sys.stdout.flush()


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m graphfuser prof train", description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="comma-separated substrings of case names")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warm", type=int, default=6)
    ap.add_argument("--ops", type=int, default=0, help="also list this many host ops by the device time they launched")
    ap.add_argument("--backends", default="compile,graphfuser", help="comma-separated: eager, compile, graphfuser")
    ap.add_argument("--groups", action="store_true", help="print graphfuser's backward fusion groups")
    a = ap.parse_args(argv)
    keys = [k for k in a.only.split(",") if k]
    for case in bench_train.cases("cuda"):
        if keys and not any(k.lower() in case.name.lower() for k in keys):
            continue
        torch.manual_seed(0)
        profile_case(case, a.steps, a.warm, tuple(a.backends.split(",")), a.groups, a.ops)
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
