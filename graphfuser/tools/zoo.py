"""The model zoo: real models through eager, ``torch.jit.script``, ``torch.compile`` and graphfuser.

    python tools/zoo.py --device cuda                     # every torchvision classifier + timm list
    python tools/zoo.py --device cuda --models resnet50,timm:vit_small_patch16_224 --time --compile
    python tools/zoo.py --device cuda --kinds logs/zoo-node-kinds.json   # node kinds only
    python -m graphfuser zoo ...                           # the same
    python -m graphfuser zoo --train ...                   # a few SGD steps per model (zoo_train)

Per model (``eval()``, ``torch.no_grad()``): whether ``torch.jit.script`` accepts it; whether
``graphfuser.script`` runs it and matches eager at batch 2 and, after re-specialization, at
batch 3; the fusion groups and fused nodes of its optimized graph; with ``--time``, ms per call
at ``--batch`` (default 64) for eager, TorchScript, graphfuser and (with ``--compile``)
``torch.compile`` — fp32, and bf16 under ``torch.autocast`` for transformer models; each the
median of rounds that interleave the backends (``time_interleaved``). Writes
``logs/zoo-<device>[-<gpu>].json`` (``{"models": [{"model", "status", "groups", ...}]}``) and a
markdown table beside it. torchvision and timm are imported lazily: the package never needs them.
"""
from __future__ import annotations

import argparse
import contextlib
import collections
import gc
import json
import math
import os
import re
import statistics
import sys
import time
import traceback
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Optional

import torch

from .timing import cuda_ms_per_call, sync as _sync

TIMM_MODELS = [
    "vit_small_patch16_224", "vit_base_patch16_224", "deit_small_patch16_224", "deit_tiny_patch16_224",
    "swin_tiny_patch4_window7_224", "convnext_tiny", "convnext_nano", "resnet50d", "resnet26d",
    "resnet18", "seresnet50", "resnext50_32x4d", "efficientnet_b0", "efficientnet_lite0",
    "tf_efficientnet_b0", "mobilenetv3_large_100", "mobilenetv3_small_100", "mobilenetv2_100",
    "regnetx_002", "regnety_002", "mixer_b16_224", "levit_128s", "cait_xxs24_224", "poolformer_s12",
    "ghostnet_100", "dla34", "dpn68", "hrnet_w18_small", "res2net50_26w_4s", "densenet121",
    "resmlp_12_224", "gmlp_s16_224", "crossvit_tiny_240", "pit_ti_224", "coat_lite_tiny", "twins_svt_small",
    "tnt_s_patch16_224", "visformer_tiny", "mobilevit_xxs", "efficientformer_l1", "rexnet_100",
    "hardcorenas_a", "mnasnet_100", "spnasnet_100", "fbnetc_100", "lcnet_050", "cspresnet50",
    "cspdarknet53", "dm_nfnet_f0", "nf_resnet26", "repvgg_a0", "selecsls42b", "inception_v3",
    "xception41", "vgg11", "beit_base_patch16_224", "convit_tiny", "eca_resnet33ts", "botnet26t_256",
    "halonet26t", "sebotnet33ts_256", "gernet_s", "resnetrs50", "tresnet_m", "regnetz_b16",
]

TRANSFORMER_HINTS = ("vit", "deit", "swin", "mixer", "levit", "cait", "beit", "crossvit", "pit_", "coat",
                     "twins", "tnt", "visformer", "convit", "resmlp", "gmlp", "mobilevit", "efficientformer")


@dataclass
class ZooResult:
    model: str
    status: str = "error"              # ok | mismatch | error | not_scriptable
    groups: int = 0
    fused_nodes: int = 0
    max_rel_err: Optional[float] = None
    eager_ms: Optional[float] = None
    jit_ms: Optional[float] = None
    compile_ms: Optional[float] = None
    graphfuser_ms: Optional[float] = None
    bf16: dict = field(default_factory=dict)    # same four timings under autocast (transformers)
    warnings: list = field(default_factory=list)
    error: Optional[str] = None
    seconds: float = 0.0


# -- the model list ------------------------------------------------------------------------------
def torchvision_classifiers() -> list[str]:
    import torchvision

    return sorted(torchvision.models.list_models(module=torchvision.models))


def model_names(spec: Optional[str]) -> list[str]:
    """``None``: every torchvision classifier and the timm list; else a comma list where
    ``timm:name`` is a timm model and a bare name a torchvision one (``tv-seg:``/``tv-det:`` for
    segmentation / detection models)."""
    if spec:
        return [s.strip() for s in spec.split(",") if s.strip()]
    names = torchvision_classifiers()
    try:
        import timm

        have = set(timm.list_models())
        names += [f"timm:{n}" for n in TIMM_MODELS if n in have]
    except ImportError:
        pass
    return names


def build(name: str) -> tuple[torch.nn.Module, tuple[int, ...]]:
    """(model in eval mode with random weights, input size without batch)."""
    if name.startswith("timm:"):
        import timm

        m = timm.create_model(name[5:], pretrained=False)
        cfg = getattr(m, "pretrained_cfg", None) or getattr(m, "default_cfg", {}) or {}
        size = tuple(cfg.get("input_size", (3, 224, 224)))
        return m.eval(), size
    import torchvision

    if name.startswith("tv-seg:"):
        return torchvision.models.segmentation.__dict__[name[7:]](weights=None, weights_backbone=None).eval(), \
            (3, 224, 224)
    if name.startswith("tv-det:"):
        return torchvision.models.detection.__dict__[name[7:]](weights=None, weights_backbone=None).eval(), \
            (3, 224, 224)
    kwargs: dict[str, Any] = {"weights": None}
    if name.startswith("inception") or name.startswith("googlenet"):
        kwargs["aux_logits"] = False
        kwargs["init_weights"] = False
    m = torchvision.models.get_model(name, **kwargs)
    size = (3, 299, 299) if name.startswith("inception") else (3, 224, 224)
    if name.startswith("vit_h") or name.startswith("regnet_y_128"):
        pass
    return m.eval(), size


# -- comparing outputs -------------------------------------------------------------------------
def _flatten(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        return [t for k in sorted(out) for t in _flatten(out[k])]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _flatten(o)]
    return []


def rel_err(got: Any, want: Any) -> float:
    """Largest ||got - want|| / ||want|| over the output tensors (inf when structures differ)."""
    g, w = _flatten(got), _flatten(want)
    if len(g) != len(w):
        return math.inf
    worst = 0.0
    for a, b in zip(g, w):
        if a.shape != b.shape or a.dtype != b.dtype:
            return math.inf
        if not a.is_floating_point():
            worst = max(worst, 0.0 if torch.equal(a, b) else math.inf)
            continue
        a64, b64 = a.double(), b.double()
        if not torch.equal(torch.isnan(a64), torch.isnan(b64)):
            return math.inf
        a64, b64 = torch.nan_to_num(a64), torch.nan_to_num(b64)
        den = b64.norm().item()
        num = (a64 - b64).norm().item()
        worst = max(worst, num / den if den > 0 else num)
    return worst


def fusion_stats(sf: Any) -> tuple[int, int]:
    """(fusion groups, fused compute nodes) of a ScriptedFunction's optimized graph."""
    g = getattr(sf, "_optimized", None)
    if g is None:
        return 0, 0
    groups = [n for n in g.all_nodes() if n.kind.endswith("FusionGroup")]
    nodes = sum(sum(1 for m in n.subgraph.block.nodes if m.kind not in ("prim::Constant", "prim::ListConstruct"))
                for n in groups)
    return len(groups), nodes


# -- timing --------------------------------------------------------------------------------------
ROUND_MS = 25.0     # a round of one backend lasts at least about this long (host-bound models: more calls)


def time_interleaved(fns: dict[str, Callable[[], Any]], device: str, reps: int = 20, rounds: int = 7,
                     warmup: int = 3) -> dict[str, float]:
    """ms per call of each backend: the median over ``rounds`` rounds, each round timing every
    backend in turn (eager, jit, graphfuser, eager, ...), so a slow moment of the machine (clock
    changes, another process) lands in one round of every backend instead of deciding one
    backend's number. A round is ``max(ceil(reps / rounds), calls filling ROUND_MS)`` calls
    back to back between two synchronizations (CUDA events on the GPU)."""
    per_call: dict[str, float] = {}
    for label, fn in fns.items():
        for _ in range(warmup):
            fn()
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        per_call[label] = 1e3 * (time.perf_counter() - t0)
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for label, fn in fns.items():
            calls = max(math.ceil(reps / rounds), min(50, math.ceil(ROUND_MS / max(per_call[label], 1e-3))))
            times[label].append(_time_calls(fn, device, calls))
    return {k: statistics.median(v) for k, v in times.items()}


def _time_calls(fn: Callable[[], Any], device: str, calls: int) -> float:
    """ms per call of ``calls`` calls back to back (the device idle before the first)."""
    _sync(device)
    if device == "cuda":
        return cuda_ms_per_call(fn, calls)
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return 1e3 * (time.perf_counter() - t0) / calls


def time_ms(fn: Callable[[], Any], device: str, reps: int = 20, warmup: int = 5) -> float:
    """ms per call of one function (median of rounds, as :func:`time_interleaved`)."""
    return time_interleaved({"fn": fn}, device, reps, warmup=warmup)["fn"]


def _timings(model: torch.nn.Module, jit: Any, sf: Any, x: torch.Tensor, device: str, compile_: bool,
             reps: int, rounds: int = 7) -> dict[str, Optional[float]]:
    fns: dict[str, Callable[[], Any]] = {"eager_ms": lambda: model(x)}
    if jit is not None:
        fns["jit_ms"] = lambda: jit(x)
    if sf is not None:
        fns["graphfuser_ms"] = lambda: sf(x)
    out: dict[str, Optional[float]] = {"eager_ms": None, "jit_ms": None, "graphfuser_ms": None, "compile_ms": None}
    if compile_:
        try:
            import torch._dynamo

            torch._dynamo.reset()
            comp = torch.compile(model)
            comp(x)                      # builds it: outside the timed rounds
            fns["compile_ms"] = lambda: comp(x)
        except Exception as e:  # noqa: BLE001 - recorded, not fatal
            out["compile_error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    out.update(time_interleaved(fns, device, reps, rounds))
    return out


# -- one model -----------------------------------------------------------------------------------
@contextlib.contextmanager
def _exact_fp32():
    """TF32 off while outputs are compared: a convolution whose bias graphfuser adds in its own
    kernel (or whose input layout differs) picks another TF32 algorithm than eager, and TF32's
    10-bit mantissa then differs by ~1e-3 relative on deep models (timm visformer_tiny: 5e-3 with
    TF32, 3e-6 without). The check is about graphfuser's arithmetic; timing keeps torch's defaults."""
    cudnn, matmul = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = cudnn, matmul


def _through_backend(model: torch.nn.Module) -> Callable:
    """``torch.compile(model, backend="graphfuser")`` (by name where the package is installed)."""
    import torch._dynamo

    from ..frontend.dynamo import registered_backend

    torch._dynamo.reset()
    return torch.compile(model, backend=registered_backend())


def run_model(name: str, device: str, batch: int, do_time: bool, compile_: bool, reps: int,
              tol: float, rounds: int = 7, frontend: str = "script") -> ZooResult:
    """One model's row: ``frontend`` "script" (``graphfuser.script``, next to ``torch.jit.script``)
    or "compile" (the ``torch.compile`` backend; no TorchScript needed, its column stays empty)."""
    import graphfuser

    res = ZooResult(name)
    t0 = time.perf_counter()
    try:
        torch.manual_seed(0)
        model, size = build(name)
        model = model.to(device)
        jit = None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                jit = torch.jit.script(model)
        except Exception as e:  # noqa: BLE001
            if frontend == "script":
                res.status, res.error = "not_scriptable", f"{type(e).__name__}: {str(e).splitlines()[0]}"
                return res
        with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if frontend == "compile":
                from ..executor.fusion import live_fusion_groups

                gc.collect()
                before = live_fusion_groups()
            sf = graphfuser.script(model) if frontend == "script" else _through_backend(model)
            worst = 0.0
            with _exact_fp32():
                for b, calls in ((2, 4), (3, 3)):
                    x = torch.randn(b, *size, device=device)
                    want = model(x)
                    for _ in range(calls):
                        got = sf(x)
                        worst = max(worst, rel_err(got, want))
            res.max_rel_err = worst
            if frontend == "script":
                res.groups, res.fused_nodes = fusion_stats(sf)
            else:
                res.groups = live_fusion_groups() - before
            res.warnings = sorted({str(w.message).splitlines()[0][:200] for w in caught
                                   if "graphfuser" in str(w.message)})[:10]
            res.status = "ok" if worst <= tol else "mismatch"
            if do_time and res.status == "ok":
                x = torch.randn(batch, *size, device=device)
                res.__dict__.update({k: v for k, v in _timings(model, jit, sf, x, device, compile_, reps, rounds).items()
                                     if k in res.__dict__})
                if device == "cuda" and any(h in name for h in TRANSFORMER_HINTS):
                    with torch.autocast("cuda", dtype=torch.bfloat16):
                        sf16 = graphfuser.script(model) if frontend == "script" else _through_backend(model)
                        for _ in range(3):
                            sf16(x)
                        # torch.jit.script's own executor segfaults under CUDA autocast on models
                        # with nn.MultiheadAttention (torch 2.11, torchvision vit_b_16; eager and
                        # graphfuser run): its bf16 column is left empty there, never the run lost
                        mha = any(isinstance(mod, torch.nn.MultiheadAttention) for mod in model.modules())
                        res.bf16 = _timings(model, None if mha else jit, sf16, x, device, compile_, reps, rounds)
    except Exception as e:  # noqa: BLE001 - one model's failure is its row
        res.status = "error"
        tb = traceback.format_exception(e)
        res.error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:500]
        res.warnings.append("".join(tb[-3:])[-800:])
    finally:
        res.seconds = round(time.perf_counter() - t0, 2)
        if device == "cuda":
            torch.cuda.empty_cache()
    return res


# -- node kinds ------------------------------------------------------------------------------------
def node_kinds(module: torch.nn.Module, counter: collections.Counter) -> None:
    """Add every node kind (with its schema where it has one) of ``module``'s inlined graph."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scripted = torch.jit.script(module)
    graphs = []
    for mname in ["forward"] + [m for m in dir(scripted) if m.startswith("forward__")]:
        fn = getattr(scripted, mname, None)
        if fn is not None and hasattr(fn, "graph"):
            graphs.append(fn.graph.copy())
    for g in graphs:
        torch._C._jit_pass_inline(g)
        stack = [g.block()]
        while stack:
            b = stack.pop()
            for n in b.nodes():
                try:
                    schema = str(n.schema()) if n.kind().startswith("aten::") else ""
                except RuntimeError:
                    schema = ""
                counter[f"{n.kind()}|{schema}"] += 1
                stack.extend(n.blocks())


def kind_sources() -> list[str]:
    """Every model whose graph contributes node kinds: the zoo plus torchvision's segmentation
    and detection models."""
    import torchvision

    names = model_names(None)
    names += [f"tv-seg:{n}" for n in torchvision.models.list_models(module=torchvision.models.segmentation)]
    names += [f"tv-det:{n}" for n in torchvision.models.list_models(module=torchvision.models.detection)]
    return names


def collect_kinds(names: list[str], out: str) -> None:
    counter: collections.Counter = collections.Counter()
    failed = {}
    for name in names:
        try:
            model, _ = build(name)
            node_kinds(model, counter)
        except Exception as e:  # noqa: BLE001
            failed[name] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
    with open(out, "w") as f:
        json.dump({"kinds": dict(counter.most_common()), "not_scripted": failed}, f, indent=1)
    print(f"{len(counter)} node kinds from {len(names) - len(failed)} models -> {out}")


# -- reports ---------------------------------------------------------------------------------------
def _fmt(v: Optional[float]) -> str:
    return "–" if v is None else f"{v:.2f}"


def markdown(results: list[ZooResult], title: str) -> str:
    counts = collections.Counter(r.status for r in results)
    scripted = [r for r in results if r.status != "not_scriptable"]
    fused = sum(1 for r in scripted if r.groups > 0)
    lines = [f"# {title}", "",
             f"{len(results)} models: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
             + f"; {fused}/{len(scripted)} scriptable models have a fusion group.", "",
             "| model | status | groups | fused nodes | max rel err | eager ms | jit ms | compile ms | graphfuser ms |"
             " error |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        err = (r.error or "").replace("|", "\\|")[:120]
        rel = "–" if r.max_rel_err is None else f"{r.max_rel_err:.1e}"
        lines.append(f"| {r.model} | {r.status} | {r.groups} | {r.fused_nodes} | {rel} | {_fmt(r.eager_ms)} | "
                     f"{_fmt(r.jit_ms)} | {_fmt(r.compile_ms)} | {_fmt(r.graphfuser_ms)} | {err} |")
    bf = [r for r in results if r.bf16]
    if bf:
        lines += ["", "bf16 under torch.autocast:", "", "| model | eager ms | jit ms | compile ms | graphfuser ms |",
                  "|---|---|---|---|---|"]
        for r in bf:
            b = r.bf16
            lines.append(f"| {r.model} | {_fmt(b.get('eager_ms'))} | {_fmt(b.get('jit_ms'))} | "
                         f"{_fmt(b.get('compile_ms'))} | {_fmt(b.get('graphfuser_ms'))} |")
    return "\n".join(lines) + "\n"


def device_tag(device: str) -> str:
    if device != "cuda":
        return device
    name = torch.cuda.get_device_name()
    m = re.search(r"(H100|H200|A100|L4|L40S?|A10G?|V100|T4|RTX \w+)", name)
    return f"cuda-{(m.group(1) if m else name).replace(' ', '')}"


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--train" in argv:
        from .zoo_train import main as train_main

        return train_main(argv)
    p = argparse.ArgumentParser(prog="zoo", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--models", default=None, help="comma list (timm:name for timm); default: the whole zoo")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--time", action="store_true", help="time eager / jit / graphfuser at --batch")
    p.add_argument("--compile", action="store_true", help="also time torch.compile (slow to build)")
    p.add_argument("--reps", type=int, default=20, help="calls per backend at least (spread over the rounds)")
    p.add_argument("--rounds", type=int, default=7, help="interleaved rounds; each backend's time is their median")
    p.add_argument("--tol", type=float, default=1e-3, help="largest ||got - eager|| / ||eager|| for ok")
    p.add_argument("--out", default="logs")
    p.add_argument("--tag", default=None, help="file name tag (default: device and GPU)")
    p.add_argument("--kinds", default=None, help="only collect node kinds into this JSON file")
    p.add_argument("--budget", type=float, default=0, help="stop starting new models after this many seconds")
    p.add_argument("--offset", type=int, default=0, help="skip the first N models of the list (split long runs)")
    p.add_argument("--frontend", choices=("script", "compile"), default="script",
                   help="graphfuser.script, or torch.compile(model, backend='graphfuser')")
    args = p.parse_args(argv)
    names = model_names(args.models)[args.offset:]
    if args.kinds:
        collect_kinds(names if args.models else kind_sources(), args.kinds)
        return 0
    os.makedirs(args.out, exist_ok=True)
    tag = args.tag or device_tag(args.device) + ("-compile" if args.frontend == "compile" else "")
    path = os.path.join(args.out, f"zoo-{tag}")
    results: list[ZooResult] = []
    start = time.perf_counter()
    for name in names:
        if args.budget and time.perf_counter() - start > args.budget:
            print(f"budget reached: {len(names) - len(results)} models not run")
            break
        r = run_model(name, args.device, args.batch, args.time, args.compile, args.reps, args.tol, args.rounds,
                      args.frontend)
        if args.device == "cuda":
            # a scripted model lives in reference cycles (its host program's call sites point back
            # at it): collected now, its CUDA graphs' memory pools go before the next model (vgg19
            # ran out of memory after 79 models had left 70 GiB in private pools)
            gc.collect()
            torch.cuda.empty_cache()
        results.append(r)
        print(f"{r.model:40s} {r.status:14s} groups={r.groups:3d} err={r.max_rel_err} "
              f"{_fmt(r.eager_ms)}/{_fmt(r.jit_ms)}/{_fmt(r.compile_ms)}/{_fmt(r.graphfuser_ms)} ms "
              f"{r.seconds:.0f}s {r.error or ''}", flush=True)
        with open(path + ".json", "w") as f:
            json.dump({"device": args.device, "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None,
                       "torch": torch.__version__, "batch": args.batch, "models": [asdict(x) for x in results]},
                      f, indent=1)
    with open(path + ".md", "w") as f:
        f.write(markdown(results, f"graphfuser model zoo on {tag} (torch {torch.__version__})"))
    print(markdown(results, tag).split("\n")[2])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
