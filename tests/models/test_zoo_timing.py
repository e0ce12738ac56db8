"""The zoo's timing interleaves the backends and takes the median of rounds (CPU, no models)."""
import json
import time

import pytest
import torch
import torch._dynamo

from graphfuser.tools.zoo import time_interleaved


def test_rounds_interleave_backends():
    order = []
    fns = {k: (lambda k=k: order.append(k)) for k in ("eager", "jit", "graphfuser")}
    out = time_interleaved(fns, "cpu", reps=6, rounds=3, warmup=1)
    assert set(out) == set(fns)
    timed = order[3 * 2:]          # after each backend's warmup and its one-call estimate
    # each round runs one backend's calls, then the next's: the labels change in the fixed cycle
    runs = [k for i, k in enumerate(timed) if i == 0 or timed[i - 1] != k]
    assert runs == ["eager", "jit", "graphfuser"] * 3


def test_one_slow_round_does_not_decide():
    calls = {"n": 0}

    def noisy():
        calls["n"] += 1
        # every call of one middle stretch is slow (a noisy moment), the rest fast
        time.sleep(0.02 if 40 <= calls["n"] < 60 else 0.0005)

    out = time_interleaved({"fast": lambda: time.sleep(0.0005), "noisy": noisy}, "cpu", reps=5, rounds=5,
                           warmup=1)
    assert out["noisy"] < 2 * out["fast"] + 0.3     # the mean of all calls would be ~2 ms


def test_zoo_row_through_the_backend(monkeypatch):
    """``python -m graphfuser zoo --frontend compile``: a row runs the model through
    ``torch.compile(model, backend="graphfuser")``, matches eager at two batch sizes, counts the
    groups it compiled and times it beside eager and torch.jit.script (a small model here)."""
    import torch

    from graphfuser.tools import zoo

    def build(name):
        m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.GELU(), torch.nn.Flatten(),
                                torch.nn.Linear(8 * 8 * 8, 10), torch.nn.Tanh())
        return m.eval(), (3, 8, 8)

    monkeypatch.setattr(zoo, "build", build)
    r = zoo.run_model("small", "cpu", 4, True, False, reps=3, tol=1e-3, rounds=1, frontend="compile")
    assert r.status == "ok", (r.error, r.warnings)
    assert r.groups >= 1 and r.max_rel_err <= 1e-3
    assert r.graphfuser_ms is not None and r.eager_ms is not None and r.jit_ms is not None


def test_race_spreads_rows_over_gpus(monkeypatch, tmp_path):
    """``race --gpus 2``: each row's process gets one GPU (CUDA_VISIBLE_DEVICES), two rows run at
    a time, and the record keeps the rows in the list's order."""
    import threading
    import time as _time

    from graphfuser.tools import race

    seen, live, peak = [], [0], [0]
    lock = threading.Lock()

    def child(args, name, mode, out, gpu=None):
        with lock:
            live[0] += 1
            peak[0] = max(peak[0], live[0])
            seen.append((name, gpu))
        _time.sleep(0.05)
        with lock:
            live[0] -= 1
        return {"model": name, "mode": mode, "eager_ms": 1.0, "inductor_ms": 1.0, "graphfuser_compile_ms": 1.0}

    monkeypatch.setattr(race, "_child", child)
    rows = "a:infer-fp32,b:infer-fp32,c:infer-bf16,d:train-bf16"
    assert race.main(["--device", "cpu", "--rows", rows, "--gpus", "2", "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "race-cpu-cpu.json").read_text())
    assert [r["model"] for r in record["rows"]] == ["a", "b", "c", "d"] and record["gpus"] == 2
    assert {g for _, g in seen} == {0, 1} and peak[0] == 2
    assert "2 at a time" in (tmp_path / "race-cpu-cpu.md").read_text()


def test_hf_zoo_merges_parts_and_sums_up_each_model(tmp_path):
    """``hf_zoo --merge``: the parts run on separate GPUs in one record, with a line per model and
    dtype giving graphfuser over Inductor's better mode and the cold-start ratio."""
    from graphfuser.tools import hf_zoo

    def row(model, dtype, backend, ms, cold):
        return {"model": model, "dtype": dtype, "backend": backend, "steady_ms": ms, "cold_fused_s": cold,
                "cold_first_s": cold / 2, "max_diff": 0.0}
    parts = [[row("gpt2", "bf16", "eager", 10.0, 0.1), row("gpt2", "bf16", "inductor", 5.0, 20.0),
              row("gpt2", "bf16", "inductor-ro", 4.0, 12.0), row("gpt2", "bf16", "graphfuser", 6.0, 4.0)],
             [row("vit", "fp32", "eager", 3.0, 0.1), {"model": "vit", "dtype": "fp32", "backend": "inductor",
                                                       "error": "RuntimeError: x"}]]
    paths = []
    for k, rows in enumerate(parts):
        p = tmp_path / f"part{k}.json"
        p.write_text(json.dumps({"meta": {"torch": "t", "device": "GPU"}, "rows": rows}))
        paths.append(str(p))
    out = str(tmp_path / "all")
    assert hf_zoo.main(["--merge", *paths, "--out", out]) == 0
    record = json.loads((tmp_path / "all.json").read_text())
    assert len(record["rows"]) == 6 and record["meta"]["device"] == "GPU"
    md = (tmp_path / "all.md").read_text()
    line = next(x for x in md.splitlines() if x.startswith("| gpt2 | bf16"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[6] == "1.5" and cells[9] == "0.2" and cells[10] == "-"     # 6 / 4 ms; 4 / 20 s; no dynamo row
    assert "| vit | fp32 | 3 | - |" in md and "RuntimeError" in md


def test_race_dynamo_column_is_dynamo_alone_and_no_contender():
    """``dynamo``: torch.compile(backend="eager") (Dynamo's share of a cold start), shown in the
    table beside the cold ratio, never Inductor's best or graphfuser's time."""
    import torch

    from graphfuser.tools import race

    torch._dynamo.reset()
    m = torch.nn.Linear(4, 3)
    f = race._wrap("dynamo", m)
    x = torch.randn(2, 4)
    torch.testing.assert_close(f(x), m(x))
    row = {"model": "m", "mode": "infer-fp32", "batch": 2, "eager_ms": 1.0, "inductor_ms": 0.5,
           "inductor_ro_ms": 0.4, "graphfuser_compile_ms": 0.44, "graphfuser_compile_cold_s": 1.0,
           "inductor_cold_s": 10.0, "dynamo_cold_s": 0.9, "dynamo_ms": 0.1}
    race._summarize(row)
    assert row["graphfuser_over_best"] == 1.1 and row["cold_ratio"] == 0.1
    md = race.markdown({"gpu": "cpu", "torch": torch.__version__, "rows": [row]})
    header = next(line for line in md.splitlines() if line.startswith("| model"))
    assert "dynamo_cold_s" in header and "| 0.9 |" in md


def test_race_reduce_overhead_cold_seconds_have_their_ratio():
    """A race of reduce-overhead alone (the training rows' usual contender) shows its cold seconds
    and graphfuser's ratio to them, beside the default mode's columns (empty there)."""
    from graphfuser.tools import race

    row = {"model": "gpt2", "mode": "train-bf16", "batch": 8, "eager_ms": 33.0, "inductor_ro_ms": 12.2,
           "graphfuser_compile_ms": 14.4, "graphfuser_compile_cold_s": 7.9, "inductor_ro_cold_s": 33.1}
    race._summarize(row)
    assert "cold_ratio" not in row and row["cold_ratio_ro"] == round(7.9 / 33.1, 3)
    md = race.markdown({"gpu": "cpu", "torch": "2.11", "rows": [row]})
    lines = md.splitlines()
    header = next(line for line in lines if line.startswith("| model"))
    cols = [c.strip() for c in header.strip("|").split("|")]
    cells = [c.strip() for c in next(line for line in lines if line.startswith("| gpt2")).strip("|").split("|")]
    assert cells[cols.index("inductor_ro_cold_s")] == "33.1" and cells[cols.index("cold_ratio_ro")] == "0.239"
    assert cells[cols.index("cold_ratio")] == "-"


def test_race_merges_parts_in_the_race_order(tmp_path):
    """``race --merge``: parts of one race (one device command each) become one record and table,
    rows in the race's order, a repeated row the later part's; parts of other GPUs are refused."""
    from graphfuser.tools import race

    def part(name, rows, gpu="NVIDIA H200"):
        path = tmp_path / name
        path.write_text(json.dumps({"gpu": gpu, "torch": "2.11", "rows": rows}))
        return str(path)

    (m1, k1), (m2, k2) = race.ROWS[0], race.ROWS[1]
    a = part("a.json", [{"model": m2, "mode": k2, "graphfuser_over_best": 1.2}])
    b = part("b.json", [{"model": m1, "mode": k1, "graphfuser_over_best": 0.9},
                        {"model": m2, "mode": k2, "graphfuser_over_best": 1.1}])
    assert race.main(["--merge", a, b, "--out", str(tmp_path / "out"), "--device", "cuda"]) == 0
    record = json.loads((tmp_path / "out" / "race-cuda-H200.json").read_text())
    assert [(r["model"], r["mode"], r["graphfuser_over_best"]) for r in record["rows"]] == [(m1, k1, 0.9), (m2, k2, 1.1)]
    table = (tmp_path / "out" / "race-cuda-H200.md").read_text()
    assert "Merged from 2 parts" in table and "a.json, b.json" in table and "over 2 rows: 0.995" in table
    c = part("c.json", [], gpu="NVIDIA H100 80GB HBM3")
    with pytest.raises(SystemExit, match="different GPUs"):
        race.main(["--merge", a, c, "--out", str(tmp_path / "out")])


def test_prof_bn_shapes_is_a_subcommand_and_needs_a_gpu(capsys):
    """``python -m graphfuser prof bn-shapes``: listed among the profilers; without a GPU it says so
    and exits 0 (it times CUDA kernels only)."""
    from graphfuser.tools import prof
    from graphfuser.tools.prof import bn_shapes

    assert "bn-shapes" in prof.SUBCOMMANDS
    assert sum(count for _, count in bn_shapes.RESNET50) == 53      # resnet50's batch norms
    if not __import__("torch").cuda.is_available():
        assert prof.main(["bn-shapes", "--device", "cpu"]) == 0
        assert "needs a GPU" in capsys.readouterr().out


def test_cold_phase_clock_counts_phases_and_restores():
    """``prof cold``'s clock: the executor's phases of a backend's first calls are counted on the
    calling thread, and leaving the clock puts the original functions back."""
    from graphfuser.executor.executor import ScriptedFunction
    from graphfuser.frontend.dynamo import registered_backend
    from graphfuser.tools.prof.cold import PhaseClock, cold_calls

    original = ScriptedFunction._profile_call
    x = torch.randn(8, 33)

    def make_step():
        f = torch.compile(lambda t: (t * 2.0 + 1.0).relu().sum(-1), backend=registered_backend())
        return lambda: f(x)

    torch._dynamo.reset()
    did = []
    with PhaseClock() as clock:
        cold, ends = cold_calls(make_step, "cpu", did=did)
    assert ScriptedFunction._profile_call is original
    assert clock.calls["profiling calls"] >= 2 and clock.calls["optimize"] == 1, clock.line()
    assert clock.seconds["profiling calls"] >= clock.seconds["optimize"] > 0
    from graphfuser.tools.race import COLD_WINDOW

    # the race's window of calls; the cold seconds end with one of them (the first steady call)
    assert len(ends) == COLD_WINDOW and ends == sorted(ends)
    assert min(abs(cold - e) for e in ends) < 1e-9 and cold > ends[0]     # (the first call traces)
    # what each call did: it profiles first, optimizes once, then runs what was built
    assert len(did) == COLD_WINDOW and did[0].get("executor.profiling_calls") == 1
    assert sum(d.get("executor.optimizations", 0) for d in did) == 1 and not did[-1].get("executor.optimizations")


def test_cold_timeline_records_build_steps_on_every_thread_and_restores():
    """``prof cold --timeline``: each build step (optimization, partition, group builds on the
    compile pool, reduction renders) with its start and length, and the functions put back."""
    from graphfuser.config import config
    from graphfuser.executor import fusion
    from graphfuser.frontend.dynamo import registered_backend
    from graphfuser.tools.prof.cold import Timeline, cold_calls

    original = fusion.make_group_runner
    x = torch.randn(8, 33)

    def make_step():
        f = torch.compile(lambda t: (((t * 2.0 + 1.0).relu() @ t.T).tanh() - 1.0).sum(-1), backend=registered_backend())
        return lambda: f(x)

    torch._dynamo.reset()
    with config.override(compile_threads=2), Timeline() as tl:
        cold_calls(make_step, "cpu", calls=3)
    assert fusion.make_group_runner is original
    labels = [e[3] for e in tl.events]
    assert labels.count("optimize") == 1 and "partition" in labels and "reduction render" in labels
    groups = [e for e in tl.events if e[3] == "group"]
    assert len(groups) >= 2 and all(th.startswith("graphfuser-compile") for _, _, th, _, _ in groups)
    opt = next(e for e in tl.events if e[3] == "optimize")
    assert all(opt[0] <= g[0] and g[0] + g[1] <= opt[0] + opt[1] + 1e-6 for g in groups)   # built inside it
    assert any("optimize" in line for line in tl.lines())


def test_race_cold_seconds_run_to_the_first_steady_call():
    """The race's cold seconds end with the first steady call, not after a fixed number of calls:
    calls measured on an H200 (graphfuser's resnet50 training step through torch.compile, and
    reduce-overhead's) count up to the call from which on none is slow."""
    from graphfuser.tools import race

    gf = [2.10, 0.044, 0.045, 2.10, 1.67, 1.38, 2.22, 0.0096, 0.0094, 0.0093]
    s, n = race.cold_seconds(0.03, gf)
    assert n == 8 and abs(s - (0.03 + sum(gf[:8]))) < 1e-9
    ro = [35.8, 0.114, 0.0106, 0.0087, 0.0082, 0.0082, 0.0079, 0.0078, 0.0079, 0.0078]
    s, n = race.cold_seconds(0.0, ro)
    assert n == 3 and abs(s - sum(ro[:3])) < 1e-9      # its third call (10.6 ms) is within 1.5x of 7.9 ms
    # a window that never settles counts whole; one steady throughout counts one call
    s, n = race.cold_seconds(0.0, [1.0, 5.0, 0.5, 9.0])
    assert n == 4 and s == 15.5
    s, n = race.cold_seconds(0.5, [0.01] * 10)
    assert n == 1 and abs(s - 0.51) < 1e-9
