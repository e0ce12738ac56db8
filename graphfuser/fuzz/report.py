"""The campaign's report: ``fuzz-<device>.md`` (counts, fusion rate, deviations, classes with
their repros, per-op coverage), ``fuzz-<device>.json`` and one standalone repro file per class."""
from __future__ import annotations

import json
import os
import pprint
from typing import Any, Optional

from .known import DEVIATIONS

REPRO_TEMPLATE = '''"""graphfuser fuzz repro: {category}{known}.

Observed (call {call}): {detail}

Ops: {ops}. Calls (batch size, layout flipped): {calls}; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: {inputs}

Run from the repository root: PYTHONPATH=.{env} python {path}
"""
{source}

CASE = {case}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
'''


def run_repro(case: dict, argv: Optional[list[str]] = None) -> int:
    """What a repro file runs: the case on ``argv[0]`` (default cpu); prints each difference from
    eager, returns 1 if there is one. Repros written by a failing fusion go to a temporary folder,
    never the working directory."""
    import os
    import sys
    import tempfile

    import torch

    from ..config import config
    from .oracle import run_case
    from .worker import take_cuda_decisions_on_the_cpu

    # as a campaign's worker runs it (worker._main): eager's CPU kernels split work by thread
    # (a NaN through hardswish's backward gave NaN or a number by chunk), and the CUDA-only rewrites
    torch.set_num_threads(int(os.environ.get("GRAPHFUSER_FUZZ_THREADS", "1")))
    if os.environ.get("GRAPHFUSER_FUZZ_CUDA_DECISIONS") == "1":
        take_cuda_decisions_on_the_cpu()
    argv = sys.argv[1:] if argv is None else argv
    config.set(repro_dir=tempfile.mkdtemp(prefix="graphfuser-repro-"))
    result = run_case(case, argv[0] if argv else "cpu", tempfile.gettempdir(), "repro")
    for f in result["findings"]:
        print(f"{f['category']} (call {f['call']}): {f['detail']}")
    print("no difference from eager" if not result["findings"] else "")
    return 1 if result["findings"] else 0


def _describe_inputs(case: dict) -> str:
    parts = []
    for i in case["inputs"]:
        if i["kind"] == "tensor":
            parts.append(f"{i['name']}: {i['dtype']}{i['shape']} {i['layout']} {i['fill']}"
                         + (" requires_grad" if i.get("requires_grad") else ""))
        else:
            parts.append(f"{i['name']}: {i['kind']} {i['values']}")
    return "; ".join(parts)


def _repro_env() -> str:
    """The campaign's settings a repro needs to run as its worker did (the frontend, the CUDA-only
    rewrites), as environment assignments for the repro's command line."""
    env = []
    if os.environ.get("GRAPHFUSER_FUZZ_FRONTEND", "script") != "script":
        env.append(f" GRAPHFUSER_FUZZ_FRONTEND={os.environ['GRAPHFUSER_FUZZ_FRONTEND']}")
    if os.environ.get("GRAPHFUSER_FUZZ_CUDA_DECISIONS") == "1":
        env.append(" GRAPHFUSER_FUZZ_CUDA_DECISIONS=1")
    return "".join(env)


def write_repro(cls: dict, path: str) -> None:
    case = {k: v for k, v in cls["case"].items()}
    text = REPRO_TEMPLATE.format(
        category=cls["category"], known=f" (known: issue 10 class {cls['known']})" if cls["known"] else "",
        call=cls["call"], detail=cls["detail"].replace('"""', "'''").replace("\\", "\\\\")[:600],
        ops=", ".join(cls["ops"]), calls=[tuple(c) for c in case["calls"]], inputs=_describe_inputs(case),
        path=path, source=case["source"].rstrip() + "\n", case=pprint.pformat(case, width=110, sort_dicts=False),
        env=_repro_env())
    with open(path, "w") as f:
        f.write(text)


def write(res: dict, out_dir: str, repro_dir: str) -> tuple[str, str]:
    """Write the markdown and JSON reports and the repro files; returns the two report paths."""
    os.makedirs(out_dir, exist_ok=True)
    os.makedirs(repro_dir, exist_ok=True)
    dev = res["device"]
    for n, cls in enumerate(res["classes"]):
        path = os.path.join(repro_dir, f"{dev}-{n:02d}-{cls['category']}-{'-'.join(cls['ops'][:2]) or 'none'}.py"
                            .replace(":", "_"))
        write_repro(cls, path)
        cls["repro"] = path
    md = os.path.join(out_dir, f"fuzz-{dev}.md")
    js = os.path.join(out_dir, f"fuzz-{dev}.json")
    with open(md, "w") as f:
        f.write(render_markdown(res))
    slim = {k: v for k, v in res.items() if k not in ("cases", "results")}
    # each failing graph with its whole case (source, inputs, calls, seed): ``--replay`` reruns it
    slim["failures"] = [{"graph": i, "ops": c["ops"], "findings": r["findings"], "case": c}
                        for i, (c, r) in enumerate(zip(res["cases"], res["results"])) if r["findings"]]
    with open(js, "w") as f:
        json.dump(slim, f, indent=1, default=str)
    return md, js


def render_markdown(res: dict) -> str:
    n = res["graphs"]
    lines = [f"# graphfuser fuzz: {res['device']}", "",
             f"{n} graphs from seed {res['seed']}"
             + (f", each starting with {res['focus']}" if res.get("focus") else "")
             + f" in {res['seconds']} s; knobs {res['knobs'] or 'default'}. "
             "Each graph runs 7 calls (profiling, fused, then a new batch size and/or layout) through "
             + ("`torch.compile(backend=graphfuser)`" if res.get("frontend") == "compile" else "`graphfuser.script`")
             + " and through eager; values are judged against a float64 reference.", "",
             f"Graphs TorchScript itself rejects (generator's, not counted): {res.get('invalid', 0)}.", "",
             f"Graphs with any failure: {res['failed_graphs']} ({100 * res['failed_graphs'] / max(n, 1):.1f}%).", "",
             "| category | graphs | % |", "|---|---:|---:|"]
    for cat, k in res["counts"].items():
        lines.append(f"| {cat} | {k} | {100 * k / max(n, 1):.1f} |")
    lines += ["", f"**Fusion rate**: {res['kernel_ran']} of {res['runnable']} graphs that eager can run "
              f"({100 * res['fusion_rate']:.1f}%) ran a generated kernel after profiling.", "",
              f"**Gradients** (inputs that require grad: backward through eager, graphfuser and the float64 "
              f"reference, every input's gradient judged as outputs are) were judged in {res.get('grad_graphs', 0)} "
              "graphs.", "",
              "## Deliberate deviations (not failures)", "", "| deviation | graphs | knob |", "|---|---:|---|"]
    for name, d in DEVIATIONS.items():
        lines.append(f"| {name}: {d['what']} | {res['deviations'].get(name, 0)} | {d['knob']} |")
    lines += _float64_section(res)
    lines += ["", "## Known defect classes (graphfuser/fuzz/known.py)", "", "| class | graph-failures |", "|---|---:|"]
    for name, k in sorted(res["known"].items()):
        lines.append(f"| {name} | {k} |")
    lines += ["", f"Failures matching no known class: {len(res['unknown'])}", "",
              "## Shrunk failure classes", ""]
    for cls in res["classes"]:
        lines.append(f"### {cls['category']}: {', '.join(cls['ops']) or '-'}"
                     + (f" (known: {cls['known']})" if cls.get("known") else ""))
        lines.append("")
        lines.append(f"{'Shrunk' if cls['shrunk'] else 'Not reproduced while shrinking; original'} from graph "
                     f"{cls['from_graph']}; repro `{cls.get('repro', '')}`. Call {cls['call']}: {cls['detail'][:300]}")
        lines.append("")
        lines.append("```python")
        lines.append(cls["case"]["source"].split("\n\n\n", 1)[-1].rstrip())
        lines.append("```")
        lines.append("")
    lines += ["## Per-op coverage", "", "graphs: graphs using the op; fused: graphs where it ran inside a fusion "
              "group; failed: graphs using it with any failure.", "",
              "| op | graphs | fused | failed |", "|---|---:|---:|---:|"]
    for op, c in res["per_op"].items():
        lines.append(f"| {op} | {c['graphs']} | {c['fused']} | {c['failed']} |")
    return "\n".join(lines) + "\n"


def _float64_section(res: dict) -> list[str]:
    """The distances from the float64 reference (``judge64``): graphfuser's beside eager's."""
    f = res.get("float64")
    if not f:
        return []
    n = f["outputs_judged"]
    lines = ["", "## Distance from float64", "",
             f"Every floating output of every call: graphfuser's largest distance from the float64 reference "
             f"beside eager's (elements where all three are finite); farther than 2x eager's plus a floor "
             f"(16 ulps of the lowest precision the graph touches at the output's magnitude, and float64's own "
             f"rounding) is the failure `far_from_float64`. Outputs judged: {n}; graphfuser no farther than "
             f"eager: {f['no_farther_than_eager']} ({100 * f['no_farther_than_eager'] / max(n, 1):.1f}%).", "",
             "Worst output of each graph, the 15 worst (ratio: graphfuser's distance / (eager's + floor); "
             "the limit is 2):", "",
             "| graph | call | output | graphfuser | eager | floor | ratio |", "|---:|---:|---:|---:|---:|---:|---:|"]
    for w in f["worst_per_graph"][:15]:
        lines.append(f"| {w['graph']} | {w['call']} | {w['output']} | {w['graphfuser']:.3g} | {w['eager']:.3g} | "
                     f"{w['floor']:.3g} | {w['ratio']:.3g} |")
    return lines
