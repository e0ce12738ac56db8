"""The race: whole models through eager, Inductor (default and ``reduce-overhead``) and graphfuser.

    python -m graphfuser race --device cuda                      # every row of the default list
    python -m graphfuser race --device cuda --rows resnet50:infer-fp32,gpt2:train-bf16

Each row (a model and a mode: ``infer-fp32``, ``infer-bf16`` under ``torch.autocast``, or
``train-bf16``: one SGD step with a bf16-autocast forward) runs in a process of its own, with
empty Inductor, Triton and graphfuser caches, so every cold start is a real one. In that process:

- cold seconds per backend: wrapping the model and calling it, synchronized, up to the end of
  its first steady call (``cold_seconds``): the first of ``COLD_WINDOW`` calls from which on no
  call takes more than ``STEADY_FACTOR`` times the median of the window's last three. Three calls
  are not enough: through ``torch.compile``, graphfuser's training step profiles its backward
  groups on the fifth call, optimizes them on the sixth and captures its CUDA graphs on the
  seventh (H200, resnet50 train-bf16: 2.2 s to the end of the third call, 9.6 s to the first
  steady one); ``reduce-overhead`` records its CUDA graphs on the second. ``<backend>_cold_calls``
  is that call's number;
- steady ms per call: the median of rounds that interleave the backends (``zoo.time_interleaved``);
- graphfuser through both entry points: ``graphfuser.script`` (where TorchScript can take the
  model) and ``torch.compile(backend="graphfuser")``; ``graphfuser_ms`` is the faster of the two;
- ``max_rel_err``: graphfuser's first steady output against eager's (inference rows), so a fast
  wrong answer shows;
- ``dynamo`` (``torch.compile(backend="eager")``, run just before the backend): Dynamo's own
  tracing and guards with no compiler behind them, the part of any ``torch.compile`` backend's
  cold start that the backend cannot shorten. Its steady time is no contender.

Writes ``logs/race-<device>-<gpu>.json`` (``{"gpu", "torch", "rows": [...]}``) and a markdown
table beside it. torchvision, timm and transformers are imported lazily, per row.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from typing import Any, Callable, Optional

import torch
import torch._dynamo

ROWS = [
    ("resnet50", "infer-fp32"), ("convnext_tiny", "infer-fp32"), ("vit_small", "infer-fp32"),
    ("mobilenet_v3_large", "infer-fp32"), ("efficientnet_b0", "infer-fp32"),
    ("convnext_tiny", "infer-bf16"), ("vit_small", "infer-bf16"), ("gpt2", "infer-bf16"), ("llama", "infer-bf16"),
    ("resnet50", "train-bf16"), ("convnext_tiny", "train-bf16"), ("vit_small", "train-bf16"),
    ("gpt2", "train-bf16"), ("llama", "train-bf16"),
]
HF = ("gpt2", "llama", "bert")
# inference rows of the Hugging Face zoo's other models (``hf_zoo``: its configs and keyword inputs)
ZOO_HF = ("t5", "whisper", "mistral", "qwen2", "hf_vit")
_ZOO_INPUTS: dict[str, Callable[[int, int, str], dict]] = {}
COLD_WINDOW = 10       # calls timed one by one from a cold start (cold_seconds)
STEADY_FACTOR = 1.5    # a call is steady within this factor of the window's last calls


def cold_seconds(wrap_s: float, calls: list[float]) -> tuple[float, int]:
    """(seconds from the wrap to the end of the first steady call, its 1-based number): the
    first call from which on every call of the window takes at most ``STEADY_FACTOR`` times the
    median of its last three. A window that never settles counts whole."""
    tail = sorted(calls[-3:])
    steady = tail[len(tail) // 2] * STEADY_FACTOR
    k = len(calls)          # calls[k:] are all steady
    while k > 0 and calls[k - 1] <= steady:
        k -= 1
    n = min(k + 1, len(calls))
    return wrap_s + sum(calls[:n]), n


# -- models ------------------------------------------------------------------------------------
def build(name: str, device: str) -> torch.nn.Module:
    """A model with random weights, from its constructor or config (no downloads)."""
    if name in ZOO_HF:
        from .hf_zoo import build as hf_build

        m, _ZOO_INPUTS[name] = hf_build(name.removeprefix("hf_"), small=False)
        return m.to(device)
    if name in HF:
        import transformers

        if name == "gpt2":
            cfg = transformers.GPT2Config()
            m = transformers.GPT2LMHeadModel(cfg)
        elif name == "bert":
            m = transformers.BertForMaskedLM(transformers.BertConfig())
        else:
            cfg = transformers.LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                                           num_attention_heads=16, num_key_value_heads=4, vocab_size=32000,
                                           max_position_embeddings=2048)
            m = transformers.LlamaForCausalLM(cfg)
        m.config.use_cache = False
        return m.to(device)
    from .zoo import build as zoo_build

    spec = {"vit_small": "timm:vit_small_patch16_224"}.get(name, name)
    return zoo_build(spec)[0].to(device)


def inputs(name: str, mode: str, device: str, batch: Optional[int]) -> tuple[Any, torch.Tensor]:
    """(model input, training target) for a row; a zoo model's input is its keyword arguments."""
    g = torch.Generator(device="cpu").manual_seed(0)
    if name in ZOO_HF:
        if not mode.startswith("infer"):
            raise ValueError(f"{name}: the race has inference rows only for {', '.join(ZOO_HF)}")
        if name not in _ZOO_INPUTS:
            raise ValueError(f"{name}: build the model first (its inputs come with its config)")
        return _ZOO_INPUTS[name](batch or 8, 512, device), torch.empty(0)
    if name in HF:
        b, t = batch or 8, 512
        ids = torch.randint(0, 30000, (b, t), generator=g).to(device)
        return ids, ids
    b = batch or (32 if mode.startswith("train") else 64)
    return torch.randn(b, 3, 224, 224, generator=g).to(device), torch.randint(0, 1000, (b,), generator=g).to(device)


def _logits(out: Any) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out
    if hasattr(out, "logits"):
        return out.logits
    return out[0]


def _loss(name: str, model: Callable, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if name in HF:
        return model(x, labels=y).loss
    return torch.nn.functional.cross_entropy(_logits(model(x)).float(), y)


def _autocast(device: str, mode: str) -> Any:
    if mode.endswith("bf16"):
        return torch.autocast(device, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def step_fn(name: str, mode: str, model: torch.nn.Module, wrapped: Callable, x: torch.Tensor,
            y: torch.Tensor, device: str) -> Callable[[], Any]:
    """One call of a row: an inference forward, or a training step of ``wrapped`` (the model's
    forward through a backend) with its own SGD optimizer."""
    if mode.startswith("infer"):
        def infer() -> Any:
            with torch.no_grad(), _autocast(device, mode):
                return wrapped(**x) if isinstance(x, dict) else wrapped(x)
        return infer
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)

    def train() -> Any:
        opt.zero_grad(set_to_none=True)
        with _autocast(device, mode):
            loss = _loss(name, wrapped, x, y)
        loss.backward()
        opt.step()
        return loss
    return train


def _wrap(backend: str, model: torch.nn.Module) -> Callable:
    if backend == "eager":
        return model
    if backend == "inductor":
        return torch.compile(model)
    if backend == "inductor_ro":
        return torch.compile(model, mode="reduce-overhead")
    if backend == "dynamo":
        return torch.compile(model, backend="eager")
    if backend in ("graphfuser_compile", "graphfuser_compile_kept"):
        from ..frontend.dynamo import registered_backend

        # "_kept": the opt-in weight cache (PYTORCH_NVFUSER_ENABLE=weight_cache), shown beside the
        # default entry points, never counted as one of them
        options = {"enable": ["weight_cache"]} if backend.endswith("_kept") else None
        return torch.compile(model, backend=registered_backend(), options=options)
    import graphfuser

    return graphfuser.script(model)


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _rel_err(got: Any, want: Any) -> Optional[float]:
    got, want = _logits(got), _logits(want)
    if not isinstance(got, torch.Tensor):
        return None
    g, w = got.double(), want.double()
    return float((g - w).norm() / w.norm().clamp_min(1e-30))


def run_row(name: str, mode: str, device: str, batch: Optional[int], backends: list[str],
            reps: int, rounds: int) -> dict[str, Any]:
    """Cold seconds and steady ms of every backend on one row (in this process)."""
    from .zoo import time_interleaved

    torch.manual_seed(0)
    base = build(name, device)
    base.train(mode.startswith("train"))
    x, y = inputs(name, mode, device, batch)
    first = next(iter(x.values())) if isinstance(x, dict) else x
    row: dict[str, Any] = {"model": name, "mode": mode, "batch": int(first.shape[0]), "errors": {}}
    fns: dict[str, Callable[[], Any]] = {}
    ref = None
    for backend in backends:
        torch._dynamo.reset()
        model = base if mode.startswith("infer") else copy.deepcopy(base)
        try:
            _sync(device)
            t0 = time.perf_counter()
            fn = step_fn(name, mode, model, _wrap(backend, model), x, y, device)
            wrap_s = time.perf_counter() - t0
            out, calls = None, []
            for _ in range(COLD_WINDOW):
                t1 = time.perf_counter()
                out = fn()
                _sync(device)
                calls.append(time.perf_counter() - t1)
            cold, n_cold = cold_seconds(wrap_s, calls)
        except Exception as e:  # noqa: BLE001 - a backend that fails is recorded, the race goes on
            row["errors"][backend] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
            traceback.print_exc()
            continue
        row[f"{backend}_cold_s"] = round(cold, 3)
        row[f"{backend}_cold_calls"] = n_cold
        if backend == "eager":
            ref = out
        elif backend.startswith("graphfuser") and ref is not None and mode.startswith("infer"):
            row[f"{backend}_max_rel_err"] = _rel_err(out, ref)
        if backend != "dynamo":         # (its cold seconds are what it is here for)
            fns[backend] = fn
    times = time_interleaved(fns, device, reps=reps, rounds=rounds)
    for backend, ms in times.items():
        row[f"{backend}_ms"] = round(ms, 4)
    _summarize(row)
    return row


def _summarize(row: dict[str, Any]) -> None:
    """The issue's columns: graphfuser = the faster entry point, Inductor's cold = its default mode's."""
    gf = [(row[f"{b}_ms"], b) for b in ("graphfuser_script", "graphfuser_compile") if f"{b}_ms" in row]
    if gf:
        ms, entry = min(gf)
        row["graphfuser_ms"], row["graphfuser_entry"] = ms, entry
        row["graphfuser_cold_s"] = row.get(f"{entry}_cold_s")
    row["inductor_cold_s"] = row.get("inductor_cold_s")
    best = [row[k] for k in ("inductor_ms", "inductor_ro_ms") if k in row]
    if best and "graphfuser_ms" in row:
        row["graphfuser_over_best"] = round(row["graphfuser_ms"] / min(best), 3)
    if row.get("inductor_cold_s") and row.get("graphfuser_cold_s"):
        row["cold_ratio"] = round(row["graphfuser_cold_s"] / row["inductor_cold_s"], 3)
    if row.get("inductor_ro_cold_s") and row.get("graphfuser_cold_s"):
        # (a race of reduce-overhead alone, the training rows' usual contender, has a cold ratio too)
        row["cold_ratio_ro"] = round(row["graphfuser_cold_s"] / row["inductor_ro_cold_s"], 3)


# -- the whole race ------------------------------------------------------------------------------
def _child(args: argparse.Namespace, name: str, mode: str, out: str, gpu: Optional[int] = None) -> dict[str, Any]:
    env = dict(os.environ)
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
    tmp = tempfile.mkdtemp(prefix="race-")
    for var in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "GRAPHFUSER_CACHE_DIR"):
        env[var] = os.path.join(tmp, var.lower())
    cmd = [sys.executable, "-m", "graphfuser.tools.race", "--one", f"{name}:{mode}", "--json", out,
           "--device", args.device, "--reps", str(args.reps), "--rounds", str(args.rounds),
           "--backends", args.backends] + (["--batch", str(args.batch)] if args.batch else [])
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, timeout=args.timeout)
    if proc.returncode != 0 or not os.path.exists(out):
        return {"model": name, "mode": mode, "errors": {"process": f"exit {proc.returncode}"},
                "seconds": round(time.perf_counter() - t0, 1)}
    with open(out) as f:
        return json.load(f)


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def markdown(record: dict[str, Any]) -> str:
    cols = ["model", "mode", "batch", "eager_ms", "inductor_ms", "inductor_ro_ms", "graphfuser_script_ms",
            "graphfuser_compile_ms", "graphfuser_over_best", "inductor_cold_s", "graphfuser_cold_s", "cold_ratio",
            "graphfuser_compile_max_rel_err"]
    if any("dynamo_cold_s" in r for r in record["rows"]):
        cols.insert(cols.index("cold_ratio"), "dynamo_cold_s")
    if any(r.get("inductor_ro_cold_s") for r in record["rows"]):
        at = cols.index("cold_ratio") + 1
        cols[at:at] = ["inductor_ro_cold_s", "cold_ratio_ro"]
    if any("graphfuser_compile_kept_ms" in r for r in record["rows"]):
        cols.insert(cols.index("graphfuser_over_best"), "graphfuser_compile_kept_ms")
    lines = [f"# race: {record['gpu']} (torch {record['torch']})", "",
             "ms per call (inference) or per SGD step (training), median of interleaved rounds; cold: seconds "
             "from the wrap to the end of the first steady call (of " f"{COLD_WINDOW} timed one by one: the first from which on "
             f"none takes over {STEADY_FACTOR}x the last ones), empty caches. graphfuser_over_best: the faster "
             "graphfuser entry point over Inductor's better mode."
             + (f" Rows ran {record['gpus']} at a time, each in its own process on its own GPU of one host."
                if record.get("gpus") else "")
             + (f" Merged from {len(record['parts'])} parts run one after another (`race --merge`): "
                + ", ".join(record["parts"]) + "." if record.get("parts") else ""), "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    ratios = []
    for r in record["rows"]:
        lines.append("| " + " | ".join(_fmt(r.get(c)) for c in cols) + " |")
        if r.get("graphfuser_over_best"):
            ratios.append(r["graphfuser_over_best"])
    if ratios:
        geo = math.exp(sum(math.log(v) for v in ratios) / len(ratios))
        lines += ["", f"Geometric mean of graphfuser / Inductor's best over {len(ratios)} rows: {geo:.3f}."]
    errs = [(r["model"], r["mode"], r["errors"]) for r in record["rows"] if r.get("errors")]
    if errs:
        lines += ["", "Errors:"] + [f"- {m} {mode}: {e}" for m, mode, e in errs]
    return "\n".join(lines) + "\n"


def merge(paths: list[str], out: str, device: str, tag: str = "") -> int:
    """One record from race records of parts of a race (a device command is bounded, a full race
    on one GPU is not): they must name the same GPU and torch; a row in several keeps the last
    one's; rows come in the race's order (``ROWS``), others after them. Writes the merged JSON and
    its table; the table's header says which parts it was made of."""
    records = []
    for p in paths:
        with open(p) as f:
            records.append(json.load(f))
    kinds = {(r["gpu"], r["torch"]) for r in records}
    if len(kinds) != 1:
        raise SystemExit(f"race --merge: the parts ran on different GPUs or torch versions: {sorted(kinds)}")
    gpu, version = kinds.pop()
    rows: dict[tuple, dict] = {}
    for r in records:
        for row in r["rows"]:
            rows[(row["model"], row["mode"])] = row
    order = {key: i for i, key in enumerate(ROWS)}
    merged = {"gpu": gpu, "torch": version, "parts": [os.path.basename(p) for p in paths],
              "rows": sorted(rows.values(), key=lambda row: order.get((row["model"], row["mode"]), len(order)))}
    name = gpu.replace("NVIDIA ", "").replace(" ", "_") + (f"-{tag}" if tag else "")
    path = os.path.join(out, f"race-{device}-{name}")
    os.makedirs(out, exist_ok=True)
    with open(path + ".json", "w") as f:
        json.dump(merged, f, indent=1)
    with open(path + ".md", "w") as f:
        f.write(markdown(merged))
    print(markdown(merged))
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="race", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--rows", default=None, help="model:mode list (default: the full race)")
    p.add_argument("--backends", default="eager,inductor,inductor_ro,graphfuser_script,dynamo,graphfuser_compile",
                   help="also graphfuser_compile_kept: the backend with the opt-in weight_cache; dynamo: "
                        "torch.compile(backend='eager'), Dynamo's share of a cold start")
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--out", default="logs")
    p.add_argument("--tag", default="")
    p.add_argument("--gpus", type=int, default=1, help="rows run this many at a time, one GPU each")
    p.add_argument("--merge", nargs="+", default=None, metavar="JSON",
                   help="merge race records of one GPU kind (a full race in parts, one device command "
                        "each) into race-<device>-<gpu>[-tag].json / .md under --out, in the race's row order")
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)
    p.add_argument("--json", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    backends = args.backends.split(",")
    if args.one:
        name, mode = args.one.split(":")
        row = run_row(name, mode, args.device, args.batch, backends, args.reps, args.rounds)
        with open(args.json, "w") as f:
            json.dump(row, f)
        return 0
    if args.merge:
        return merge(args.merge, args.out, args.device, args.tag)
    rows = [tuple(r.split(":")) for r in args.rows.split(",")] if args.rows else ROWS
    gpu = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    record: dict[str, Any] = {"gpu": gpu, "torch": torch.__version__, "rows": []}
    tag = gpu.replace("NVIDIA ", "").replace(" ", "_") + (f"-{args.tag}" if args.tag else "")
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"race-{args.device}-{tag}")
    if args.gpus > 1:
        record["gpus"] = args.gpus
    done: dict[int, dict[str, Any]] = {}
    lock = threading.Lock()

    def one(i: int, gpu: Optional[int]) -> None:
        name, mode = rows[i]
        row = _child(args, name, mode, os.path.join(tmp, f"{i}.json"), gpu)
        with lock:
            done[i] = row
            record["rows"] = [done[k] for k in sorted(done)]     # the list's order, rows as they finish
            print(json.dumps(row), flush=True)
            with open(path + ".json", "w") as f:
                json.dump(record, f, indent=1)
            with open(path + ".md", "w") as f:
                f.write(markdown(record))

    with tempfile.TemporaryDirectory() as tmp:
        if args.gpus > 1:
            # one row per GPU at a time, each in its own process (CUDA_VISIBLE_DEVICES): the
            # rows' timings share the host's cores, not a GPU
            import queue

            todo: "queue.Queue[int]" = queue.Queue()
            for i in range(len(rows)):
                todo.put(i)

            def worker(gpu: int) -> None:
                while True:
                    try:
                        i = todo.get_nowait()
                    except queue.Empty:
                        return
                    one(i, gpu)
            threads = [threading.Thread(target=worker, args=(g,)) for g in range(args.gpus)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        else:
            for i in range(len(rows)):
                one(i, None)
    print(markdown(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
