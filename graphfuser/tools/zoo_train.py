"""Training through graphfuser on zoo models: a few SGD steps, eager and graphfuser side by side.

    python tools/zoo.py --train --device cuda --models resnet50,timm:vit_small_patch16_224,timm:convnext_tiny
    python tools/zoo.py --train --device cpu --models resnet18 --batch 4 --image-size 64 --steps 3
    python tools/zoo.py --train --device cpu --models timm:vit_small_patch16_224 --timm-kwargs '{"depth": 2}'

Per model: two copies from the same initial weights (``copy.deepcopy``), the same data (a fixed
random batch and labels), the same optimizer (SGD with momentum); each step is ``zero_grad``,
forward under ``torch.autocast`` (``--amp bf16``, the default on CUDA; ``--amp none`` runs fp32),
cross entropy in fp32, backward, ``step``. Eager and ``graphfuser.script`` train in turns of
``--block`` consecutive steps (default 4; which goes first alternates), so both see the same
device state over the run while each runs as a training loop does, step after step of one model:
alternating single steps ran each step after the other model's, with the host's caches full of
that model's work, and cost the host-bound side most (H100 host, resnet50 bf16, batch 64, in one
process: graphfuser 0.98x / 0.96x of eager alternating single steps, 1.10x / 1.04x in turns of
4). Eager's steps run with autograd's threading as it was before graphfuser turned it off
(``--eager-threads default``): graphfuser turns autograd's device threads off process-wide once a
CUDA group runs under grad (``autodiff/function.py``), and an eager model trained in another
process keeps them; ``--eager-threads as-is`` lets eager's steps share graphfuser's setting.
Reported per model: the losses of every step of both, ms per step
after the first ``--warmup`` steps (the median), and the fusion groups of graphfuser's forward and
of its backward graphs.

When the losses must agree. In fp32 both run the same arithmetic up to summation order: every
step's loss within ``--tol`` (relative, default 1e-3). Under autocast, rounding to bf16 / fp16
is far larger than that and compounds over steps (one batch, trained towards a loss near 0, so
late steps' relative differences grow), and any change of summation order or of where a value is
rounded moves the trajectory. The yardstick is then eager's own rounding: a third copy trains
eagerly in fp32 from the same weights, and step ``k`` passes when
``|graphfuser_k - eager_k| <= (tol + 2 * noise_k) * |eager_k|``, where ``noise_k`` is the largest
``|eager_j - fp32_j| / |eager_j|`` over steps ``j <= k``: graphfuser under autocast may lie as far
from eager as two trajectories that are each as far from fp32 as eager is (``tol``, default
2e-2, stays as a floor for the first steps, where the trajectories have not yet diverged). Writes
``logs/zoo-train-<device>[-<gpu>].json`` and a markdown table beside it.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import os
import statistics
import time
import traceback
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F

from .timing import sync as _sync


@dataclass
class TrainResult:
    model: str
    status: str = "error"                     # ok | mismatch | error
    amp: str = "none"
    eager_losses: list = field(default_factory=list)
    graphfuser_losses: list = field(default_factory=list)
    fp32_losses: list = field(default_factory=list)   # eager without autocast (autocast runs only)
    max_loss_rel_diff: Optional[float] = None
    max_amp_noise: Optional[float] = None     # largest |eager - fp32| / |eager| (autocast runs only)
    eager_ms: Optional[float] = None          # median ms per step after warmup
    graphfuser_ms: Optional[float] = None
    eager_step_ms: list = field(default_factory=list)        # every step's ms, warmup included
    graphfuser_step_ms: list = field(default_factory=list)
    forward_groups: int = 0
    backward_groups: int = 0
    error: Optional[str] = None
    seconds: float = 0.0


def _logits(out: Any) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, dict):
        return out["out"] if "out" in out else next(iter(out.values()))
    return out[0]


def _amp(device: str, amp: str):
    if amp == "none":
        return contextlib.nullcontext()
    return torch.autocast(device, dtype={"bf16": torch.bfloat16, "fp16": torch.float16}[amp])


class Trainer:
    """One copy of a model with its SGD optimizer, run eagerly or through ``graphfuser.script``;
    :meth:`step` runs one synchronized training step and records its loss and wall ms."""

    def __init__(self, model: torch.nn.Module, amp: str, lr: float, script: bool,
                 threads: Optional[bool] = None) -> None:
        model.train()
        self.threads = threads      # autograd's multithreading during a step (None: as it is)
        self.fn: Callable = model
        if script:
            import graphfuser

            self.fn = graphfuser.script(model)
        self.amp = amp
        self.opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
        self.losses: list[float] = []
        self.times: list[float] = []

    def step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        device = x.device.type
        _sync(device)
        t0 = time.perf_counter()
        with contextlib.ExitStack() as stack:
            if self.threads is not None:
                stack.enter_context(torch.autograd.set_multithreading_enabled(self.threads))
            self.opt.zero_grad(set_to_none=True)
            with _amp(device, self.amp):
                out = _logits(self.fn(x))
            loss = F.cross_entropy(out.float(), y)
            loss.backward()
            self.opt.step()
        _sync(device)
        self.times.append(1e3 * (time.perf_counter() - t0))
        self.losses.append(loss.item())


def train_steps(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int, amp: str, lr: float,
                script: bool) -> tuple[list[float], list[float], Any]:
    """``steps`` SGD steps of ``model`` (in place) on one batch; (losses, ms per step, callable)."""
    t = Trainer(model, amp, lr, script)
    for _ in range(steps):
        t.step(x, y)
    return t.losses, t.times, t.fn


def fused_groups(sf: Any) -> tuple[int, int]:
    """(fusion groups of the forward's optimized graph under the current autocast state, fusion
    groups of the backward graphs of its differentiable groups)."""
    from ..autodiff.function import DifferentiableGroup

    inner = sf._specialized() if getattr(sf, "_variants", None) is not None else sf
    g = getattr(inner, "_optimized", None)
    if g is None:
        return 0, 0
    fwd = [n for n in g.all_nodes() if n.kind.endswith("FusionGroup")]
    bwd = 0
    for r in getattr(inner, "_runners", {}).values():
        if isinstance(r, DifferentiableGroup) and r.backward._optimized is not None:
            bwd += sum(1 for n in r.backward._optimized.all_nodes() if n.kind.endswith("FusionGroup"))
    return len(fwd), bwd


def compare(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int = 4, amp: str = "none",
            lr: float = 0.01, warmup: int = 2, tol: float = 1e-3, name: str = "model", block: int = 4,
            eager_threads: str = "default") -> TrainResult:
    """Train two copies of ``model`` (eager and graphfuser) from the same weights on ``x, y``;
    under autocast a third, eager in fp32, measures autocast's own rounding (module docstring)."""
    res = TrainResult(name, amp=amp)
    eager = copy.deepcopy(model)
    fused = copy.deepcopy(model)
    threads = default_multithreading() if eager_threads == "default" else None
    te, tg = Trainer(eager, amp, lr, script=False, threads=threads), Trainer(fused, amp, lr, script=True)
    k = 0
    while len(te.losses) < steps:   # turns of ``block`` steps each; which goes first alternates
        for t in ((te, tg) if k % 2 == 0 else (tg, te)):
            for _ in range(min(block, steps - len(t.losses))):
                t.step(x, y)
        k += 1
    res.eager_losses, res.graphfuser_losses, sf = te.losses, tg.losses, tg.fn
    if amp != "none":
        res.fp32_losses, _, _ = train_steps(copy.deepcopy(model), x, y, steps, "none", lr, script=False)
    allowed = loss_tolerances(res.eager_losses, res.fp32_losses, tol)
    diffs = [abs(a - b) / max(abs(a), 1e-6) for a, b in zip(res.eager_losses, res.graphfuser_losses)]
    res.max_loss_rel_diff = max(diffs) if diffs else None
    if res.fp32_losses:
        res.max_amp_noise = (allowed[-1] - tol) / 2
    finite = all(math.isfinite(v) for v in res.graphfuser_losses)
    res.status = "ok" if finite and diffs and all(d <= a for d, a in zip(diffs, allowed)) else "mismatch"
    if steps > warmup:
        res.eager_ms = statistics.median(te.times[warmup:])
        res.graphfuser_ms = statistics.median(tg.times[warmup:])
    res.eager_step_ms = [round(t, 3) for t in te.times]
    res.graphfuser_step_ms = [round(t, 3) for t in tg.times]
    with _amp(x.device.type, amp):
        res.forward_groups, res.backward_groups = fused_groups(sf)
    return res


def default_multithreading() -> bool:
    """autograd's multithreading as it was before graphfuser turned it off in this process."""
    from ..autodiff.function import MULTITHREADING_BEFORE

    before = MULTITHREADING_BEFORE[0]
    return torch.autograd.is_multithreading_enabled() if before is None else before


def loss_tolerances(eager: list[float], fp32: list[float], tol: float) -> list[float]:
    """Per step, the largest relative difference allowed between graphfuser's and eager's loss:
    ``tol`` without an fp32 reference, else ``tol + 2 * noise_k`` (module docstring)."""
    if not fp32:
        return [tol] * len(eager)
    out, noise = [], 0.0
    for e, f in zip(eager, fp32):
        noise = max(noise, abs(e - f) / max(abs(e), 1e-6))
        out.append(tol + 2 * noise)
    return out


def _build(name: str, image_size: Optional[int], timm_kwargs: dict) -> tuple[torch.nn.Module, tuple, int]:
    if name.startswith("timm:"):
        import timm

        kw = dict(timm_kwargs)
        if image_size and "img_size" not in kw and any(h in name for h in ("vit", "deit")):
            kw["img_size"] = image_size
        m = timm.create_model(name[5:], pretrained=False, **kw)
        cfg = getattr(m, "pretrained_cfg", None) or {}
        size = tuple(cfg.get("input_size", (3, 224, 224)))
        classes = getattr(m, "num_classes", 1000)
    else:
        from .zoo import build

        m, size = build(name)
        classes = 1000
    if image_size:
        size = (size[0], image_size, image_size)
    return m, size, classes


def run_model(name: str, device: str, batch: int, steps: int, amp: str, lr: float, tol: float,
              image_size: Optional[int], timm_kwargs: dict, warmup: int, block: int = 4,
              eager_threads: str = "default") -> TrainResult:
    t0 = time.perf_counter()
    try:
        torch.manual_seed(0)
        model, size, classes = _build(name, image_size, timm_kwargs)
        model = model.to(device)
        x = torch.randn(batch, *size, device=device)
        y = torch.randint(0, classes, (batch,), device=device)
        res = compare(model, x, y, steps, amp, lr, warmup, tol, name, block, eager_threads)
    except Exception as e:  # noqa: BLE001 - one model's failure is its row
        res = TrainResult(name, amp=amp, error=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        traceback.print_exc()
    res.seconds = time.perf_counter() - t0
    return res


def _fmt(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.2f}"


def markdown(results: list[TrainResult], title: str) -> str:
    lines = [f"# {title}", "", "| model | amp | status | eager ms/step | graphfuser ms/step | speedup | fwd groups | "
             "bwd groups | max loss rel diff | max autocast noise | losses (eager / graphfuser [/ fp32]) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        speed = (r.eager_ms / r.graphfuser_ms) if r.eager_ms and r.graphfuser_ms else None
        ref = r.fp32_losses or [None] * len(r.eager_losses)
        losses = " ".join(f"{a:.4f}/{b:.4f}" + ("" if c is None else f"/{c:.4f}")
                          for a, b, c in zip(r.eager_losses, r.graphfuser_losses, ref))
        lines.append(f"| {r.model} | {r.amp} | {r.status} | {_fmt(r.eager_ms)} | {_fmt(r.graphfuser_ms)} | "
                     f"{_fmt(speed)}x | {r.forward_groups} | {r.backward_groups} | "
                     f"{'-' if r.max_loss_rel_diff is None else f'{r.max_loss_rel_diff:.2e}'} | "
                     f"{'-' if r.max_amp_noise is None else f'{r.max_amp_noise:.2e}'} | "
                     f"{losses or (r.error or '')} |")
    return "\n".join(lines) + "\n"


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="zoo --train", description=__doc__.split("\n\n")[0])
    p.add_argument("--train", action="store_true", help="(selects this tool in tools/zoo.py)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--models", default="resnet50,timm:vit_small_patch16_224,timm:convnext_tiny")
    p.add_argument("--batch", type=int, default=None, help="default: 32 on CUDA, 4 on the CPU")
    p.add_argument("--steps", type=int, default=None, help="default: 8 on CUDA, 3 on the CPU")
    p.add_argument("--warmup", type=int, default=2, help="steps left out of the step time")
    p.add_argument("--block", type=int, default=4, help="consecutive steps of one model per turn")
    p.add_argument("--eager-threads", choices=("default", "as-is"), default="default",
                   help="autograd's multithreading in eager's steps: as before graphfuser ran (default) or shared")
    p.add_argument("--amp", choices=("bf16", "fp16", "none"), default=None,
                   help="autocast dtype (default: bf16 on CUDA, none on the CPU)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--tol", type=float, default=None, help="largest relative loss difference (default 1e-3 "
                                                          "in fp32; under autocast 2e-2 plus twice autocast's "
                                                          "own drift from fp32, see the module docstring)")
    p.add_argument("--image-size", type=int, default=None, help="input resolution (default: the model's)")
    p.add_argument("--timm-kwargs", default="{}", help="JSON kwargs for timm.create_model, e.g. '{\"depth\": 2}'")
    p.add_argument("--out", default="logs")
    p.add_argument("--tag", default=None)
    args = p.parse_args(argv)
    cuda = args.device == "cuda"
    batch = args.batch or (32 if cuda else 4)
    steps = args.steps or (8 if cuda else 3)
    amp = args.amp or ("bf16" if cuda else "none")
    tol = args.tol if args.tol is not None else (2e-2 if amp != "none" else 1e-3)
    from .zoo import device_tag

    os.makedirs(args.out, exist_ok=True)
    tag = args.tag or device_tag(args.device)
    path = os.path.join(args.out, f"zoo-train-{tag}")
    results = []
    for name in [s.strip() for s in args.models.split(",") if s.strip()]:
        r = run_model(name, args.device, batch, steps, amp, args.lr, tol, args.image_size,
                      json.loads(args.timm_kwargs), args.warmup, args.block, args.eager_threads)
        results.append(r)
        print(f"{r.model:36s} {r.status:9s} eager {_fmt(r.eager_ms)} ms graphfuser {_fmt(r.graphfuser_ms)} ms "
              f"groups {r.forward_groups}/{r.backward_groups} loss diff {r.max_loss_rel_diff} "
              f"autocast noise {r.max_amp_noise} {r.error or ''}",
              flush=True)
        with open(path + ".json", "w") as f:
            json.dump({"device": args.device, "gpu": torch.cuda.get_device_name() if cuda else None,
                       "torch": torch.__version__, "batch": batch, "steps": steps, "amp": amp,
                       "eager_threads": args.eager_threads,
                       "models": [asdict(x) for x in results]}, f, indent=1)
    with open(path + ".md", "w") as f:
        f.write(markdown(results, f"graphfuser zoo training on {tag} (torch {torch.__version__}, batch {batch}, "
                                  f"{steps} SGD steps, eager's autograd threading: {args.eager_threads})"))
    return 0 if all(r.status == "ok" for r in results) else 1
