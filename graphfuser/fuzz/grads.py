"""Gradients in the fuzz oracle: a call whose inputs require grad also runs backward.

After a call's outputs compare equal, every floating output that requires grad gets a
deterministic random gradient, and ``torch.autograd.grad`` runs through eager's graph, through
graphfuser's (its differentiable groups' backward graphs) and through the float64 reference
(with exact moments). Each input's gradient is judged as outputs are (``compare_tensor``,
strides not compared: ``.grad`` layouts follow autograd's own rules). A gradient eager leaves
``None`` (the input does not reach the outputs) must be ``None`` or all zeros in graphfuser.
Where eager's backward raises (an input modified in place after autograd saved it), the call's
gradients are not judged: graphfuser's functional rewrite may have nothing left to complain
about, and the forward values were already compared. A graph with an op whose derivative jumps
(``KINKED``) may differ at a few gradient elements (at most 1% of them, or 4) where a forward
value, within rounding of eager's, lands on the other side of a tie or kink: the deviation
``gradient_at_a_kink``, not a failure.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Optional, Sequence

import torch

from .known import layer_norm_inf_grad, layer_norm_overflow_row
from .reference import spread_patched

KINKED = frozenset({"amax", "amin", "max_other", "min_other", "maximum", "minimum", "fmax", "fmin", "relu",
                    "relu6", "leaky_relu", "hardtanh", "clamp", "clamp_min", "clamp_max", "threshold",
                    "hardswish", "hardsigmoid", "inplace:relu_", "inplace:clamp_", "abs"})


def _few(detail: str) -> bool:
    m = re.match(r"(\d+)/(\d+) elements", detail)
    return m is not None and int(m.group(1)) <= max(4, int(m.group(2)) // 100)


def _targets(outs: list) -> list[int]:
    return [i for i, o in enumerate(outs) if isinstance(o, torch.Tensor) and o.is_floating_point() and o.requires_grad]


def _leaves(args: list) -> list[int]:
    return [k for k, a in enumerate(args) if isinstance(a, torch.Tensor) and a.requires_grad and a.is_leaf]


def _grads(outs: list, args: list, idx: list[int], leaves: list[int], gos: list) -> tuple:
    got = torch.autograd.grad([outs[i] for i in idx], [args[k] for k in leaves],
                              [g.to(device=outs[i].device, dtype=outs[i].dtype) for i, g in zip(idx, gos)],
                              allow_unused=True)
    return tuple(got)


def check_grads(case: dict, call: int, fo: list, fe: list, ga: list, ea: list,
                reference: Callable[[], Optional[tuple[list, list]]],
                compare: Callable[[torch.Tensor, torch.Tensor, Optional[torch.Tensor], float],
                                  Optional[tuple[str, str]]],
                perturbed: Optional[Callable[[int], Optional[tuple[list, list]]]] = None, runs: int = 0,
                ints: Optional[Callable[[], Any]] = None,
                dynamo: Optional[Callable[[], Any]] = None,
                scalar_tail: Optional[Callable[[], Any]] = None,
                cpu: Optional[Callable[[], Any]] = None,
                nofma: Optional[Callable[[], Any]] = None) -> Optional[list[dict]]:
    """Findings of the backward of one call (None: not judged; items with a ``deviation`` key are
    deviations) (graphfuser outputs ``fo`` of inputs ``ga``, eager
    ``fe`` of ``ea``); ``reference()`` gives the float64 (outputs, inputs) with leaves that
    require grad, or None; ``compare(g, e, r, go_scale)`` judges one gradient (``go_scale``: the
    largest output gradient's magnitude); ``perturbed(seed)`` gives eager's (outputs, inputs)
    with its intermediates nudged by two ulps (``runs`` seeds): where eager's gradients move by
    as much as graphfuser's differ, the difference is the deviation ``ill_conditioned``.
    ``ints()`` gives eager's (outputs, inputs) of the case with its bool scalars written as ints
    (or an exception): where graphfuser's gradient is that program's, the difference is
    ``torchscript_bool_scalar`` (``pow(x, False)``: eager's backward takes the bool exponent for
    nonzero, TorchScript's graph holds ``pow(x, 0)``). ``dynamo()`` gives Dynamo's own (outputs,
    inputs) of the call (the compile frontend: ``torch.compile`` with its eager backend): where
    graphfuser's gradient is that program's, the difference is ``dynamo_semantics`` (Dynamo
    rewrites ``addcdiv(x, t1, t2, value=v)`` as ``x + v * (t1 / t2)``, whose backward overflows
    where eager's addcdiv formula does not: fuzz graph 591 of seed 33621). ``scalar_tail()`` gives
    eager's (outputs, inputs) with every hardtanh / relu6 differentiated as eager's scalar tail
    does and every hardswish as its vectorized chunks do (``ScalarTailClamps``): where
    graphfuser's gradient is that program's, the difference is ``hardtanh_nan_grad`` (or
    ``hardswish_nan_grad`` in a graph without hardtanh / relu6). ``nofma()`` gives graphfuser's own
    (outputs, inputs) of the call with fused multiply-adds off: where that gradient is judged
    eager's, the difference is ``fma_contraction`` (a multiply-add keeps a product unrounded, and
    in a sum eager cancels exactly that product's rounding error is what is left: fuzz graph 485
    of seed 36702, ``atan2(x, 2 * x)``'s two terms of 1e37)."""
    idx, leaves = _targets(fe), _leaves(ea)
    if not idx or not leaves or _targets(fo) != idx or _leaves(ga) != leaves:
        return None
    gen = torch.Generator().manual_seed(case["seed"] * 7919 + call)
    gos = [torch.randn(tuple(fe[i].shape), generator=gen, dtype=torch.float64).to(fe[i].device) for i in idx]
    # a gradient is a sum of output gradients times local derivatives: where those cancel
    # (d/dx of x * rsqrt(x^2 + eps), 0 up to 1e-12) its rounding is relative to the output
    # gradients' scale, not to its own value (fuzz graph 335 of seed 6161)
    go_scale = max((float(go.abs().max()) for go in gos if go.numel()), default=0.0)
    try:
        ge = _grads(fe, ea, idx, leaves, gos)
    except Exception:  # noqa: BLE001 - eager's backward raises: not judged (see the docstring)
        return None
    try:
        gg = _grads(fo, ga, idx, leaves, gos)
    except Exception as e:  # noqa: BLE001
        msg = f"{type(e).__name__}: {str(e).splitlines()[0][:400] if str(e) else ''}"
        cat = "compile_fallback" if "could not be compiled" in msg else "crash"
        return [{"category": cat, "call": call, "detail": f"backward: {msg}"}]
    gr: Any = None
    ref = reference()
    if ref is not None:
        ro, ra = ref
        try:
            if _targets(ro) == idx and _leaves(ra) == leaves:
                gr = _grads(ro, ra, idx, leaves, gos)
        except Exception:  # noqa: BLE001 - no reference gradient: judged against eager alone
            gr = None
    findings: list[dict] = []
    spread: list = []           # eager's gradients of the perturbed runs, computed once when needed

    def spread_of(n: int) -> Optional[list]:
        if not spread:
            try:
                for seed in range(runs):
                    run = perturbed(seed) if perturbed is not None else None
                    if run is None or _targets(run[0]) != idx or _leaves(run[1]) != leaves:
                        raise ValueError("no perturbed run")
                    spread.append(_grads(run[0], run[1], idx, leaves, gos))
            except Exception:  # noqa: BLE001 - no spread: the finding stands
                spread.append(None)
        return None if not spread or spread[-1] is None else [s[n] for s in spread]

    def other_program(make: Optional[Callable[[], Any]]) -> Callable[[int], Optional[torch.Tensor]]:
        """Gradient ``n`` of the program ``make()`` runs (computed once, on first use), or None."""
        done: list = []

        def grad(n: int) -> Optional[torch.Tensor]:
            if not done:
                try:
                    run = make() if make is not None else None
                    ok = run is not None and not isinstance(run, Exception) and _targets(run[0]) == idx \
                        and _leaves(run[1]) == leaves
                    done.append(_grads(run[0], run[1], idx, leaves, gos) if ok else None)
                except Exception:  # noqa: BLE001 - no such program: the finding stands
                    done.append(None)
            return None if done[0] is None else done[0][n]
        return grad

    ints_grad, dynamo_grad, tail_grad = other_program(ints), other_program(dynamo), other_program(scalar_tail)
    cpu_grad, nofma_grad = other_program(cpu), other_program(nofma)

    for n, k in enumerate(leaves):
        name = case["inputs"][k]["name"] if k < len(case["inputs"]) else str(k)
        g, e = gg[n], ge[n]
        r = gr[n] if gr is not None else None
        if e is None or g is None:
            other = g if e is None else e
            if other is not None and bool((other != 0).any()):
                findings.append({"category": "wrong_grad", "call": call,
                                 "detail": f"grad of {name}: {'None' if g is None else 'a tensor'} vs eager "
                                           f"{'None' if e is None else 'a tensor'}"})
            continue
        diff = compare(g, e, r, go_scale)
        if diff is not None:
            cat, detail = diff
            if cat == "eager_overflow":
                findings.append({"deviation": cat, "call": call, "detail": f"grad of {name}: {detail}"})
                continue
            if cat == "wrong_value" and KINKED & set(case.get("ops", ())) and _few(detail) \
                    and bool((g.isnan() == e.isnan()).all()):       # (a NaN is no side of a kink)
                findings.append({"deviation": "gradient_at_a_kink", "call": call, "detail": f"grad of {name}: {detail}"})
                continue
            if cat == "wrong_value" and _hardswish_nan(case, g, e):
                findings.append({"deviation": "hardswish_nan_grad", "call": call, "detail": f"grad of {name}: {detail}"})
                continue
            if cat == "wrong_value" and (_hardtanh_nan(case, g, e) or (
                    (gt := tail_grad(n)) is not None and compare(g, gt, None, go_scale) is None)):
                clamps = {"hardtanh", "relu6"} & {o.split(":")[-1].rstrip("_") for o in case.get("ops", ())}
                findings.append({"deviation": "hardtanh_nan_grad" if clamps else "hardswish_nan_grad", "call": call,
                                 "detail": f"grad of {name}: {detail}"})
                continue
            if cat == "wrong_value" and _empty_statistics(case, ea, g, e):
                findings.append({"deviation": "empty_statistics_grad", "call": call, "detail": f"grad of {name}: {detail}"})
                continue
            if cat == "wrong_value" and layer_norm_overflow_row(case.get("ops", ()), ea, g, e,
                                                                lambda g2: compare(g2, e, r, go_scale)):
                findings.append({"deviation": "layer_norm_overflow_row", "call": call,
                                 "detail": f"grad of {name}: {detail}"})
                continue
            if cat == "wrong_value" and layer_norm_inf_grad(case.get("ops", ()), ea, g, e,
                                                            lambda g2: compare(g2, e, r, go_scale)):
                findings.append({"deviation": "layer_norm_inf_grad", "call": call, "detail": f"grad of {name}: {detail}"})
                continue
            if cat == "wrong_value" and _rms_norm_nan(case, g, e, lambda g2: compare(g2, e, r, go_scale)) and (
                    (gc := cpu_grad(n)) is not None and compare(g, gc.to(g.device), None, go_scale) is None):
                findings.append({"deviation": "rms_norm_inf_row", "call": call, "detail": f"grad of {name}: {detail}"})
                continue
            if cat == "wrong_value" and runs and (ps := spread_of(n)) is not None \
                    and (g2 := spread_patched(g, e, ps)) is not None and compare(g2, e, r, go_scale) is None:
                findings.append({"deviation": "ill_conditioned", "call": call, "detail": f"grad of {name}: {detail}"})
                continue
            if cat == "wrong_value" and (gi := ints_grad(n)) is not None and compare(g, gi, None, go_scale) is None:
                findings.append({"deviation": "torchscript_bool_scalar", "call": call, "detail": f"grad of {name}: {detail}"})
                continue
            if cat == "wrong_value" and (gd := dynamo_grad(n)) is not None and compare(g, gd, None, go_scale) is None:
                findings.append({"deviation": "dynamo_semantics", "call": call, "detail": f"grad of {name}: {detail}"})
                continue
            if cat == "wrong_value" and (gm := nofma_grad(n)) is not None and compare(gm, e, r, go_scale) is None:
                findings.append({"deviation": "fma_contraction", "call": call, "detail": f"grad of {name}: {detail}"})
                continue
            findings.append({"category": "wrong_grad" if cat == "wrong_value" else cat, "call": call,
                             "detail": f"grad of {name}: {detail}"})
    return findings


NORMS = frozenset({"group_norm", "instance_norm", "batch_norm", "layer_norm"})


def _cpu_nan_grad(case: dict, g: torch.Tensor, e: torch.Tensor, ops: frozenset, eager_zero: bool) -> bool:
    """A CPU graph with one of ``ops`` whose every differing gradient element is NaN in graphfuser
    and, in eager, finite (exactly 0 where ``eager_zero``): an answer at a NaN input where eager's
    CPU kernel disagrees with itself between its vectorized chunks and its scalar tail."""
    if g.device.type != "cpu" or not ops & {o.split(":")[-1].rstrip("_") for o in case.get("ops", ())}:
        return False
    differ = ~((g == e) | (g.isnan() & e.isnan()))
    eager = e == 0 if eager_zero else torch.isfinite(e)
    return bool(differ.any()) and bool((g.isnan() & eager)[differ].all())


def _rms_norm_nan(case: dict, g: torch.Tensor, e: torch.Tensor, judge: Callable) -> bool:
    """The gradient side of the ``rms_norm_inf_row`` deviation: a CUDA graph with rms_norm whose
    gradient differs from eager's only where eager's is NaN and graphfuser's is not (``judge``
    passes once those elements are eager's); the caller then holds graphfuser's gradient to
    eager's on the CPU (CUDA fuzz graph 274 of seed 36417: the weight's gradient of an rms_norm
    of a row holding an inf, NaN from eager's fused CUDA kernel, 0 from its formula and from
    eager on the CPU)."""
    if "rms_norm" not in case.get("ops", ()) or g.device.type != "cuda" or g.shape != e.shape \
            or not g.is_floating_point():
        return False
    odd = e.isnan() & ~g.isnan()
    return bool(odd.any()) and judge(torch.where(odd, e, g.detach())) is None


def _hardswish_nan(case: dict, g: torch.Tensor, e: torch.Tensor) -> bool:
    """The ``hardswish_nan_grad`` deviation: a CPU graph with hardswish whose every differing
    gradient element is NaN in graphfuser and finite in eager (its scalar tail's answer at a NaN;
    fuzz graph 2640 of seed 33631: a 0-dim fp16 NaN)."""
    return _cpu_nan_grad(case, g, e, frozenset({"hardswish"}), eager_zero=False)


def _hardtanh_nan(case: dict, g: torch.Tensor, e: torch.Tensor) -> bool:
    """The ``hardtanh_nan_grad`` deviation: a CPU graph with hardtanh or relu6 whose every
    differing gradient element is NaN in graphfuser and 0 in eager: eager's vectorized chunks
    zero the gradient at a NaN input (``(x > min) & (x < max)``), its scalar tail passes it
    (``x <= min || x >= max ? 0 : g``), as graphfuser does (fuzz graph 113 of CPU seed 34712: a
    NaN into ``hardtanh`` and then ``sinh``, whose upstream gradient there is NaN)."""
    return _cpu_nan_grad(case, g, e, frozenset({"hardtanh", "relu6"}), eager_zero=True)


class _ScalarTailHardtanh(torch.autograd.Function):
    """hardtanh whose gradient is eager's scalar tail's: the upstream gradient unless
    ``x <= min or x >= max`` (a NaN input passes it)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
        ctx.save_for_backward(x)
        ctx.lo, ctx.hi = lo, hi
        return torch.nn.functional.hardtanh(x, lo, hi)      # (the mode is off inside its handler)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple:
        (x,) = ctx.saved_tensors
        return torch.where((x <= ctx.lo) | (x >= ctx.hi), torch.zeros_like(g), g), None, None


class _VectorHardswish(torch.autograd.Function):
    """hardswish whose gradient is eager's vectorized CPU chunks': 0 up to -3, the upstream
    gradient from 3 on, ``g * (x / 3 + 1/2)`` elsewhere (a NaN input gives NaN)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return torch.nn.functional.hardswish(x)             # (the mode is off inside its handler)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        inner = torch.where(x >= 3.0, g, g * (x / 3.0 + 0.5))
        return torch.where(x <= -3.0, torch.zeros_like(g), inner)


class ScalarTailClamps(torch.overrides.TorchFunctionMode):
    """Eager's program with the rules graphfuser's CPU kernels keep for every element at a NaN
    input, where eager's own kernels answer by chunk: ``F.hardtanh`` and ``F.relu6`` with
    ``_ScalarTailHardtanh``'s gradient (``hardtanh_nan_grad``; fuzz graph 1763 of CPU seed 34725:
    a NaN into relu6 whose upstream gradient there is finite or infinite, carried on to other
    inputs' gradients), ``F.hardswish`` with ``_VectorHardswish``'s (``hardswish_nan_grad``; fuzz
    graph 948 of CPU seed 34750: a NaN out of an addmm into hardswish, eight elements, so eager
    took its scalar tail, and the NaN carried on into the weight's gradient)."""

    def __torch_function__(self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        F = torch.nn.functional
        if func is F.hardswish and not kwargs.get("inplace", args[1] if len(args) > 1 else False):
            return _VectorHardswish.apply(args[0])
        if func is F.relu6 and not kwargs.get("inplace", args[1] if len(args) > 1 else False):
            return _ScalarTailHardtanh.apply(args[0], 0.0, 6.0)
        if func is F.hardtanh and not kwargs.get("inplace", args[3] if len(args) > 3 else False):
            lo = kwargs.get("min_val", args[1] if len(args) > 1 else -1.0)
            hi = kwargs.get("max_val", args[2] if len(args) > 2 else 1.0)
            return _ScalarTailHardtanh.apply(args[0], float(lo), float(hi))
        return func(*args, **kwargs)


def _empty_statistics(case: dict, args: list, g: torch.Tensor, e: torch.Tensor) -> bool:
    """The ``empty_statistics_grad`` deviation: a normalization over an input with a zero-size
    dim, and every differing gradient element is NaN in eager and exactly 0 in graphfuser."""
    if not NORMS & {o.split(":")[-1] for o in case.get("ops", ())}:
        return False
    if not any(isinstance(a, torch.Tensor) and 0 in tuple(a.shape) for a in args):
        return False
    differ = ~((g == e) | (g.isnan() & e.isnan()))
    return bool(differ.any()) and bool((e.isnan() & (g == 0))[differ].all())
