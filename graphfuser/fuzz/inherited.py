"""Deviations graphfuser inherits from TorchScript's frontend, each checked per case.

graphfuser answers for the graph ``torch.jit.script`` hands it. Two frontend rewrites change what
a program computes before graphfuser sees it:

- ``torchscript_bool_scalar``: a bool Python scalar meeting a tensor is typed ``int`` (``x + True``
  becomes ``add(x, 1)``; a ``flag: bool`` argument ``add(x, Int(flag))``; ``True / t`` becomes
  ``div(1, t)``). On a bool tensor eager's ``x + True`` is bool (logical or), the graph's int64.
  Checked by running eager on the case with its bool scalars written as ints (the generator spells
  bool literals ``bool(1)`` / ``bool(0)`` so that they can be told from ``keepdim=True``).
- ``torchscript_semantics`` (values): TorchScript's constant pooling merges equal constants of a
  function, and ``-0.0 == 0.0``: a graph spelling both (or a library wrapper's ``0.0`` next to a
  user's ``-0.0``) computes with one of them. Checked by running ``torch.jit.script``'s own
  function on the call's inputs: graphfuser must give exactly its answer.
"""
from __future__ import annotations

import os
import re
import warnings
from typing import Any, Callable, Optional

import torch

from .inputs import _flat, autocast_of, load, make_args

_BOOL_ARG = re.compile(r"(\w+): bool\b")


def has_bool_scalars(case: dict) -> bool:
    return "bool(1)" in case["source"] or "bool(0)" in case["source"] or \
        any(i["kind"] == "bool" for i in case["inputs"])


def bools_as_ints(case: dict) -> dict:
    """The case with its bool Python scalars (literals and run-time arguments) written as ints."""
    src = case["source"].replace("bool(1)", "int(1)").replace("bool(0)", "int(0)")
    src = _BOOL_ARG.sub(lambda m: f"{m.group(1)}: int", src)
    inputs = [dict(i, kind="int", values=[int(v) for v in i["values"]]) if i["kind"] == "bool" else i
              for i in case["inputs"]]
    return dict(case, source=src, inputs=inputs)


def pick(outs: list, args: list, where: int) -> Any:
    """Output ``where`` (>= 0) or input ``-1 - where`` after the call."""
    if 0 <= where < len(outs):
        return outs[where]
    if where < 0 and -1 - where < len(args):
        return args[-1 - where]
    return None


def scripted_answer(fn: Callable, args: list, context: Any) -> Optional[list]:
    """``torch.jit.script(fn)``'s outputs on ``args`` (unoptimized: the language's own answer), or
    None where it raises."""
    try:
        with warnings.catch_warnings(), torch.jit.optimized_execution(False):
            warnings.simplefilter("ignore")
            scripted = torch.jit.script(fn)
            with context:
                out = scripted(*args)
    except Exception:  # noqa: BLE001 - no TorchScript answer: the finding stands
        return None
    return list(out) if isinstance(out, (tuple, list)) else [out]


def ints_run(case: dict, call: int, device: str, workdir: str, tag: str) -> Any:
    """Eager's (outputs, inputs after the call) of the case with its bool scalars written as
    ints (what TorchScript's graph computes), or the exception eager raises on it."""
    ints = bools_as_ints(case)
    try:
        fn = load(ints["source"], os.path.join(workdir, f"case_{tag}_ints.py"))
        args = make_args(ints, call, device)
        with autocast_of(case, device):
            return _flat(fn(*args)), args
    except Exception as e:  # noqa: BLE001
        return e


def agrees_with_ints(case: dict, call: int, device: str, workdir: str, tag: str, outs: list, args: list,
                     agrees: Callable[[torch.Tensor, torch.Tensor], bool]) -> bool:
    """Eager answers the case with its bools as ints, and graphfuser's outputs and inputs after the
    call (``outs``, ``args``) are that answer (eager raised on the bools: ``False - t`` of a uint8
    ``t``, which TorchScript's graph computes as ``0 - t``)."""
    run = ints_run(case, call, device, workdir, tag)
    if isinstance(run, Exception) or len(run[0]) != len(outs):
        return False
    for g, e in list(zip(outs, run[0])) + list(zip(args, run[1])):
        if isinstance(e, torch.Tensor) != isinstance(g, torch.Tensor):
            return False
        if isinstance(e, torch.Tensor) and not agrees(g, e):
            return False
        if not isinstance(e, torch.Tensor) and g != e:
            return False
    return True


def explains(fn: Callable, case: dict, call: int, device: str, where: int, g: Any, workdir: str, tag: str,
             agrees: Callable[[torch.Tensor, torch.Tensor], bool]) -> Optional[str]:
    """The deviation of this module that explains graphfuser's value ``g`` of output / input
    ``where`` (``agrees(g, answer)``: the oracle's comparison), or None."""
    if not isinstance(g, torch.Tensor):
        return None
    if has_bool_scalars(case):
        run = ints_run(case, call, device, workdir, tag)
        e = None if isinstance(run, Exception) else pick(*run, where)
        if isinstance(e, torch.Tensor) and agrees(g, e):
            return "torchscript_bool_scalar"
    if "-0.0" in case["source"]:
        args = make_args(case, call, device)
        outs = scripted_answer(fn, args, autocast_of(case, device))
        t = pick(outs, args, where) if outs is not None else None
        if isinstance(t, torch.Tensor) and t.dtype == g.dtype and t.shape == g.shape:
            x, y = g.detach().cpu(), t.detach().cpu()
            same = (x == y) | (x != x) & (y != y)
            if x.is_floating_point():
                same &= (torch.signbit(x) == torch.signbit(y)) | (x != x)
            if bool(same.all()):
                return "torchscript_semantics"
    return None
