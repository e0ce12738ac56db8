"""Side-by-side benchmark: eager vs torch.jit.script vs torch.compile (Inductor) vs graphfuser.

    python tools/bench.py --device cpu            # writes logs/bench-cpu.json + .md
    python tools/bench.py --device cuda           # writes logs/bench-cuda-<gpu>.json + .md
    python -m graphfuser bench --device cuda      # the same

Per case and backend: time per call (CUDA: calls queued back to back, timed with events; CPU:
median wall clock), effective bandwidth (bytes = inputs + outputs, each read once) and, on CUDA,
that bandwidth as a % of this GPU's measured device-to-device copy bandwidth. Also: host
microseconds per call on a tiny (1k-element) fusion (best of interleaved rounds), cold compile milliseconds per fusion and the
warm-disk-cache start (a fresh process: compiler invocations and time to the first fused call).
Benchmarks never assert; they write a table.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

import graphfuser
from graphfuser.executor import compiled as gf_compiled

from . import LOGS

warnings.filterwarnings("ignore")


# -- cases ----------------------------------------------------------------------------------
def relu_add(x):
    return (x + 1.0).relu()


def add_mul3(t0, t1):
    return (t0 + t1) * 3.0


def sig_tanh(x, y):
    return torch.sigmoid(x * y + 2.0) * torch.tanh(x - y)


def bias_gelu(x, b):
    return torch.nn.functional.gelu(x + b, approximate="tanh")


def scale_shift_relu(x, s, b):
    return (x * s + b).relu()


def mixed_chain(x, y):
    z = x * y.float() + 1.0
    z = torch.sigmoid(z) * x
    z = z - y.float()
    return (z * 0.5).to(torch.bfloat16)


@dataclass
class Case:
    name: str
    fn: Callable
    make: Callable[[str], tuple]
    extra: dict = field(default_factory=dict)


def _r(*shape, dtype=torch.float32, device="cpu"):
    return torch.randn(*shape, device=device).to(dtype)


def cpu_cases() -> list[Case]:
    n = 16 * 1024 * 1024
    return [
        Case("(x+1).relu() f32 16M", relu_add, lambda d: (_r(n, device=d),)),
        Case("sigmoid(x*y+2)*tanh(x-y) f32 16M", sig_tanh, lambda d: (_r(n, device=d), _r(n, device=d))),
        Case("bias+gelu(tanh) f32 4096x4096", bias_gelu, lambda d: (_r(4096, 4096, device=d), _r(4096, device=d))),
        Case("scale+shift+relu f32 [32,256,56,56]", scale_shift_relu,
             lambda d: (_r(32, 256, 56, 56, device=d), _r(256, 1, 1, device=d), _r(256, 1, 1, device=d))),
    ]


def cuda_cases() -> list[Case]:
    return [
        Case("(x+1).relu() f32 [16,32,128,512]", relu_add, lambda d: (_r(16, 32, 128, 512, device=d),)),
        Case("(t0+t1)*3 f32 [128,1,2048]+[128,512,2048]", add_mul3,
             lambda d: (_r(128, 1, 2048, device=d), _r(128, 512, 2048, device=d))),
        Case("bias+gelu(tanh) bf16 [16384,8192]", bias_gelu,
             lambda d: (_r(16384, 8192, dtype=torch.bfloat16, device=d), _r(8192, dtype=torch.bfloat16, device=d))),
        Case("scale+shift+relu f32 [64,256,56,56]", scale_shift_relu,
             lambda d: (_r(64, 256, 56, 56, device=d), _r(256, 1, 1, device=d), _r(256, 1, 1, device=d))),
        Case("6-op chain f32/bf16 [8192,8192]", mixed_chain,
             lambda d: (_r(8192, 8192, device=d), _r(8192, 8192, dtype=torch.bfloat16, device=d))),
    ]


def extra_cases(device: str) -> list[Case]:
    """Reduction / normalization cases (``bench_reductions``)."""
    from . import bench_reductions

    return [Case(name, fn, make) for name, fn, make in bench_reductions.cases(device)]


# -- timing ---------------------------------------------------------------------------------
def _nbytes(args, out) -> int:
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return sum(t.numel() * t.element_size() for t in list(args) + list(outs) if isinstance(t, torch.Tensor))


def time_cuda(fn, args, iters: int = 50) -> float:
    for _ in range(5):
        fn(*args)
    torch.cuda.synchronize()
    times = []
    for _ in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn(*args)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / iters)
    return statistics.median(times) * 1e-3


def time_cpu(fn, args, iters: int = 5) -> float:
    for _ in range(2):
        fn(*args)
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def copy_bandwidth(device: str) -> float:
    """Bytes read + written per second by a large device-to-device copy."""
    x = torch.empty(256 * 1024 * 1024, dtype=torch.float32, device=device)
    y = torch.empty_like(x)
    t = time_cuda(lambda: y.copy_(x), ()) if device == "cuda" else time_cpu(lambda: y.copy_(x), ())
    return 2 * x.numel() * 4 / t


def case_filters(prog: str, doc: str, argv: Optional[list[str]]) -> list[str]:
    """The command line of a sweep: substrings of case names (``[""]``: every case)."""
    ap = argparse.ArgumentParser(prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("filters", nargs="*", help="substrings of case names (default: every case)")
    return ap.parse_args(argv).filters or [""]


def backends(fn, device: str) -> dict[str, Callable]:
    out: dict[str, Callable] = {"eager": fn}
    try:
        out["torch.jit.script"] = torch.jit.script(fn)
    except Exception as e:  # noqa: BLE001
        print(f"  torch.jit.script failed: {e}")
    try:
        out["torch.compile"] = torch.compile(fn)
    except Exception as e:  # noqa: BLE001
        print(f"  torch.compile failed: {e}")
    out["graphfuser"] = graphfuser.script(fn)
    return out


def run_case(case: Case, device: str, copy_bw: Optional[float]) -> dict:
    args = case.make(device)
    ref = case.fn(*args)
    row: dict = {"case": case.name, "bytes": _nbytes(args, ref), "backends": {}}
    for name, f in backends(case.fn, device).items():
        try:
            t0 = time.perf_counter()
            builds = gf_compiled.STATS["builds"]
            for _ in range(3):
                out = f(*args)
            if device == "cuda":
                torch.cuda.synchronize()
            warm = time.perf_counter() - t0
            torch.testing.assert_close(out.float(), ref.float(), rtol=2e-2, atol=2e-2)
            t = time_cuda(f, args) if device == "cuda" else time_cpu(f, args)
        except Exception as e:  # noqa: BLE001
            row["backends"][name] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
            continue
        entry = {"ms": t * 1e3, "GB/s": row["bytes"] / t / 1e9, "first_calls_s": warm}
        if copy_bw:
            entry["pct_copy_bw"] = 100 * row["bytes"] / t / copy_bw
        if name == "graphfuser":
            g = graphfuser.last_executed_optimized_graph()
            entry["fused_groups"] = str(g).count("FusionGroup_") - str(g).count("with prim::") if g else 0
            entry["kernels_built"] = gf_compiled.STATS["builds"] - builds
        row["backends"][name] = entry
    return row


def host_overhead(device: str, calls: int = 1500, rounds: int = 7) -> dict:
    """Wall-clock µs per call of a tiny 2-op fusion, calls back to back: the best of ``rounds``
    rounds of ``calls`` calls, the backends' rounds interleaved (one round each in turn), so that
    a slow spell of the host (another process, a clock change) does not fall on one backend only."""
    x = torch.randn(1024, device=device)
    fns = backends(relu_add, device)
    for f in fns.values():
        for _ in range(20):
            f(x)
    best = {name: float("inf") for name in fns}
    for _ in range(rounds):
        for name, f in fns.items():
            if device == "cuda":
                torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(calls):
                f(x)
            if device == "cuda":
                torch.cuda.synchronize()
            best[name] = min(best[name], (time.perf_counter() - t) / calls * 1e6)
    return best


_COLD_SCRIPT = r"""
import sys, time, torch, json
sys.path.insert(0, {root!r})
t0 = time.perf_counter()
import graphfuser
from graphfuser.runtime import cache
from graphfuser.executor import compiled
from graphfuser.tools import bench
cases = {{c.name: c for c in (bench.cuda_cases() if {device!r} == "cuda" else bench.cpu_cases())}}
out = {{}}
for name, case in cases.items():
    args = case.make({device!r})
    f = graphfuser.script(case.fn)
    c0, b0 = cache.STATS["compiles"], compiled.STATS["build_seconds"]
    for _ in range(3):          # profiling runs, then optimization + compile + first fused call
        f(*args)
    if {device!r} == "cuda": torch.cuda.synchronize()
    out[name] = {{"first_fused_call_ms": 1e3 * (compiled.STATS["build_seconds"] - b0),
                 "compiler_runs": cache.STATS["compiles"] - c0}}
print("RESULT" + json.dumps(out))
"""


def cold_and_warm(device: str) -> dict:
    """Cold compile ms per fusion (empty disk cache) and a warm-disk-cache start, each in a fresh process."""
    res = {}
    with tempfile.TemporaryDirectory() as cache_dir:
        env = dict(os.environ, GRAPHFUSER_CACHE_DIR=cache_dir)
        root = os.path.dirname(os.path.dirname(os.path.abspath(graphfuser.__file__)))
        src = _COLD_SCRIPT.format(root=root, device=device)
        for label in ("cold", "warm_disk_cache"):
            p = subprocess.run([sys.executable, "-c", src], env=env, capture_output=True, text=True, timeout=900)
            line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT")]
            res[label] = json.loads(line[0][6:]) if line else {"error": p.stderr[-2000:]}
    return res


BACKENDS = ["eager", "torch.jit.script", "torch.compile", "graphfuser"]


def cell(entry: dict, fmt: Callable[[dict], str]) -> str:
    """A backend's table cell: ``fmt(entry)``, ``error`` where it failed, ``-`` where it did not run."""
    if "ms" not in entry:
        return "error" if entry else "-"
    return fmt(entry)


def write_results(stem: str, results: dict, table: str) -> None:
    """``<stem>.json`` (the results) and ``<stem>.md`` (the rendered table)."""
    os.makedirs(os.path.dirname(stem), exist_ok=True)
    with open(stem + ".json", "w") as f:
        json.dump(results, f, indent=1)
    with open(stem + ".md", "w") as f:
        f.write(table)


def render(results: dict) -> str:
    names = BACKENDS
    cuda = results["device"] == "cuda"
    head = "| case | " + " | ".join(names) + " | graphfuser vs best other |"
    lines = [f"# graphfuser benchmark on {results['device_name']} ({results['torch']})", "",
             f"copy bandwidth: {results.get('copy_GBps', 0):.0f} GB/s" if cuda else "", "",
             "Time per call (ms) and, on CUDA, % of measured copy bandwidth.", "", head,
             "|" + "---|" * (len(names) + 2)]
    for row in results["cases"]:
        cells = [cell(row["backends"].get(n, {}),
                      (lambda e: f"{e['ms']:.3f} ({e['pct_copy_bw']:.0f}%)") if cuda else (lambda e: f"{e['ms']:.2f}"))
                 for n in names]
        gf = row["backends"].get("graphfuser", {}).get("ms")
        others = [row["backends"][n]["ms"] for n in names[:-1] if "ms" in row["backends"].get(n, {})]
        ratio = f"{min(others) / gf:.2f}x" if gf and others else "-"
        lines.append(f"| {row['case']} | " + " | ".join(cells) + f" | {ratio} |")
    lines += ["", "Host µs per call, tiny (1k-element) 2-op fusion (best of 7 interleaved rounds of 1500 calls):", "",
              "| " + " | ".join(results["host_us"]) + " |", "|" + "---|" * len(results["host_us"]),
              "| " + " | ".join(f"{v:.1f}" for v in results["host_us"].values()) + " |", ""]
    cw = results.get("compile", {})
    if "cold" in cw and "error" not in cw["cold"]:
        lines += ["Compile ms per fusion (lower + render + compile + load): cold (empty disk cache) and with a "
                  "warm disk cache in a fresh process:", "",
                  "| case | cold ms | compiler runs | warm-cache ms | compiler runs |", "|---|---|---|---|---|"]
        for name, c in cw["cold"].items():
            w = cw.get("warm_disk_cache", {}).get(name, {})
            lines.append(f"| {name} | {c['first_fused_call_ms']:.0f} | {c['compiler_runs']} | "
                         f"{w.get('first_fused_call_ms', float('nan')):.0f} | {w.get('compiler_runs', '-')} |")
    return "\n".join(lines) + "\n"


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--out", default=LOGS)
    ap.add_argument("--only", default="", help="substring filter on case names")
    ap.add_argument("--no-compile-check", action="store_true", help="skip the cold/warm compile processes")
    ap.add_argument("--train", action="store_true", help="forward + backward cases (bench_train)")
    args = ap.parse_args(argv)
    dev = args.device
    torch.manual_seed(0)
    name = torch.cuda.get_device_name() if dev == "cuda" else (os.uname().machine + " CPU, "
                                                                f"{torch.get_num_threads()} threads")
    if args.train:
        return train_main(args, name)
    results = {"device": dev, "device_name": name, "torch": torch.__version__, "cases": []}
    if dev == "cuda":
        results["copy_GBps"] = copy_bandwidth(dev) / 1e9
    cases = (cuda_cases() if dev == "cuda" else cpu_cases()) + extra_cases(dev)
    for case in cases:
        if args.only and args.only not in case.name:
            continue
        print(f"case: {case.name}", flush=True)
        results["cases"].append(run_case(case, dev, results.get("copy_GBps", 0) * 1e9 or None))
    results["host_us"] = host_overhead(dev)
    if not args.no_compile_check:
        results["compile"] = cold_and_warm(dev)
    table = render(results)
    write_results(os.path.join(args.out, f"bench-{_tag(dev, name)}"), results, table)
    try:
        from rich.console import Console
        from rich.markdown import Markdown

        Console().print(Markdown(table))
    except ImportError:
        print(table)
    return 0


def _tag(dev: str, name: str) -> str:
    return "cpu" if dev == "cpu" else "cuda-" + name.replace("NVIDIA ", "").replace(" ", "_")


def train_main(args: argparse.Namespace, device_name: str) -> int:
    """``--train``: forward + backward of the training cases, written to logs/bench-train-*."""
    from . import bench_train

    dev = args.device
    results = {"device": dev, "device_name": device_name, "torch": torch.__version__, "cases": []}
    for case in bench_train.cases(dev):
        if args.only and args.only not in case.name:
            continue
        print(f"case: {case.name}", flush=True)
        results["cases"].append(bench_train.run_case(case, dev, backends))
    table = bench_train.render(results)
    write_results(os.path.join(args.out, f"bench-train-{_tag(dev, device_name)}"), results, table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
