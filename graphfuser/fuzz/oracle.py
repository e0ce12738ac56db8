"""Run one fuzz case through eager and through ``graphfuser.script`` (or, with
``GRAPHFUSER_FUZZ_FRONTEND=compile``, through ``torch.compile(fn, backend=graphfuser_backend)``)
and compare every call.

Runs inside the worker process (``worker.py``). For each call the inputs are built three times
from the case's specs: for eager, for graphfuser, and upcast to float64 for the reference. A
graphfuser value is wrong only when it is not within a tight, dtype-sized margin of eager and,
where the float64 reference is faithful for that element (eager is near it), no closer to the
reference than eager is plus that margin. Integers and bools are exact (a flip that agrees with
the reference is rounding). NaN positions must agree. Dtype, shape, strides (of dims longer
than one), requires_grad, mutated inputs and exceptions are compared too; where inputs require
grad, so are their gradients (``grads.py``).
"""
from __future__ import annotations

import math
import os
import time
import warnings
from typing import Any

import torch

from . import inherited as _ts
from .inputs import DTYPE, _flat, autocast_of, load, make_args, make_tensor  # noqa: F401 - also read from here
from . import judge64
from .grads import check_grads
from .known import (DEVIATIONS, eager_launch_failure_on_empty, layer_norm_long_rows, layer_norm_overflow_row,
                    rms_norm_inf_row, welford_inf, cuda_one_sixth)
from .reference import ExactMoments
from .compare import EPS, _lowest_eps, _magnitude, compare_tensor
from .reference_runs import (PERTURBED_RUNS, _closer_to_ref, _float64_default, _grad_reference,
                             _rounded_pipeline_agrees, _rounding_spread_covers, _under_autocast, perturbed_run)

LAUNCHES = [0]


def frontend() -> str:
    """Which entry point the cases go through: "script" (``graphfuser.script``, the default) or
    "compile" (the ``torch.compile`` backend). Under "compile" none of TorchScript's frontend
    deviations (``inherited.py``) excuse a difference: Dynamo's graphs keep eager's semantics."""
    return os.environ.get("GRAPHFUSER_FUZZ_FRONTEND", "script")


def _compiled(fn: Any) -> Any:
    from ..frontend.dynamo import graphfuser_backend

    torch._dynamo.reset()       # one case's graphs at a time (and Dynamo's cache stays small)
    return torch.compile(fn, backend=graphfuser_backend)


def _calls_up_to(run: Any, case: dict, call: int, device: str) -> tuple:
    """(outputs, inputs after the call) of ``run`` at ``call``, the case's calls before it run
    first, in order (their errors are those calls' findings, not this one's)."""
    for c in range(call):
        try:
            with autocast_of(case, device):
                run(*make_args(case, c, device))
        except Exception:  # noqa: BLE001 - an earlier call's error is that call's finding
            pass
    args = make_args(case, call, device)
    with autocast_of(case, device):
        return _flat(run(*args)), args


def _dynamo_run(fn: Any, case: dict, call: int, device: str) -> Any:
    """Dynamo's own (outputs, inputs after the call) of ``call`` (``torch.compile`` with its
    ``eager`` backend, the case's calls before it run first, in order), or the exception it raises."""
    torch._dynamo.reset()
    try:
        return _calls_up_to(torch.compile(fn, backend="eager"), case, call, device)
    except Exception as e:  # noqa: BLE001
        return e
    finally:
        torch._dynamo.reset()


def _nofma_run(fn: Any, case: dict, call: int, device: str) -> Any:
    """graphfuser's own (outputs, inputs after the call) of ``call`` with fused multiply-adds off
    (``PYTORCH_NVFUSER_DISABLE=fma``, whose kernels are other kernels: the knob is in their cache
    key): a new function through the case's frontend, the case's calls before it run first, in
    order; or the exception it raises."""
    import graphfuser
    from ..config import config

    ts = frontend() == "script"
    with config.override(disable=sorted(set(config.disable) | {"fma"})):
        try:
            return _calls_up_to(graphfuser.script(fn) if ts else _compiled(fn), case, call, device)
        except Exception as e:  # noqa: BLE001
            return e
        finally:
            if not ts:
                torch._dynamo.reset()


def _scalar_tail_run(fn: Any, case: dict, call: int, device: str) -> Any:
    """Eager's (outputs, inputs after the call) of ``call`` with every hardtanh / relu6
    differentiated as eager's CPU scalar tail does and every hardswish as its vectorized chunks
    do (``grads.ScalarTailClamps``), or the exception it raises."""
    from .grads import ScalarTailClamps

    args = make_args(case, call, device)
    try:
        with autocast_of(case, device), ScalarTailClamps():
            return _flat(fn(*args)), args
    except Exception as e:  # noqa: BLE001
        return e


def _cpu_run(fn: Any, case: dict, call: int, device: str) -> Any:
    """Eager's (outputs, inputs) of ``call`` on the CPU, from the inputs ``device`` gets (the same
    values, leaves that require grad again), or the exception it raises."""
    args = []
    for a in make_args(case, call, device):
        if isinstance(a, torch.Tensor):
            c = a.detach().cpu().clone()
            args.append(c.requires_grad_() if a.requires_grad else c)
        else:
            args.append(a)
    try:
        with autocast_of(case, "cpu"):
            return _flat(fn(*args)), args
    except Exception as e:  # noqa: BLE001
        return e


def _dynamo_answers(fn: Any, case: dict, call: int, device: str, outs: list, ga: list, low_eps: float) -> bool:
    """Dynamo alone (``torch.compile`` with its ``eager`` backend: no graphfuser), given the
    case's calls up to ``call`` in order, gives ``outs`` at ``call`` (and leaves the inputs as
    ``ga``): a difference from eager that the compile frontend inherits. In order, because Dynamo
    specializes a float argument on its first value and its guard takes -0.0 for 0.0: a later
    call with -0.0 reuses the graph that holds 0.0 (fuzz graph 131 of seed 33552: ``x / s0``
    with ``s0 = -0.0`` gave +inf, with the eager backend too). (Resets Dynamo: the case's later
    calls compile its graphs again.)"""
    run = _dynamo_run(fn, case, call, device)
    if isinstance(run, Exception):      # Dynamo raises as eager does: not this deviation
        return False
    return _agrees_with(run, outs, ga, low_eps)


def _dynamo_raises_alike(fn: Any, case: dict, call: int, device: str, err: BaseException) -> bool:
    """Dynamo alone (its ``eager`` backend) raises the exception type graphfuser's call raised,
    where eager does not (Dynamo's fake tensors refuse ``x.copy_(x)`` into an expanded tensor)."""
    torch._dynamo.reset()
    args = make_args(case, call, device)
    try:
        with autocast_of(case, device):
            torch.compile(fn, backend="eager")(*args)
    except Exception as e:  # noqa: BLE001
        return type(e) is type(err)
    finally:
        torch._dynamo.reset()
    return False


def _live_graphs(sf: Any) -> list:
    """The optimized graphs of a case: the scripted function's, or every graph the backend made."""
    if frontend() == "script":
        return [sf._optimized] if sf._optimized is not None else []
    from ..executor.fusion import _EXECUTORS

    return [ex._optimized for ex in list(_EXECUTORS) if getattr(ex, "_optimized", None) is not None]


def _count_launches() -> None:
    """Count calls of every compiled kernel runner (the fused path really ran a kernel)."""
    from ..executor import compiled

    if getattr(compiled._guard_launch, "_fuzz_counting", False):
        return
    orig = compiled._guard_launch

    def counting(*a: Any, **k: Any):
        runner = orig(*a, **k)

        def run(*args: Any):
            LAUNCHES[0] += 1
            return runner(*args)
        run.compiled = getattr(runner, "compiled", None)
        run.namespace = getattr(runner, "namespace", None)
        return run
    counting._fuzz_counting = True
    compiled._guard_launch = counting


def _emulating() -> bool:
    from ..config import config

    try:
        return bool(getattr(config, "emulate_precision_casts"))
    except AttributeError:
        return False


def _agrees_with(run: Any, outs: list, args: list, low_eps: float) -> bool:
    """Are graphfuser's outputs and inputs after the call (``outs``, ``args``) the answer ``run``
    (a ``(outputs, inputs)`` pair, or None: no answer)?"""
    if run is None or len(run[0]) != len(outs):
        return False
    for g, e in list(zip(outs, run[0])) + list(zip(args, run[1])):
        if isinstance(e, torch.Tensor) != isinstance(g, torch.Tensor):
            return False
        if isinstance(e, torch.Tensor) and compare_tensor(g, e, None, low_eps, check_strides=False) is not None:
            return False
        if not isinstance(e, torch.Tensor) and g != e:
            return False
    return True


def _torchscript_answers(fn, case: dict, call: int, device: str) -> bool:
    """Does torch.jit.script's own function return (not raise) on this call's inputs, when it has
    run the calls before it too? Then an error eager raises was lost before graphfuser saw the
    graph (TorchScript drops unused ops; its optimized executor, from its second call on, drops
    dead in-place writes of fresh values: graphfuser's recovery runs such calls through it).
    The function's graph also runs without TorchScript's optimizations: where only the optimized
    executor raises (its differentiable graphs treat a fresh intermediate as a leaf and reject
    an in-place write into a view of it), the language's own answer is the unoptimized one."""
    for optimized in (False, True):      # (the unoptimized run first: it leaves no plan behind)
        with warnings.catch_warnings(), torch.jit.optimized_execution(optimized):
            warnings.simplefilter("ignore")
            scripted = torch.jit.script(fn)
            answered = True
            for c in range(call + 1):
                try:
                    with autocast_of(case, device):
                        scripted(*make_args(case, c, device))
                except Exception:  # noqa: BLE001 - TorchScript raises too on the call judged
                    answered = c != call
        if answered:
            return True
    return False


def _split_precision_deviations(case: dict, device: str, workdir: str, tag: str, findings: list,
                                deviations: list) -> None:
    """A wrong fp16/bf16 value (or gradient) that is gone with emulate_precision_casts on (every
    intermediate, and every gradient an intermediate receives, rounded to its eager dtype) is the
    fp32-intermediates deviation, however far an overflow or a floor/trunc after the rounding
    moves it: move such findings to ``deviations``."""
    from ..config import config

    kinds = ("wrong_value", "wrong_grad")
    with config.override(emulate_precision_casts=True):
        again = run_case(case, device, workdir, tag + "_emulated", _emulated=True)
    still = {(f["category"], f["call"], f["detail"].split(":")[0]) for f in again["findings"] if f["category"] in kinds}
    for f in list(findings):
        if f["category"] in kinds and (f["category"], f["call"], f["detail"].split(":")[0]) not in still:
            findings.remove(f)
            deviations.append({"deviation": "fp32_intermediates", "call": f["call"],
                               "detail": f"{f['detail']} (matches eager with emulate_precision_casts on)"})


def run_case(case: dict, device: str, workdir: str, tag: str, _emulated: bool = False) -> dict:
    """Run ``case``; the result lists findings (category, call, detail), whether a generated
    kernel ran after profiling, the ops that ended up inside fusion groups and the timing."""
    import graphfuser
    from ..ops import REGISTRY

    _count_launches()
    findings: list[dict] = []
    deviations: list[dict] = []
    result = {"findings": findings, "deviations": deviations, "kernel_ran": False, "fused_ops": [],
              "eager_errors": 0, "calls": len(case["calls"]), "grad_calls": 0, "distances": []}
    ts = frontend() == "script"
    try:
        fn = load(case["source"], os.path.join(workdir, f"case_{tag}.py"))
        sf = graphfuser.script(fn) if ts else _compiled(fn)
    except Exception as e:  # noqa: BLE001
        try:
            torch.jit.script(fn)
        except Exception:  # noqa: BLE001 - TorchScript rejects the case itself: not graphfuser's
            result["invalid"] = True
            return result
        findings.append({"category": "crash", "call": -1, "detail": f"script: {type(e).__name__}: {e}"[:500]})
        return result
    low_eps = _lowest_eps(case)
    emulate = _emulating()
    half = low_eps > EPS[torch.float32] and not emulate
    # With emulate_precision_casts on, pointwise chains match eager bit for bit.
    from .gen import NORMS, REDUCTIONS

    exact = emulate and not any(o in REDUCTIONS or o in NORMS for o in case["ops"])
    profiling = graphfuser.config.profiling_runs
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for call in range(len(case["calls"])):
            ea, ga = make_args(case, call, device), make_args(case, call, device)
            err_e = err_g = None
            try:
                t0 = time.perf_counter()
                with autocast_of(case, device):
                    out_e = fn(*ea)
                t_e = time.perf_counter() - t0
            except Exception as e:  # noqa: BLE001
                err_e = e
                result["eager_errors"] += 1
            before = LAUNCHES[0]
            try:
                t0 = time.perf_counter()
                with autocast_of(case, device):
                    out_g = sf(*ga)
                if device != "cpu":
                    torch.cuda.synchronize()
                t_g = time.perf_counter() - t0
            except Exception as e:  # noqa: BLE001
                err_g = e
            if call >= profiling and LAUNCHES[0] > before:
                result["kernel_ran"] = True
            if err_e is not None and err_g is None:
                if eager_launch_failure_on_empty(err_e, ea):
                    deviations.append({"deviation": "empty_launch", "call": call,
                                       "detail": f"eager raised {type(err_e).__name__}: {str(err_e).splitlines()[0]}"})
                    continue
                if not ts and _dynamo_answers(fn, case, call, device, _flat(out_g), ga, low_eps):
                    deviations.append({"deviation": "dynamo_semantics", "call": call,
                                       "detail": f"eager raised {type(err_e).__name__}; torch.compile's own "
                                                 "eager backend does not"})
                    continue
                if ts and _torchscript_answers(fn, case, call, device):
                    deviations.append({"deviation": "torchscript_semantics", "call": call,
                                       "detail": f"eager raised {type(err_e).__name__}; torch.jit.script does not"})
                    continue
                if ts and _ts.has_bool_scalars(case) and _ts.agrees_with_ints(
                        case, call, device, workdir, tag, _flat(out_g), ga,
                        lambda a, b: compare_tensor(a, b, None, low_eps, check_strides=False) is None):
                    deviations.append({"deviation": "torchscript_bool_scalar", "call": call,
                                       "detail": f"eager raised {type(err_e).__name__}; with the bools as ints it "
                                                 "answers as graphfuser does"})
                    continue
                if ts and any(_agrees_with(run, _flat(out_g), ga, low_eps)
                              for run in _ts.pruned_runs(case, call, device, workdir, tag)):
                    deviations.append({"deviation": "torchscript_semantics", "call": call,
                                       "detail": f"eager raised {type(err_e).__name__} on an op torch.jit.script "
                                                 "drops; without its unused statements eager answers as graphfuser"})
                    continue
                if ts and _ts.has_bool_scalars(case) and _ts.scripted_ints_answer(case, call, device, workdir, tag):
                    deviations.append({"deviation": "torchscript_semantics", "call": call,
                                       "detail": f"eager raised {type(err_e).__name__} on an op torch.jit.script "
                                                 "drops; its function answers with the bools as ints"})
                    continue
                findings.append({"category": "missing_error", "call": call,
                                 "detail": f"eager raised {type(err_e).__name__}: {str(err_e).splitlines()[0][:300]}"})
                continue
            if err_g is not None:
                if ts and err_e is None and _ts.has_bool_scalars(case) and \
                        isinstance(_ts.ints_run(case, call, device, workdir, tag), Exception):
                    deviations.append({"deviation": "torchscript_bool_scalar", "call": call,
                                       "detail": f"raised {type(err_g).__name__}, as eager does with the bools as ints"})
                    continue
                if ts and err_e is None and _ts.scripted_raises_alike(fn, case, call, device, err_g):
                    deviations.append({"deviation": "torchscript_semantics", "call": call,
                                       "detail": f"raised {type(err_g).__name__}, as torch.jit.script's function does"})
                    continue
                if not ts and err_e is None and _dynamo_raises_alike(fn, case, call, device, err_g):
                    deviations.append({"deviation": "dynamo_semantics", "call": call,
                                       "detail": f"raised {type(err_g).__name__}, as torch.compile's own eager "
                                                 "backend does"})
                    continue
                if err_e is None:
                    msg = f"{type(err_g).__name__}: {str(err_g).splitlines()[0][:400] if str(err_g) else ''}"
                    cat = "compile_fallback" if "could not be compiled" in msg else "crash"
                    findings.append({"category": cat, "call": call, "detail": msg})
                continue
            if call == 3 and t_g > max(2.0, 200 * t_e):
                findings.append({"category": "hang", "call": call,
                                 "detail": f"slow: fused call {t_g:.2f} s, eager {t_e * 1e3:.2f} ms"})
            ref_args = make_args(case, call, device, ref=True)
            try:
                with ExactMoments(), _float64_default():
                    ref = fn(*ref_args)
            except Exception:  # noqa: BLE001
                ref = None
            if ref is None:
                # float64 inputs next to integer ones can meet float32 intermediates that eager
                # rejects (mixed dtypes): the reference is then eager's own dtypes with exact moments
                ref_args = make_args(case, call, device)
                try:
                    with ExactMoments():
                        ref = fn(*ref_args)
                except Exception:  # noqa: BLE001
                    ref = None
            floor = 64 * EPS[torch.float64] * _magnitude(ref_args)
            fo, fe, fr = _flat(out_g), _flat(out_e), _flat(ref) if ref is not None else None
            pairs = [(f"output {i}", g, e, fr[i] if fr is not None and len(fr) == len(fe) else None, i)
                     for i, (g, e) in enumerate(zip(fo, fe))]
            # inputs written in place are judged against the reference's inputs after its call
            pairs += [(f"input {spec['name']} after the call", g, e,
                       ra if ref is not None and isinstance(ra, torch.Tensor) else None, -1 - k)
                      for k, (spec, g, e, ra) in enumerate(zip(case["inputs"], ga, ea, ref_args))
                      if isinstance(e, torch.Tensor)]
            rounded: list = []
            if ts and len(fo) != len(fe) and _agrees_with(_ts.scripted_run(fn, case, call, device), fo, ga, low_eps):
                deviations.append({"deviation": "torchscript_semantics", "call": call,
                                   "detail": f"{len(fo)} outputs where eager has {len(fe)}: torch.jit.script's "
                                             "function answers so (its schema matching chose another op)"})
                continue
            if len(fo) != len(fe):
                findings.append({"category": "wrong_shape", "call": call,
                                 "detail": f"{len(fo)} outputs vs eager {len(fe)}"})
            for what, g, e, r, where in pairs:
                if not isinstance(e, torch.Tensor) or not isinstance(g, torch.Tensor):
                    if type(g) is not type(e) or (not isinstance(e, torch.Tensor) and g != e and
                                                   not (isinstance(e, float) and math.isnan(e))):
                        findings.append({"category": "wrong_value", "call": call,
                                         "detail": f"{what}: {type(g).__name__} {g!r} vs eager {e!r}"[:300]})
                    continue
                diff = compare_tensor(g, e, r if (r is None or isinstance(r, torch.Tensor)) else None, low_eps,
                                      check_strides=what.startswith("output"), ref_floor=floor)
                if diff is None and exact and what.startswith("output") and e.dtype in (torch.float16, torch.bfloat16):
                    gd, ed = g.detach().cpu(), e.detach().cpu()
                    if not bool(((gd == ed) | (gd.isnan() & ed.isnan())).all()):
                        diff = ("wrong_value", "not bit-exact with emulate_precision_casts on")
                if diff is None and what.startswith("output"):
                    diff = judge64.judge(g, e, r, max(EPS.get(e.dtype, 0.0), low_eps), floor, call, where,
                                         result["distances"], deviations,
                                         lambda seed: perturbed_run(fn, case, call, device, seed))
                if diff is None:
                    continue
                cat, detail = diff
                if cat == "wrong_value" and device == "cuda" and welford_inf(
                        case["ops"], g, e, lambda g2: compare_tensor(g2, e, r if isinstance(r, torch.Tensor) else None,
                                                                     low_eps, check_strides=False, ref_floor=floor)):
                    cat = "welford_inf"
                if cat == "wrong_value" and device == "cuda" and rms_norm_inf_row(
                        case["ops"], make_args(case, call, device), fn, g, e,
                        lambda g2: compare_tensor(g2, e, r if isinstance(r, torch.Tensor) else None,
                                                  low_eps, check_strides=False, ref_floor=floor)):
                    cat = "rms_norm_inf_row"
                if cat == "wrong_value" and device == "cuda" and cuda_one_sixth(
                        case["ops"], device, make_args(case, call, device), fn, g,
                        lambda a, b: compare_tensor(a, b, None, low_eps, check_strides=False, ref_floor=floor)):
                    cat = "cuda_one_sixth"
                if cat == "wrong_value" and device == "cpu" and layer_norm_overflow_row(
                        case["ops"], make_args(case, call, device), g, e,
                        lambda g2: compare_tensor(g2, e, r if isinstance(r, torch.Tensor) else None,
                                                  low_eps, check_strides=False, ref_floor=floor)):
                    cat = "layer_norm_overflow_row"
                if cat == "wrong_value" and device == "cpu" and layer_norm_long_rows(
                        case["ops"], make_args(case, call, device), _under_autocast(fn, case, device), where, g,
                        lambda a, b: compare_tensor(a, b, None, low_eps, check_strides=False)):
                    cat = "layer_norm_overflow_row"
                if cat in DEVIATIONS:
                    deviations.append({"deviation": cat, "call": call, "detail": f"{what}: {detail}"})
                    continue
                inherited = ts and _ts.explains(fn, case, call, device, where, g, workdir, tag,
                                                lambda a, b: compare_tensor(a, b, None, low_eps,
                                                                            check_strides=False) is None)
                if not ts and cat == "wrong_value" and _dynamo_answers(fn, case, call, device, _flat(out_g), ga,
                                                                       low_eps):
                    inherited = "dynamo_semantics"
                if inherited:
                    deviations.append({"deviation": inherited, "call": call, "detail": f"{what}: {detail}"})
                    continue
                if cat == "wrong_value" and half and _closer_to_ref(g, e, r):
                    deviations.append({"deviation": "fp32_intermediates", "call": call, "detail": f"{what}: {detail}"})
                    continue
                if cat == "wrong_value" and (
                        _rounded_pipeline_agrees(fn, case, call, device, rounded, where, g, e, low_eps, floor)
                        or _rounding_spread_covers(fn, case, call, device, where, g, e, r, low_eps, floor)):
                    deviations.append({"deviation": "ill_conditioned", "call": call, "detail": f"{what}: {detail}"})
                    continue
                findings.append({"category": cat, "call": call, "detail": f"{what}: {detail}"})
            if any(spec.get("requires_grad") for spec in case["inputs"]):
                judged = check_grads(
                    case, call, fo, fe, ga, ea, lambda: _grad_reference(fn, case, call, device),
                    lambda g, e, r, go: compare_tensor(g, e, r, low_eps, check_strides=False,
                                                       ref_floor=floor + low_eps * go, eager_noise=4.0),
                    lambda seed: perturbed_run(fn, case, call, device, seed, grad=True), PERTURBED_RUNS,
                    (lambda: _ts.ints_run(case, call, device, workdir, tag)) if ts and _ts.has_bool_scalars(case)
                    else None,
                    None if ts else (lambda: _dynamo_run(fn, case, call, device)),
                    (lambda: _scalar_tail_run(fn, case, call, device))
                    if device == "cpu" and {"hardtanh", "relu6", "hardswish"} & {o.split(":")[-1].rstrip("_") for o in case["ops"]}
                    else None,
                    (lambda: _cpu_run(fn, case, call, device)) if device == "cuda" and "rms_norm" in case["ops"] else None,
                    nofma=(lambda: _nofma_run(fn, case, call, device)) if not graphfuser.config.is_disabled("fma") else None)
                if judged is not None:
                    findings += [f for f in judged if "category" in f]
                    deviations += [f for f in judged if "deviation" in f]
                    result["grad_calls"] += 1
    for w in caught:
        text = str(w.message)
        if "could not be compiled" in text:
            findings.append({"category": "compile_fallback", "call": -1, "detail": text.split(". Repro")[0][:400]})
    ops = set()
    for g in _live_graphs(sf):
        for n in g.all_nodes():
            if n.kind.endswith("FusionGroup") and getattr(n, "subgraph", None) is not None:
                for m in n.subgraph.block.nodes:
                    row = REGISTRY.get(m.kind)
                    if row is not None:
                        ops.add(row.name)
    result["fused_ops"] = sorted(ops)
    if half and not _emulated and any(f["category"] in ("wrong_value", "wrong_grad") for f in findings):
        _split_precision_deviations(case, device, workdir, tag, findings, deviations)
    # one finding per category and call is enough; keep the first
    seen, uniq = set(), []
    for f in findings:
        key = (f["category"], f["call"])
        if key not in seen:
            seen.add(key)
            uniq.append(f)
    result["findings"] = uniq
    return result
