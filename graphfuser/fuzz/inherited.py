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

import ast
import os
import re
import warnings
from typing import Any, Callable, Iterator, Optional

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


# calls that may return their input or a view of it (an in-place write into their result is seen)
_MAY_ALIAS = frozenset({"reshape", "view", "view_as", "squeeze", "unsqueeze", "t", "transpose", "permute",
                        "expand", "expand_as", "contiguous", "flatten", "unflatten", "narrow", "select",
                        "as_strided", "dropout", "detach", "type_as", "to", "type", "float", "double", "half",
                        "bfloat16", "int", "long", "bool", "sum_to_size", "atleast_1d", "atleast_2d",
                        "atleast_3d", "movedim", "split", "chunk", "unbind", "real", "view_as_real",
                        "diagonal", "unfold", "swapaxes", "moveaxis", "squeeze_", "unsqueeze_"})


def _fresh(value: ast.expr) -> bool:
    """Does ``value`` make a new tensor, never its input or a view of it (an operator, or a call
    that cannot alias: ``torch.max(a, b)``, ``x.exp()``)?"""
    if isinstance(value, (ast.BinOp, ast.Compare, ast.UnaryOp)):
        return True
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
        return value.func.attr not in _MAY_ALIAS and not value.func.attr.endswith("_")
    return False


def _dead_statements_dropped(source: str) -> str:
    """``source`` without its unused pure statements (``vK = expr`` whose ``vK`` nothing reads
    later, ``expr`` calling no in-place method), to a fixed point: the program TorchScript's
    frontend keeps (it drops unused ops before graphfuser sees the graph)."""
    tree = ast.parse(source)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef))
    # values an operator made (``v = a ^ b``): fresh tensors, no alias of an input, so an in-place
    # write into one that nothing reads after it is dead too (TorchScript's executor drops it)
    fresh = {st.targets[0].id for st in fn.body if isinstance(st, ast.Assign) and len(st.targets) == 1
             and isinstance(st.targets[0], ast.Name) and _fresh(st.value)}
    # ... and each tensor of a call that makes several (``v0, v1 = torch.var_mean(...)``)
    fresh |= {t.id for st in fn.body if isinstance(st, ast.Assign) and len(st.targets) == 1
              and isinstance(st.targets[0], ast.Tuple) and _fresh(st.value)
              for t in st.targets[0].elts if isinstance(t, ast.Name)}
    # the views of each name (``v8 = v5.expand(...)``): a write into a name is seen through them
    views: dict[str, set[str]] = {}
    for st in fn.body:
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
            if isinstance(st.value, ast.Subscript) and isinstance(st.value.value, ast.Name):
                # basic indexing is a view too (``v4 = v3[1:]``; CUDA seed 36401, graph 235)
                views.setdefault(st.value.value.id, set()).add(st.targets[0].id)
            for n in ast.walk(st.value):
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _MAY_ALIAS \
                        and isinstance(n.func.value, ast.Name):
                    views.setdefault(n.func.value.id, set()).add(st.targets[0].id)

    parent = {v: k for k, vs in views.items() for v in vs}

    def fresh_root(name: str) -> Optional[str]:
        """The fresh value ``name`` is, or views through a chain of views (``v7 = v4.expand(...)``
        of a fresh ``v4``: a write into ``v7`` is a write into ``v4``'s memory, dead as ``v4`` is)."""
        seen = set()
        while name not in fresh:
            if name in seen or name not in parent:
                return None
            seen.add(name)
            name = parent[name]
        return name

    def seen_through(name: str) -> set[str]:
        out, todo = {name}, [name]
        while todo:
            for v in views.get(todo.pop(), ()):
                if v not in out:
                    out.add(v)
                    todo.append(v)
        return out

    changed = True
    while changed:
        changed = False
        for i, st in enumerate(fn.body):
            if isinstance(st, ast.Expr) and isinstance(st.value, ast.Call) and \
                    isinstance(st.value.func, ast.Attribute) and isinstance(st.value.func.value, ast.Name) and \
                    fresh_root(st.value.func.value.id) is not None and st.value.func.attr.endswith("_"):
                names = seen_through(fresh_root(st.value.func.value.id))
                if not any(isinstance(n, ast.Name) and n.id in names for s2 in fn.body[i + 1:] for n in ast.walk(s2)):
                    del fn.body[i]
                    changed = True
                    break
            if not (isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)):
                continue
            name = st.targets[0].id
            later = fn.body[i + 1:]
            read = any(isinstance(n, ast.Name) and n.id == name for s2 in later for n in ast.walk(s2))
            in_place = any(isinstance(n, ast.Attribute) and n.attr.endswith("_") and not n.attr.startswith("_")
                           for n in ast.walk(st.value))
            if not read and not in_place:
                del fn.body[i]
                changed = True
                break
    return ast.unparse(tree)


def pruned_runs(case: dict, call: int, device: str, workdir: str, tag: str) -> Iterator[tuple[list, list]]:
    """Eager's (outputs, inputs after the call) of the case without its unused pure statements,
    and of that program with its bools as ints too when it has bool scalars; none where pruning
    changes nothing or the program raises: eager raised on an op TorchScript drops (an unused
    ``amin`` of an empty dim, ``ceil`` of a bool), where TorchScript's own function may raise on
    something else (an implicit conversion of a tensor that is not 0-dim, which graphfuser keeps
    as the Python program does). Both: an unused ``bitwise_and`` of floats beside a ``bool(1) &
    t`` that TorchScript types as an int (fuzz graph 192 of CPU seed 36526, from layer_norm)."""
    for k, variant in enumerate([case, bools_as_ints(case)] if has_bool_scalars(case) else [case]):
        src = _dead_statements_dropped(variant["source"])
        if ast.dump(ast.parse(src)) == ast.dump(ast.parse(variant["source"])):
            continue
        try:
            fn = load(src, os.path.join(workdir, f"case_{tag}_pruned{k}.py"))
            args = make_args(variant, call, device)
            with autocast_of(case, device):
                run = _flat(fn(*args)), args
        except Exception:  # noqa: BLE001 - the pruned program raises too: nothing explained
            continue
        yield run


def scripted_ints_answer(case: dict, call: int, device: str, workdir: str, tag: str) -> bool:
    """Does ``torch.jit.script`` answer (not raise) for the case with its bools as ints, on this
    call's inputs? Both frontend rewrites at once: eager raises on an op or an in-place write
    TorchScript drops (``v.sigmoid_()`` of a dead bool ``v``) in a case whose ``bool(1) * t`` makes
    TorchScript's own function raise on the implicit conversion of a tensor that is not 0-dim
    (graphfuser keeps the tensor, as eager does)."""
    ints = bools_as_ints(case)
    try:
        fn = load(ints["source"], os.path.join(workdir, f"case_{tag}_ints.py"))
        args = make_args(ints, call, device)
    except Exception:  # noqa: BLE001 - no such program: nothing explained
        return False
    return scripted_answer(fn, args, autocast_of(case, device)) is not None


def scripted_run(fn: Callable, case: dict, call: int, device: str) -> Any:
    """``torch.jit.script``'s own (outputs, inputs after the call) on this call's inputs, or None."""
    args = make_args(case, call, device)
    outs = scripted_answer(fn, args, autocast_of(case, device))
    return None if outs is None else (_flat(outs), args)


def scripted_raises_alike(fn: Callable, case: dict, call: int, device: str, err: BaseException) -> bool:
    """Does ``torch.jit.script``'s own function raise ``err``'s message on this call's inputs
    (graphfuser answered as TorchScript: a tensor typed as a number where TorchScript's schema
    matching chose another op, ``torch.max(t, s)`` as ``max.dim``)?"""
    try:
        with warnings.catch_warnings(), torch.jit.optimized_execution(False):
            warnings.simplefilter("ignore")
            scripted = torch.jit.script(fn)
            with autocast_of(case, device):
                scripted(*make_args(case, call, device))
    except Exception as e:  # noqa: BLE001
        first = str(err).splitlines()[0] if str(err) else ""
        # (the implicit conversion's errors are one family: TorchScript checks the tensor it
        # converts, graphfuser the one it hands on to the op, ``ops/aten.implicit_number``)
        family = "Cannot input a tensor"
        return bool(first) and (first in str(e) or first.startswith(family) and family in str(e))
    return False


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
