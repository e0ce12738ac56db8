"""A fuzz campaign: generate graphs with hypothesis, run each in a worker, count the failures by
category, shrink a few representatives of each failure class with hypothesis, write the report.

Example::

    >>> from graphfuser.fuzz import campaign
    >>> res = campaign.run(graphs=50, seed=1, device="cpu", shrink_classes=0)   # doctest: +SKIP
    >>> res["counts"]["wrong_value"]                                            # doctest: +SKIP
"""
from __future__ import annotations

import collections
import concurrent.futures as cf
import os
import time
from typing import Any, Callable, Optional

from .known import known_defect
from .worker import Worker

CATEGORIES = ("wrong_value", "far_from_float64", "wrong_dtype", "wrong_shape", "wrong_strides",
              "wrong_requires_grad", "wrong_grad", "missing_error",
              "crash", "hang", "compile_fallback")


def _hypothesis_settings(n: int, phases: tuple) -> Any:
    from hypothesis import HealthCheck, settings

    return settings(max_examples=n, phases=phases, database=None, deadline=None,
                    suppress_health_check=list(HealthCheck), print_blob=False, report_multiple_bugs=False)


def generate(n: int, seed: int, max_ops: int = 5, batch: int = 6, focus: Optional[str] = None) -> list[dict]:
    """``n`` distinct cases drawn by hypothesis from ``gen.cases()`` (deterministic in ``seed``);
    ``focus``: an op every case starts with (a composite a pass rewrites, a row under suspicion).

    hypothesis mutates recent examples, so one long run yields runs of near-duplicates; short
    runs with derived seeds, deduplicated by source and inputs, give a diverse campaign."""
    from hypothesis import Phase, given
    from hypothesis import seed as hseed

    from .gen import cases

    out: list[dict] = []
    seen: set[str] = set()
    strategy = cases(max_ops=max_ops, focus=focus)
    j = 0
    while len(out) < n and j < 20 * n + 100:
        @_hypothesis_settings(batch, (Phase.generate,))
        @hseed(seed * 1_000_003 + j)
        @given(strategy)
        def collect(case: dict) -> None:
            key = case["source"] + repr(case["inputs"]) + repr(case["calls"])
            if key not in seen:
                seen.add(key)
                out.append(case)

        collect()
        j += 1
    return out[:n]


def cases_at(seed: int, graphs: list[int], max_ops: int = 5, focus: Optional[str] = None) -> list[dict]:
    """The cases a campaign from ``seed`` runs as its graphs number ``graphs`` (generation is
    deterministic: the first ``max(graphs) + 1`` cases are generated again)."""
    cases = generate(max(graphs) + 1, seed, max_ops, focus=focus)
    return [cases[i] for i in graphs]


def run_cases(cases: list[dict], workers: list[Worker], progress: Optional[Callable[[int], None]] = None
              ) -> list[dict]:
    """Run every case, ``len(workers)`` at a time; results in case order."""
    results: list[Optional[dict]] = [None] * len(cases)
    free = list(workers)

    def one(i: int, w: Worker) -> tuple[int, Worker, dict]:
        return i, w, w.run(cases[i])

    with cf.ThreadPoolExecutor(len(workers)) as pool:
        pending = set()
        it = iter(range(len(cases)))
        done_n = 0
        for i in it:
            if not free:
                done, pending = cf.wait(pending, return_when=cf.FIRST_COMPLETED)
                for fut in done:
                    j, w, res = fut.result()
                    results[j] = res
                    free.append(w)
                    done_n += 1
                    if progress:
                        progress(done_n)
            pending.add(pool.submit(one, i, free.pop()))
        for fut in cf.as_completed(pending):
            j, w, res = fut.result()
            results[j] = res
            done_n += 1
            if progress:
                progress(done_n)
    return results  # type: ignore[return-value]


def _focus(case: dict) -> Optional[str]:
    ops = [o for o in case["ops"]]
    return ops[0] if ops else None


def shrink(case: dict, category: str, worker: Worker, seconds: float, seed: int, examples: int = 300,
           target: Optional[tuple] = None) -> tuple[dict, dict, bool]:
    """Shrink ``case`` to a minimal case failing with ``category`` (and ``target``'s signature, see
    ``signature``): hypothesis searches graphs built
    around the case's first op and shrinks the first failure it finds. Returns the smallest
    failing case, its result and whether hypothesis found (and shrank) one; when it found none
    within the budget the original case is returned."""
    from hypothesis import Phase, given
    from hypothesis import seed as hseed

    from .gen import cases

    deadline = time.time() + seconds
    memo: dict[str, bool] = {}
    best: list[Any] = [None, None]

    def size(c: dict) -> tuple:
        return (len(c["source"].splitlines()), len(c["inputs"]), len(c["source"]))

    def fails(c: dict) -> bool:
        key = c["source"] + repr(c["inputs"]) + repr(c["calls"]) + str(c["seed"])
        if key in memo:
            return memo[key]
        if time.time() > deadline:
            # Out of budget: only the best case so far still fails, so the shrinker stops at once.
            return best[0] is not None and key == best[0]["_key"]
        res = worker.run(c)
        ok = any(f["category"] == category for f in res["findings"]) and (
            target is None or signature(category, c, res) == target)
        memo[key] = ok
        if ok and (best[0] is None or size(c) < size(best[0])):
            best[0], best[1] = dict(c, _key=key), res
        return ok

    class Found(Exception):
        pass

    @_hypothesis_settings(examples, (Phase.generate, Phase.shrink))
    @hseed(seed)
    @given(cases(max_ops=4, focus=_focus(case)))
    def prop(c: dict) -> None:
        if fails(c):
            raise Found()

    try:
        prop()
    except Found:
        pass
    except Exception:  # noqa: BLE001 - hypothesis' own errors (flaky) keep the best so far
        pass
    if best[0] is None:
        return case, {}, False
    c = dict(best[0])
    c.pop("_key", None)
    return c, best[1], True


def run(graphs: int, seed: int, device: str = "cpu", jobs: int = 1, timeout: float = 60.0,
        knobs: Optional[dict] = None, shrink_classes: int = 12, shrink_seconds: float = 60.0,
        max_ops: int = 5, progress: Optional[Callable[[str], None]] = None, focus: Optional[str] = None) -> dict:
    """Generate and run ``graphs`` cases; return counts, fusion rate, coverage and classes."""
    from ..ops import ROWS

    say = progress or (lambda s: None)
    t0 = time.time()
    cases = generate(graphs, seed, max_ops, focus=focus)
    say(f"generated {len(cases)} graphs in {time.time() - t0:.1f} s")
    workers = [Worker(device, timeout, knobs) for _ in range(max(1, jobs))]
    try:
        t1 = time.time()
        step = max(1, len(cases) // 20)
        results = run_cases(cases, workers,
                            lambda k: say(f"{k}/{len(cases)} graphs, {time.time() - t1:.0f} s") if k % step == 0
                            else None)
        run_s = time.time() - t1
        counts = collections.Counter()
        deviations = collections.Counter()
        per_op = {name: {"graphs": 0, "fused": 0, "failed": 0} for name in ROWS}
        failing: dict[str, list[int]] = collections.defaultdict(list)
        known: dict[str, int] = collections.Counter()
        unknown: list[dict] = []
        kernel = eager_only = invalid = grads = 0
        for i, (case, res) in enumerate(zip(cases, results)):
            if res.get("invalid"):
                invalid += 1
                continue
            cats = sorted({f["category"] for f in res["findings"]})
            for c in cats:
                counts[c] += 1
                failing[c].append(i)
                k = known_defect(c, case["ops"])
                if k:
                    known[k] += 1
                else:
                    unknown.append({"case": i, "category": c})
            for d in {d["deviation"] for d in res.get("deviations", [])}:
                deviations[d] += 1
            kernel += bool(res.get("kernel_ran"))
            grads += bool(res.get("grad_calls"))
            eager_only += res.get("eager_errors", 0) >= res.get("calls", 7)
            for op in case["ops"]:
                if op in per_op:
                    per_op[op]["graphs"] += 1
                    per_op[op]["failed"] += bool(cats)
            for op in res.get("fused_ops", []):
                if op in per_op:
                    per_op[op]["fused"] += 1
        classes = []
        if shrink_classes:
            classes = _shrink_classes(cases, results, failing, workers[0], shrink_classes, shrink_seconds, seed, say)
    finally:
        for w in workers:
            w.close()
    runnable = len(cases) - eager_only - invalid
    float64 = float64_summary(results)
    return {"device": device, "graphs": len(cases), "seed": seed, "knobs": knobs or {}, "focus": focus,
            "frontend": os.environ.get("GRAPHFUSER_FUZZ_FRONTEND", "script"),
            "cuda_decisions": os.environ.get("GRAPHFUSER_FUZZ_CUDA_DECISIONS") == "1", "seconds": round(run_s, 1),
            "counts": {c: counts.get(c, 0) for c in CATEGORIES},
            "failed_graphs": sum(1 for r in results if r["findings"]),
            "deviations": dict(deviations), "kernel_ran": kernel, "invalid": invalid, "runnable": runnable,
            "fusion_rate": kernel / runnable if runnable else 0.0, "grad_graphs": grads,
            "per_op": per_op, "known": dict(known), "unknown": unknown, "classes": classes, "float64": float64,
            "cases": cases, "results": results}


def _ratio(d: dict) -> float:
    """graphfuser's distance from float64 over the limit's eager part (eager's distance plus the
    floor): past 2 is a failure."""
    return d["graphfuser"] / (d["eager"] + d["floor"]) if d["graphfuser"] else 0.0


def float64_summary(results: list) -> dict:
    """Per floating output of every call, graphfuser's distance from the float64 reference beside
    eager's (``judge64``): how many were judged, how many were no farther than eager's, and per
    graph its worst output (by ``_ratio``), the worst first."""
    judged = closer = 0
    worst = []
    for i, res in enumerate(results):
        ds = res.get("distances") or []
        judged += len(ds)
        closer += sum(1 for d in ds if d["graphfuser"] <= d["eager"])
        if ds:
            w = max(ds, key=_ratio)
            worst.append({"graph": i, **w, "ratio": round(_ratio(w), 4)})
    worst.sort(key=lambda w: -w["ratio"])
    return {"outputs_judged": judged, "no_farther_than_eager": closer, "worst_per_graph": worst}


def _family(ops: list) -> str:
    from .gen import NORMS, REDUCTIONS

    if any(":" in o for o in ops):
        return "alias/in-place"
    if any(o in NORMS for o in ops):
        return "normalization"
    if any(o in REDUCTIONS for o in ops):
        return "reduction"
    return "pointwise"


def signature(category: str, case: dict, result: dict) -> tuple:
    """What tells failure classes apart before shrinking: the category, the family of ops in the
    graph and, for errors, the message with numbers and kernel names blanked."""
    import re

    detail = next((f["detail"] for f in result["findings"] if f["category"] == category), "")
    if category.startswith("wrong_"):
        detail = "nan" if "nan" in detail else ""
    return category, _family(case["ops"]), re.sub(r"[0-9a-f]{12}|\d+", "N", detail)[:80]


def _shrink_classes(cases: list, results: list, failing: dict, worker: Worker, limit: int, seconds: float,
                    seed: int, say: Callable[[str], None]) -> list[dict]:
    """Shrink representatives: per category, the smallest failing cases with distinct first ops,
    round robin over categories, ``limit`` in all."""
    queues = []
    for cat in CATEGORIES:
        idx = sorted(failing.get(cat, []), key=lambda i: len(cases[i]["source"]))
        seen, picked = set(), []
        for i in idx:
            f = signature(cat, cases[i], results[i])
            if f not in seen:
                seen.add(f)
                picked.append(i)
        queues.append((cat, picked))
    order = []
    while len(order) < limit and any(q for _, q in queues):
        for cat, q in queues:
            if q and len(order) < limit:
                order.append((cat, q.pop(0)))
    classes: dict[tuple, dict] = {}
    for k, (cat, i) in enumerate(order):
        small, res, shrunk = shrink(cases[i], cat, worker, seconds, seed + k,
                                    target=signature(cat, cases[i], results[i]))
        if not res:
            res = results[i]
        detail = next((f for f in res["findings"] if f["category"] == cat), {"detail": "", "call": -1})
        key = (cat, tuple(small["ops"]))
        say(f"shrunk {cat} from graph {i}: {small['ops']} ({'shrunk' if shrunk else 'not reproduced; original'})")
        if key in classes:
            classes[key]["representatives"] += 1
            continue
        classes[key] = {"category": cat, "ops": small["ops"], "case": small, "detail": detail["detail"],
                        "call": detail["call"], "shrunk": shrunk, "from_graph": i, "representatives": 1,
                        "known": known_defect(cat, small["ops"]) or known_defect(cat, cases[i]["ops"])}
    return list(classes.values())
