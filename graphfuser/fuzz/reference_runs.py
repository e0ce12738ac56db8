"""The programs the fuzz oracle runs beside eager and graphfuser to judge a difference: the float64
reference of a call's gradients, the pipeline with every intermediate correctly rounded to
eager's dtypes, and eager with every intermediate nudged by two ulps (``fuzz/oracle.py``)."""
from __future__ import annotations

import contextlib
from typing import Any, Optional

import torch

from .compare import compare_tensor
from .inputs import _flat, autocast_of, make_args
from .reference import CastCopies, ExactMoments, PerturbedIntermediates, RoundedIntermediates, spread_patched


@contextlib.contextmanager
def _float64_default():
    """The reference promotes integers to float64: an op of an integer input (``sinh`` of int64)
    computes in the default dtype, which float32 would leave as inexact as eager."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def _under_autocast(fn, case: dict, device: str):
    """``fn`` run under the case's autocast."""
    def run(*args: Any) -> Any:
        with autocast_of(case, device):
            return fn(*args)
    return run


def _grad_reference(fn, case: dict, call: int, device: str) -> Optional[tuple[list, list]]:
    """The float64 reference's outputs and inputs, the inputs that require grad as leaves.

    Where its backward would raise because an input written in place had been saved by an op
    that read it through a cast (a no-op cast in float64, a copy in eager's dtypes), the run
    with every cast a copy (``CastCopies``) stands in, if its outputs are the first run's."""
    def run(*modes) -> Optional[tuple[list, list]]:
        args = make_args(case, call, device, ref=True)
        for spec, a in zip(case["inputs"], args):
            if spec.get("requires_grad") and isinstance(a, torch.Tensor) and a.is_floating_point():
                a.requires_grad_(True)
        try:
            with contextlib.ExitStack() as stack:
                for m in modes:
                    stack.enter_context(m)
                stack.enter_context(_float64_default())
                return _flat(fn(*args)), args
        except Exception:  # noqa: BLE001 - no reference: gradients are judged against eager alone
            return None

    first = run(ExactMoments())
    if first is None or not _saved_write_breaks_backward(*first):
        return first
    second = run(ExactMoments(), CastCopies())
    if second is None or len(second[0]) != len(first[0]) or not all(
            _same_value(a, b) for a, b in zip(first[0], second[0])):
        return first
    return second


def _same_value(a: Any, b: Any) -> bool:
    """Bitwise the same output (NaNs where the other has them), or equal non-tensors."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.is_floating_point():
            a, b = a.detach(), b.detach()
            return bool(((a == b) | (a.isnan() & b.isnan())).all())
        return torch.equal(a, b)
    return not isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor) and a == b


def _saved_write_breaks_backward(outs: list, args: list) -> bool:
    """Whether the backward of the floating outputs that require grad to the leaves raises
    autograd's error for a saved tensor written in place."""
    targets = [o for o in outs if isinstance(o, torch.Tensor) and o.is_floating_point() and o.requires_grad]
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad and a.is_leaf]
    if not targets or not leaves:
        return False
    try:
        torch.autograd.grad(targets, leaves, [torch.zeros_like(o) for o in targets], retain_graph=True,
                            allow_unused=True)
    except RuntimeError as e:
        return "modified by an inplace operation" in str(e)
    return False


def _rounded_pipeline_agrees(fn, case: dict, call: int, device: str, cache: list, where: int,
                             g: torch.Tensor, e: torch.Tensor, low_eps: float, floor: float) -> bool:
    """graphfuser's value passes against the float64 reference with every intermediate rounded to
    eager's dtypes (``RoundedIntermediates``), its normalizations' deviations taken from the exact
    mean or from the mean rounded as a kernel holds it (``ExactMoments``; ``where``: output
    position, or ``-1 - k`` for input k after the call; ``cache`` holds those references once
    computed for the call)."""
    for k, rounded_mean in enumerate((False, True)):
        if len(cache) <= k:
            args = make_args(case, call, device)
            try:
                with torch.no_grad(), autocast_of(case, device), \
                        ExactMoments(stages=True, rounded_mean=rounded_mean), RoundedIntermediates():
                    cache.append((_flat(fn(*args)), args))
            except Exception:  # noqa: BLE001 - no rounded reference: the finding stands
                cache.append(None)
        if cache[k] is None:
            continue
        outs, args = cache[k]
        r = outs[where] if 0 <= where < len(outs) else (args[-1 - where] if where < 0 else None)
        if isinstance(r, torch.Tensor) and tuple(r.shape) == tuple(e.shape) and \
                compare_tensor(g, e, r, low_eps, check_strides=False, ref_floor=floor) is None:
            return True
        if not any(n in case["ops"] for n in ("batch_norm", "layer_norm", "instance_norm", "group_norm")):
            return False        # (no normalization: the second reference is the first)
    return False


PERTURBED_RUNS = 6


def perturbed_run(fn, case: dict, call: int, device: str, seed: int, grad: bool = False
                  ) -> Optional[tuple[list, list]]:
    """Eager's outputs and inputs of the call with every floating input and intermediate nudged
    by two ulps (``PerturbedIntermediates`` of ``seed``); inputs that require grad stay leaves
    that do (``grad``: the graph is kept for a backward). None where eager raises."""
    mode = PerturbedIntermediates(seed)
    args = [mode.nudge(a.detach()).requires_grad_(a.requires_grad and grad)
            if isinstance(a, torch.Tensor) and a.is_floating_point() and a.numel() else a
            for a in make_args(case, call, device)]
    try:
        with torch.set_grad_enabled(grad), autocast_of(case, device), mode:
            return _flat(fn(*args)), args
    except Exception:  # noqa: BLE001 - no perturbed run: the finding stands
        return None


def _rounding_spread_covers(fn, case: dict, call: int, device: str, where: int, g: torch.Tensor,
                            e: torch.Tensor, r: Any, low_eps: float, floor: float) -> bool:
    """graphfuser's value passes once the elements where it differs from eager's by no more than
    eager's own value moves when every input and intermediate is nudged by two ulps
    (``perturbed_run``, a few seeds) count as eager's: there the output's last bits are the
    rounding of its intermediates, not a value either side can claim."""
    runs = []
    for seed in range(PERTURBED_RUNS):
        run = perturbed_run(fn, case, call, device, seed)
        if run is None:
            return False
        outs, args = run
        runs.append(outs[where] if 0 <= where < len(outs) else (args[-1 - where] if where < 0 else None))
    g2 = spread_patched(g, e, runs)
    return g2 is not None and compare_tensor(g2, e, r if isinstance(r, torch.Tensor) else None, low_eps,
                                             check_strides=False, ref_floor=floor) is None


def _closer_to_ref(g: Any, e: Any, r: Any) -> bool:
    """graphfuser is at least as close to the float64 reference as eager everywhere (the
    fp32-intermediates deviation makes results more accurate, never less)."""
    if not isinstance(r, torch.Tensor) or tuple(r.shape) != tuple(e.shape):
        return False
    x, y, z = g.detach().cpu().double(), e.detach().cpu().double(), r.detach().cpu().double()
    ok = ((x - z).abs() <= (y - z).abs() * 1.0001 + 1e-300) | (x.isnan() & z.isnan()) | (x == y)
    return bool(ok.all())
