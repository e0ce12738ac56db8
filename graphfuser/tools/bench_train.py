"""Training benchmark (``tools/bench.py --train``): forward + backward per call, side by side.

    python tools/bench.py --device cuda --train     # writes logs/bench-train-cuda-<gpu>.json + .md
    python tools/bench.py --device cpu --train
    python -m graphfuser bench_train --device cpu   # the same (also tools/bench_train.py)

Each case is a function or module whose floating inputs (and parameters) require grad; one call
is ``out = f(*args); out.backward(grad)`` with a fixed upstream gradient, so the time covers the
forward, the saved values and the backward. Backends: eager, ``torch.jit.script``,
``torch.compile`` and graphfuser, in one process on one device. Where a case has no randomness
the gradients of every backend are compared with eager's before timing (a mismatch is reported in
the table, never hidden). The backends are then timed in turns: seven rounds, each timing a block
of calls of every backend (20 on CUDA, events around the block), and each backend's time is the
median of its rounds. Benchmarks never assert.
"""
from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from .timing import cuda_ms_per_call, sync


# -- cases ---------------------------------------------------------------------------------------
def sig_tanh(x, y):
    return torch.sigmoid(x * y + 2.0) * torch.tanh(x - y)


def bias_gelu(x, b):
    return F.gelu(x + b, approximate="tanh")


def swiglu(a, b):
    return F.silu(a) * b


def softmax_mask_dropout(x, mask):
    return F.dropout(F.softmax(x.masked_fill(mask, float("-inf")), dim=-1), 0.1, training=True)


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return y.to(x.dtype) * self.weight


class BnRelu(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(c)

    def forward(self, x):
        return F.relu(self.bn(x))


class MLPBlock(nn.Module):
    """LayerNorm -> Linear -> GELU -> Linear -> dropout -> residual."""

    def __init__(self, d: int, hidden: int, p: float = 0.1) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, d)
        self.drop = nn.Dropout(p)

    def forward(self, x):
        return x + self.drop(self.fc2(F.gelu(self.fc1(self.norm(x)))))


class Bottleneck(nn.Module):
    """ResNet-50's bottleneck block (1x1 -> 3x3 -> 1x1, BN + ReLU, identity residual)."""

    def __init__(self, c: int, mid: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c, mid, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(mid)
        self.conv2 = nn.Conv2d(mid, mid, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(mid)
        self.conv3 = nn.Conv2d(mid, c, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(c)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + x)


@dataclass
class TrainCase:
    name: str
    fn: Any                                   # function or module factory output
    make: Callable[[str], tuple]
    exact: bool = True                        # no randomness: gradients are compared with eager
    autocast: Optional[torch.dtype] = None
    extra: dict = field(default_factory=dict)


def _r(*shape, dtype=torch.float32, device="cpu", grad=True, channels_last=False):
    t = torch.randn(*shape, device=device).to(dtype)
    if channels_last:
        t = t.contiguous(memory_format=torch.channels_last)
    return t.requires_grad_(grad)


def cases(device: str) -> list[TrainCase]:
    if device == "cpu":
        n = 4 * 1024 * 1024
        return [
            TrainCase("sigmoid(x*y+2)*tanh(x-y) f32 4M", sig_tanh, lambda d: (_r(n, device=d), _r(n, device=d))),
            TrainCase("bias+gelu(tanh) f32 [2048,1024]", bias_gelu,
                      lambda d: (_r(2048, 1024, device=d), _r(1024, device=d))),
            TrainCase("SwiGLU f32 [2048,1024]", swiglu, lambda d: (_r(2048, 1024, device=d), _r(2048, 1024, device=d))),
            TrainCase("RMSNorm f32 [2048,1024]", RMSNorm(1024), lambda d: (_r(2048, 1024, device=d),)),
            TrainCase("BN(train)+ReLU f32 CL [8,64,28,28]", BnRelu(64),
                      lambda d: (_r(8, 64, 28, 28, device=d, channels_last=True),)),
            TrainCase("MLP block f32 [512,256]", MLPBlock(256, 1024), lambda d: (_r(512, 256, device=d),), exact=False),
            TrainCase("ResNet bottleneck f32 CL [4,256,28,28]", Bottleneck(256, 64),
                      lambda d: (_r(4, 256, 28, 28, device=d, channels_last=True),)),
        ]
    bf = torch.bfloat16
    return [
        TrainCase("sigmoid(x*y+2)*tanh(x-y) f32 64M", sig_tanh,
                  lambda d: (_r(64 * 1024 * 1024, device=d), _r(64 * 1024 * 1024, device=d))),
        TrainCase("RMSNorm bf16 [16384,4096]", RMSNorm(4096), lambda d: (_r(16384, 4096, dtype=bf, device=d),)),
        TrainCase("softmax+mask+dropout bf16 [256,512,512]", softmax_mask_dropout,
                  lambda d: (_r(256, 512, 512, dtype=bf, device=d),
                             torch.rand(512, 512, device=d) > 0.9), exact=False),
        TrainCase("bias+GELU bf16 [16384,8192]", bias_gelu,
                  lambda d: (_r(16384, 8192, dtype=bf, device=d), _r(8192, dtype=bf, device=d))),
        TrainCase("SwiGLU bf16 [16384,8192]", swiglu,
                  lambda d: (_r(16384, 8192, dtype=bf, device=d), _r(16384, 8192, dtype=bf, device=d))),
        TrainCase("BN(train)+ReLU f32 CL [64,256,56,56]", BnRelu(256),
                  lambda d: (_r(64, 256, 56, 56, device=d, channels_last=True),)),
        TrainCase("BN(train)+ReLU f32 NCHW [64,256,56,56]", BnRelu(256),
                  lambda d: (_r(64, 256, 56, 56, device=d),)),
        TrainCase("MLP block bf16 autocast [8192,1024]", MLPBlock(1024, 4096),
                  lambda d: (_r(8192, 1024, device=d),), exact=False, autocast=bf),
        TrainCase("ResNet bottleneck bf16 autocast CL [32,256,56,56]", Bottleneck(256, 64),
                  lambda d: (_r(32, 256, 56, 56, device=d, channels_last=True),), autocast=bf),
    ]


# -- running -------------------------------------------------------------------------------------
def _grads(module: Optional[nn.Module], args: tuple) -> list[Optional[torch.Tensor]]:
    ts = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    if module is not None:
        ts += [p for p in module.parameters() if p.requires_grad]
    return [t.grad for t in ts]


def _zero(module: Optional[nn.Module], args: tuple) -> None:
    for a in args:
        if isinstance(a, torch.Tensor):
            a.grad = None
    if module is not None:
        for p in module.parameters():
            p.grad = None


def grad_rel_err(got: list[Optional[torch.Tensor]], ref: list[Optional[torch.Tensor]]) -> float:
    """The largest ``||got - ref|| / ||ref||`` over the gradients; inf where one side has none."""
    worst = 0.0
    for a, b in zip(got, ref):
        if a is None or b is None:
            worst = float("inf") if (a is None) != (b is None) else worst
            continue
        den = b.double().norm().item() or 1.0
        worst = max(worst, (a.double() - b.double()).norm().item() / den)
    return worst


def reference_grads(case: TrainCase, module: Optional[nn.Module], args: tuple,
                    device: str) -> tuple[torch.Tensor, list[Optional[torch.Tensor]]]:
    """A fixed upstream gradient for the case's output, and eager's gradients for it."""
    ref_out = (case.fn(*args) if case.autocast is None else _autocast_call(case, args, device))
    grad = torch.randn_like(ref_out)
    _zero(module, args)
    ref_out.backward(grad)
    return grad, [g.clone() if g is not None else None for g in _grads(module, args)]


def _step(f: Callable, args: tuple, grad: torch.Tensor, autocast: Optional[torch.dtype], device: str) -> Any:
    if autocast is not None:
        with torch.autocast(device, dtype=autocast):
            out = f(*args)
    else:
        out = f(*args)
    out.backward(grad)
    return out


def _block_ms(fn: Callable[[], Any], device: str, iters: int) -> float:
    """Mean ms per call over ``iters`` back-to-back calls (CUDA: events around the block, so a
    host-bound step shows its host time and a device-bound one its kernels' time)."""
    if device == "cuda":
        sync(device)
        return cuda_ms_per_call(fn, iters)
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        fn()
        times.append(1e3 * (time.perf_counter() - t))
    return statistics.median(times)


ROUNDS = 7


def _time_interleaved(steps: dict[str, Callable[[], Any]], device: str, iters: int) -> dict[str, float]:
    """Median over ``ROUNDS`` rounds of a block per backend, the backends taking turns in each
    round: a host whose speed drifts during the run (other tenants, clocks) moves every backend's
    rounds alike instead of favouring whichever was timed first."""
    for fn in steps.values():
        for _ in range(3):
            fn()
    times: dict[str, list[float]] = {n: [] for n in steps}
    for _ in range(ROUNDS):
        for n, fn in steps.items():
            times[n].append(_block_ms(fn, device, iters))
    return {n: statistics.median(t) for n, t in times.items()}


def run_case(case: TrainCase, device: str, backends: Callable[[Any, str], dict]) -> dict:
    """Each backend's first calls and gradients against eager's, then all of them timed in
    interleaved rounds (``_time_interleaved``)."""
    module = case.fn.to(device) if isinstance(case.fn, nn.Module) else None
    if module is not None:
        module.train()
    args = case.make(device)
    grad, ref = reference_grads(case, module, args, device)
    row: dict = {"case": case.name, "backends": {}}
    steps: dict[str, Callable[[], Any]] = {}
    for name, f in backends(case.fn, device).items():
        try:
            _zero(module, args)
            t0 = time.perf_counter()
            for _ in range(4):          # profiling runs, then the optimized program
                _zero(module, args)
                _step(f, args, grad, case.autocast, device)
            warm = time.perf_counter() - t0
            entry: dict = {"first_calls_s": warm}
            if case.exact:
                entry["grad_rel_err"] = grad_rel_err(_grads(module, args), ref)
            step = (lambda f=f: (_zero(module, args), _step(f, args, grad, case.autocast, device)))
            step()                      # a failure here drops the backend before the timed rounds
            steps[name] = step
            if name == "graphfuser":
                from .zoo_train import fused_groups

                ctx = torch.autocast(device, dtype=case.autocast) if case.autocast else torch.autocast(device,
                                                                                                       enabled=False)
                with ctx:
                    entry["fused_groups"], entry["backward_groups"] = fused_groups(f)
        except Exception as e:  # noqa: BLE001
            entry = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
        row["backends"][name] = entry
    try:
        for name, ms in _time_interleaved(steps, device, 20 if device == "cuda" else 5).items():
            row["backends"][name]["ms"] = ms
    except Exception as e:  # noqa: BLE001
        for name in steps:
            row["backends"][name] = {"error": f"timing: {type(e).__name__}: {str(e)[:200]}"}
    return row


def _autocast_call(case: TrainCase, args: tuple, device: str) -> Any:
    with torch.autocast(device, dtype=case.autocast):
        return case.fn(*args)


def render(results: dict) -> str:
    from .bench import BACKENDS, cell

    names = BACKENDS
    lines = [f"# graphfuser training benchmark (forward + backward) on {results['device_name']} ({results['torch']})",
             "", "ms per forward+backward; grad rel err vs eager in brackets where the case has no randomness.", "",
             "| case | " + " | ".join(names) + " | graphfuser vs eager | vs torch.compile | fwd / bwd groups |",
             "|" + "---|" * (len(names) + 4)]
    for row in results["cases"]:
        cells = [cell(row["backends"].get(n, {}),
                      lambda e: f"{e['ms']:.3f}" + (f" [{e['grad_rel_err']:.0e}]" if "grad_rel_err" in e else ""))
                 for n in names]
        b = row["backends"]
        gf = b.get("graphfuser", {}).get("ms")
        ea = b.get("eager", {}).get("ms")
        tc = b.get("torch.compile", {}).get("ms")
        lines.append(f"| {row['case']} | " + " | ".join(cells) + f" | {f'{ea / gf:.2f}x' if gf and ea else '-'} | "
                     f"{f'{tc / gf:.2f}x' if gf and tc else '-'} | "
                     f"{b.get('graphfuser', {}).get('fused_groups', '-')} / {b.get('graphfuser', {}).get('backward_groups', '-')} |")
    return "\n".join(lines) + "\n"


def main(argv: Optional[list[str]] = None) -> int:
    """``bench --train``: the training cases through every backend (see ``bench``'s flags)."""
    from .bench import main as bench_main

    return bench_main(["--train", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
