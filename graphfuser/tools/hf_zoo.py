"""Hugging Face (and torchvision / timm) models through torch.compile: eager, Inductor (default
and reduce-overhead) and graphfuser side by side, in one process.

Per model, dtype (fp32, bf16 autocast) and backend: cold seconds to the first output and to the
first fused output (graphfuser profiles two calls first), steady ms per call, the largest
difference from eager at two input shapes (Inductor's at the first only), fusion groups; and one
training step (gradients against eager's). Models are built from their configs with random weights: no downloads.

    python -m graphfuser hf_zoo --device cuda --out logs/hf_compile_zoo
    python -m graphfuser hf_zoo --device cpu --small --backends eager,graphfuser   # a smoke run

Backends run in the order given, each model's after the other: the first ``torch.compile`` of
the process also pays Dynamo's one-time start (imports, caches), which ``dynamo`` (Dynamo's own
eager backend, listed before the others by default) takes for the first model.

Writes ``<out>.json`` and a Markdown table ``<out>.md``.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import statistics
import time
import traceback
from typing import Any, Callable

import torch

BATCHES = {"big": ((8, 512), (4, 384)), "small": ((2, 16), (3, 24))}
WARM = 5     # training steps before timing: profiling, then the backward's own profiling and compiles


def _no_dropout(cfg: Any) -> Any:
    for k, v in list(vars(cfg).items()):
        if isinstance(v, float) and ("dropout" in k or k.endswith("_pdrop") or "drop_prob" in k):
            setattr(cfg, k, 0.0)
    return cfg


def build(name: str, small: bool) -> tuple[torch.nn.Module, Callable[[int, int, str], dict]]:
    """The model and a function (batch, length, device) -> its keyword inputs."""
    import transformers as tf

    def text(vocab: int) -> Callable[[int, int, str], dict]:
        def make(b: int, t: int, device: str) -> dict:
            g = torch.Generator().manual_seed(b * 1000 + t)
            ids = torch.randint(1, vocab, (b, t), generator=g)
            mask = torch.ones(b, t, dtype=torch.long)
            mask[1::2, t - t // 4:] = 0
            return {"input_ids": ids.to(device), "attention_mask": mask.to(device)}
        return make

    tiny = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128)
    if name == "gpt2":
        cfg = tf.GPT2Config(n_layer=2, n_embd=64, n_head=4) if small else tf.GPT2Config()
        return tf.GPT2LMHeadModel(_no_dropout(cfg)), text(cfg.vocab_size)
    if name == "bert":
        cfg = tf.BertConfig(**tiny) if small else tf.BertConfig()
        return tf.BertModel(_no_dropout(cfg)), text(cfg.vocab_size)
    if name in ("llama", "mistral", "qwen2"):
        cls = {"llama": (tf.LlamaConfig, tf.LlamaForCausalLM), "mistral": (tf.MistralConfig, tf.MistralForCausalLM),
               "qwen2": (tf.Qwen2Config, tf.Qwen2ForCausalLM)}[name]
        size = dict(tiny, num_key_value_heads=2, vocab_size=1000) if small else \
            dict(num_hidden_layers=8, hidden_size=1024, num_attention_heads=16, num_key_value_heads=4,
                 intermediate_size=2816, vocab_size=32000)
        cfg = cls[0](**size, use_cache=False)
        return cls[1](_no_dropout(cfg)), text(cfg.vocab_size)
    if name == "t5":
        cfg = tf.T5Config(num_layers=2, d_model=64, num_heads=4, d_ff=128, d_kv=16) if small else tf.T5Config()
        base = text(cfg.vocab_size)

        def t5_inputs(b: int, t: int, device: str) -> dict:
            d = base(b, t, device)
            d["decoder_input_ids"] = d["input_ids"][:, : max(1, t // 2)]
            return d
        return tf.T5Model(_no_dropout(cfg)), t5_inputs
    if name == "vit":
        cfg = tf.ViTConfig(**tiny, image_size=32, patch_size=8) if small else tf.ViTConfig()

        def vit_inputs(b: int, t: int, device: str) -> dict:
            return {"pixel_values": torch.randn(b, 3, cfg.image_size, cfg.image_size, device=device)}
        return tf.ViTModel(_no_dropout(cfg)), vit_inputs
    if name == "whisper":
        cfg = tf.WhisperConfig(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                               decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
                               max_source_positions=50) if small else \
            tf.WhisperConfig.from_dict(dict(d_model=384, encoder_layers=4, decoder_layers=4, encoder_attention_heads=6,
                                            decoder_attention_heads=6, encoder_ffn_dim=1536, decoder_ffn_dim=1536))

        def whisper_inputs(b: int, t: int, device: str) -> dict:
            frames = 2 * cfg.max_source_positions
            return {"input_features": torch.randn(b, cfg.num_mel_bins, frames, device=device),
                    "decoder_input_ids": torch.randint(1, 100, (b, max(1, t // 8)), device=device)}
        return tf.WhisperModel(_no_dropout(cfg)), whisper_inputs
    if name.startswith("tv_"):
        import torchvision

        m = getattr(torchvision.models, name[3:])()
        return m, lambda b, t, device: {"x": torch.randn(b, 3, 224, 224, device=device)}
    if name.startswith("timm_"):
        import timm

        m = timm.create_model(name[5:], pretrained=False)
        return m, lambda b, t, device: {"x": torch.randn(b, 3, 224, 224, device=device)}
    raise ValueError(f"unknown model {name}")


def tensors_of(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in tensors_of(o)]
    return []


def max_diff(a: Any, b: Any) -> float:
    ta, tb = tensors_of(a), tensors_of(b)
    if len(ta) != len(tb):
        return float("inf")
    return max([(x.float() - y.float()).abs().max().item() for x, y in zip(ta, tb) if x.numel()] or [0.0])


def compiled(model: torch.nn.Module, backend: str) -> Any:
    if backend == "eager":
        return model
    if backend == "dynamo":
        # Dynamo's own eager backend: its trace time is in every torch.compile backend's cold start
        return torch.compile(model, backend="eager")
    if backend == "inductor":
        return torch.compile(model)
    if backend == "inductor-ro":
        return torch.compile(model, mode="reduce-overhead")
    if backend == "graphfuser":
        from ..frontend.dynamo import registered_backend

        return torch.compile(model, backend=registered_backend())
    raise ValueError(backend)


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def groups() -> int:
    """Fusion groups of every graph compiled so far (each Dynamo graph, forward and backward):
    the last executed graph alone is a training step's loss graph, or the graph after a break."""
    from ..executor.fusion import live_fusion_groups

    return live_fusion_groups()


def run_inference(name: str, backend: str, dtype: str, a: argparse.Namespace) -> dict:
    torch._dynamo.reset()
    torch.manual_seed(0)
    model, make = build(name, a.small)
    model = model.to(a.device).eval()
    shapes = BATCHES["small" if a.small else "big"]
    ctx = (lambda: torch.autocast(a.device, dtype=torch.bfloat16)) if dtype == "bf16" else contextlib.nullcontext
    row: dict = {"model": name, "backend": backend, "dtype": dtype}
    fn = compiled(model, backend)
    if backend.startswith("inductor"):
        # Inductor's answer at a second shape is not this table's question (its recompile there
        # took 15-20 s per model, dtype and mode on an H100 host): one shape, timed as the others
        shapes = shapes[:1]
    with torch.no_grad():
        diffs = []
        for k, (b, t) in enumerate(shapes):
            inputs = make(b, t, a.device)
            with ctx():
                ref = model(**inputs)
            sync(a.device)
            start = time.perf_counter()
            for call in range(3):
                with ctx():
                    out = fn(**inputs)
                sync(a.device)
                if k == 0 and call == 0:
                    row["cold_first_s"] = time.perf_counter() - start
            if k == 0:
                row["cold_fused_s"] = time.perf_counter() - start
            diffs.append(max_diff(out, ref))
        row["max_diff"] = max(diffs)
        inputs = make(*shapes[0], a.device)
        times = []
        for _ in range(a.iters):
            sync(a.device)
            t0 = time.perf_counter()
            with ctx():
                fn(**inputs)
            sync(a.device)
            times.append((time.perf_counter() - t0) * 1e3)
        row["steady_ms"] = statistics.median(times)
    if backend == "graphfuser":
        row["groups"] = groups()
    return row


def run_training(name: str, backend: str, a: argparse.Namespace) -> dict:
    torch._dynamo.reset()
    torch.manual_seed(0)
    model, make = build(name, a.small)
    model = model.to(a.device).train()
    ref = copy.deepcopy(model)
    fn = compiled(model, backend)
    inputs = make(*BATCHES["small" if a.small else "big"][1], a.device)
    row: dict = {"model": name, "backend": backend, "dtype": "fp32-train"}
    times = []
    for step in range(WARM + a.train_iters):
        sync(a.device)
        t0 = time.perf_counter()
        loss = sum(t.float().pow(2).mean() for t in tensors_of(fn(**inputs)) if t.is_floating_point())
        loss.backward()
        sync(a.device)
        times.append((time.perf_counter() - t0) * 1e3)
        if step == 0:
            row["cold_first_s"] = times[0] / 1e3
        if step == 3:       # past profiling: the fused forward and backward
            ref_loss = sum(t.float().pow(2).mean() for t in tensors_of(ref(**inputs)) if t.is_floating_point())
            ref_loss.backward()
            row["max_diff"] = (loss - ref_loss).abs().item()
            row["grad_max_diff"] = max(((p.grad - q.grad).abs().max().item() for p, q in
                                        zip(model.parameters(), ref.parameters())
                                        if p.grad is not None and q.grad is not None), default=0.0)
        model.zero_grad(set_to_none=True)
    row["steady_ms"] = statistics.median(times[WARM:]) if len(times) > WARM else times[-1]
    if backend == "graphfuser":
        row["groups"] = groups()
    return row


def run_trainer(a: argparse.Namespace) -> dict:
    """HF Trainer on a GPT-2 compiled with graphfuser, beside the same run eagerly. The model is
    compiled first (accelerate rejects backend names it does not know); the compiled model's
    forward takes ``*args, **kwargs``, so the Trainer must keep every column."""
    import transformers as tf

    losses = {}
    for backend in ("eager", "graphfuser"):
        torch._dynamo.reset()
        tf.set_seed(0)
        model, make = build("gpt2", a.small)
        model = model.to(a.device)
        if backend == "graphfuser":
            model = compiled(model, "graphfuser")
        b, t = BATCHES["small" if a.small else "big"][1]
        data = [{k: v[0].cpu() for k, v in make(1, t, "cpu").items()} for _ in range(4 * b)]
        for d in data:
            d["labels"] = d["input_ids"].clone()
        args = tf.TrainingArguments(output_dir="/tmp/hf_compile_zoo_trainer", per_device_train_batch_size=b,
                                    max_steps=5, logging_steps=1, report_to=[], save_strategy="no",
                                    remove_unused_columns=False, use_cpu=a.device == "cpu", seed=0)
        trainer = tf.Trainer(model=model, args=args, train_dataset=data)
        trainer.train()
        losses[backend] = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return {"model": "gpt2", "backend": "graphfuser", "dtype": "Trainer", "losses": losses,
            "max_diff": max(abs(x - y) for x, y in zip(losses["eager"], losses["graphfuser"])), "groups": groups()}


def table(rows: list[dict]) -> str:
    cols = ["model", "dtype", "backend", "cold_first_s", "cold_fused_s", "steady_ms", "max_diff", "grad_max_diff",
            "groups", "error"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cells = []
        for c in cols:
            v = r.get(c, "")
            cells.append(f"{v:.4g}" if isinstance(v, float) else str(v)[:80])
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def summary(rows: list[dict]) -> str:
    """One line per model and dtype, the issue's columns: steady ms of each backend, graphfuser
    over Inductor's better mode, and cold seconds to the first fused output (the third call;
    Inductor's default mode) with their ratio."""
    by: dict[tuple, dict[str, dict]] = {}
    for r in rows:
        if "error" not in r:
            by.setdefault((r["model"], r["dtype"]), {})[r["backend"]] = r
    cols = ["model", "dtype", "eager_ms", "inductor_ms", "inductor_ro_ms", "graphfuser_ms", "graphfuser_over_best",
            "graphfuser_cold_s", "inductor_cold_s", "cold_ratio", "dynamo_cold_s", "graphfuser_max_diff",
            "inductor_max_diff"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for (model, dtype), b in by.items():
        ms = {k: b[k]["steady_ms"] for k in ("eager", "inductor", "inductor-ro", "graphfuser") if k in b}
        cold_key = "cold_first_s" if dtype.endswith("train") else "cold_fused_s"
        gf_cold = b.get("graphfuser", {}).get(cold_key)
        ind_cold = b.get("inductor", {}).get(cold_key)
        best = min([ms[k] for k in ("inductor", "inductor-ro") if k in ms], default=None)
        cells = [model, dtype, ms.get("eager"), ms.get("inductor"), ms.get("inductor-ro"), ms.get("graphfuser"),
                 ms["graphfuser"] / best if best and "graphfuser" in ms else None, gf_cold, ind_cold,
                 gf_cold / ind_cold if gf_cold and ind_cold else None, b.get("dynamo", {}).get(cold_key),
                 b.get("graphfuser", {}).get("max_diff"), b.get("inductor", {}).get("max_diff")]
        lines.append("| " + " | ".join("-" if c is None else f"{c:.3g}" if isinstance(c, float) else str(c)
                                        for c in cells) + " |")
    return "\n".join(lines) + "\n"


def _write(out: str, rows: list[dict], device: str, meta: "dict | None" = None) -> None:
    meta = meta or {"torch": torch.__version__,
                    "device": torch.cuda.get_device_name() if device == "cuda" else "cpu"}
    with open(out + ".json", "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    with open(out + ".md", "w") as f:
        f.write(f"# torch.compile zoo ({meta['device']}, torch {meta['torch']})\n\n" + summary(rows)
                + "\nEvery row:\n\n" + table(rows))


def merge(paths: list[str], out: str) -> list[dict]:
    """The rows of several runs (the parts of a model list run on separate GPUs) in one record."""
    rows: list[dict] = []
    meta = None
    for p in paths:
        with open(p) as f:
            d = json.load(f)
        meta = meta or d.get("meta")
        rows += d["rows"]
    _write(out, rows, "cpu", meta)
    return rows


def _fresh_caches() -> None:
    """Empty disk caches (Inductor's, Triton's, graphfuser's) for the next model: its cold
    seconds are a real cold start whatever ran before on the machine, or before in this process
    (llama, mistral and qwen2 share kernels; a second run of the tool would find them all)."""
    import tempfile

    from ..config import config

    tmp = tempfile.mkdtemp(prefix="hf-zoo-")
    for var in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "GRAPHFUSER_CACHE_DIR"):
        os.environ[var] = os.path.join(tmp, var.lower())
    config.set(cache_dir=os.environ["GRAPHFUSER_CACHE_DIR"])


def main(argv: "list[str] | None" = None) -> int:
    p = argparse.ArgumentParser(prog="hf_zoo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--models", default="gpt2,bert,llama,mistral,qwen2,t5,vit,whisper")
    p.add_argument("--backends", default="eager,dynamo,inductor,inductor-ro,graphfuser",
                   help="dynamo: torch.compile(backend='eager'), whose cold seconds are Dynamo's own share "
                        "of every backend's (inference only)")
    p.add_argument("--dtypes", default="fp32,bf16")
    p.add_argument("--small", action="store_true", help="tiny configs (a CPU smoke run)")
    p.add_argument("--no-train", action="store_true")
    p.add_argument("--trainer", action="store_true", help="also one HF Trainer run with a compiled GPT-2")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--train-iters", type=int, default=5)
    p.add_argument("--out", default="logs/hf_compile_zoo")
    p.add_argument("--merge", nargs="+", default=None, metavar="JSON",
                   help="write the rows of these runs' JSON records into one record at --out, and stop")
    a = p.parse_args(argv)
    if a.merge:
        print(summary(merge(a.merge, a.out)))
        return 0
    rows: list[dict] = []

    def attempt(fn: Callable[[], dict], what: dict) -> None:
        try:
            row = fn()
        except Exception as e:  # noqa: BLE001 - one model's failure is a row, not the end of the run
            row = dict(what, error=f"{type(e).__name__}: {e}".splitlines()[0])
            traceback.print_exc()
        rows.append(row)
        print(json.dumps(row), flush=True)
        _write(a.out, rows, a.device)       # after every row: a run stopped early keeps its rows

    for name in a.models.split(","):
        _fresh_caches()
        for dtype in a.dtypes.split(","):
            for backend in a.backends.split(","):
                attempt(lambda: run_inference(name, backend, dtype, a),
                        {"model": name, "backend": backend, "dtype": dtype})
        if not a.no_train:
            for backend in a.backends.split(","):
                if backend in ("inductor-ro", "dynamo"):
                    continue
                attempt(lambda: run_training(name, backend, a),
                        {"model": name, "backend": backend, "dtype": "fp32-train"})
    if a.trainer:
        attempt(lambda: run_trainer(a), {"model": "gpt2", "backend": "graphfuser", "dtype": "Trainer"})
    _write(a.out, rows, a.device)
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
