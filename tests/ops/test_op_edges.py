"""The op-table-wide edge check: every row of ``graphfuser.ops.ROWS`` on signed zeros, NaN and
infinities, bool / int / float Python scalars on either side, and stride-0 and stepped inputs.

For each row and input dtype, the row's expressions (``edge_specs.SPECS``) become one generated
function over an expanded ``x``, a stepped-slice ``y`` and ``v`` and run-time scalars; it is
scripted, run past profiling with the fallback disabled (a compile error raises), and every
output is compared with eager: dtype, shape, NaN positions, infinities, the sign of every zero,
and the value (exact for exact ops; a few ulps where eager's math library and the kernel's may
round differently). Eager's own answer for an element can depend on its kernel's path (its
vectorized loop and its scalar tail disagree on the sign of ``maximum(0.0, -0.0)``): for
pointwise rows an element also passes when it equals eager's answer computed on that element
alone. Expressions eager rejects for a dtype are left out for it; a row with no spec fails the
test unless ``EXEMPT`` names why.
"""
from __future__ import annotations

import linecache
import math
import re
from typing import Any, Callable, Optional

import pytest
import torch

import graphfuser
from graphfuser.config import config
from graphfuser.ops import ROWS
from edge_specs import EXEMPT, K, SPECS

INF, NAN = math.inf, math.nan
VALUES = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, INF, -INF, NAN, 1e-30, 1e4]
INT_VALUES = [0, 0, 1, -1, 2, -3, 3, 7, -7, 5, 1, 100]
DTYPES = [torch.float32, torch.float16, torch.bool, torch.int64]
# ops whose result the kernel's math library and eager's may round differently (last-ulp error
# of a transcendental function, or a quotient folded into a reciprocal)
INEXACT = {"exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan", "asin",
           "acos", "atan", "sinh", "cosh", "tanh", "sigmoid", "erf", "erfc", "lgamma", "atan2", "pow", "gelu",
           "silu", "softplus", "mish", "reciprocal", "lerp", "addcdiv", "hardswish", "hardsigmoid", "div",
           "floor_divide", "remainder", "fmod"}
ULPS = {torch.float32: 1.2e-7, torch.float16: 9.8e-4, torch.bfloat16: 7.8e-3, torch.float64: 2.3e-16}
assert len(VALUES) == len(INT_VALUES) == K


def _base(dtype: torch.dtype) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.tensor(VALUES) != 0
    if dtype.is_floating_point:
        return torch.tensor(VALUES, dtype=torch.float64).to(dtype)
    return torch.tensor(INT_VALUES, dtype=dtype)


def inputs(dtype: torch.dtype) -> dict[str, Any]:
    """x (stride-0 dim), y and v (stepped slices), p (dense, positive), flag, n."""
    vals = _base(dtype)
    x = vals[:, None].expand(K, K)
    wide = torch.zeros(K, 2 * K, dtype=dtype)
    wide[:, ::2] = vals[None, :]
    y = wide[:, ::2]
    v = torch.stack([vals, vals], 1).reshape(-1)[::2]
    p = (torch.arange(K, dtype=torch.float64) / 4 + 0.25).to(dtype if dtype.is_floating_point else torch.float32)
    assert x.stride() == (1, 0) and y.stride() == (2 * K, 2) and v.stride() == (2,)
    return {"x": x, "y": y, "v": v, "p": p, "flag": True, "n": 2}


NAMES = ("x", "y", "v", "p", "flag", "n")
SIGNATURE = "x, y, v, p, flag: bool, n: int"


def _compile(name: str, src: str) -> Callable:
    filename = f"<graphfuser_edges_{name}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    ns: dict[str, Any] = {"__name__": "graphfuser_edges", "torch": torch}
    exec(compile(src, filename, "exec"), ns)
    return ns[name]


def _source(name: str, forms: list[str]) -> str:
    lines = ["import torch", f"def {name}({SIGNATURE}):"]
    lines += [f"    o{k} = {f}" for k, f in enumerate(forms)]
    lines.append("    return (" + ", ".join(f"o{k}" for k in range(len(forms))) + ",)")
    return "\n".join(lines) + "\n"


def _eager_ok(form: str, args: dict) -> bool:
    try:
        eval(form, {"torch": torch}, dict(args))
    except Exception:  # noqa: BLE001 - eager rejects this form for this dtype
        return False
    return True


def _scriptable(form: str) -> bool:
    try:
        torch.jit.script(_compile("probe", _source("probe", [form])))
    except Exception:  # noqa: BLE001 - TorchScript has no overload for it
        return False
    return True


def _flat(out: Any, labels: Optional[list] = None) -> list:
    """The outputs of a generated function, tuples (var_mean's) spread out; ``labels`` gets the
    form of each."""
    items = []
    for k, o in enumerate(out):
        parts = list(o) if isinstance(o, (tuple, list)) else [o]
        items += parts
        if labels is not None:
            labels += [k] * len(parts)
    return items


def _per_element(fn: Callable, args: dict, shape: tuple) -> Optional[list]:
    """Eager's outputs computed one element at a time (its scalar path), or None if they do not
    line up with the (K, K) outputs."""
    rows: Optional[list] = None
    for i in range(K):
        for j in range(K):
            one = dict(args)
            one["x"], one["y"] = args["x"][i:i + 1, j:j + 1], args["y"][i:i + 1, j:j + 1]
            one["v"], one["p"] = args["v"][j:j + 1], args["p"][j:j + 1]
            outs = _flat(fn(**one))
            if rows is None:
                rows = [torch.empty(shape, dtype=o.dtype) if isinstance(o, torch.Tensor) and o.shape == (1, 1)
                        else None for o in outs]
            for r, o in zip(rows, outs):
                if r is not None:
                    r[i, j] = o[0, 0]
    return rows


def _float64(fn: Callable, args: dict, n: int) -> list:
    """The function's outputs on float64 copies of its floating inputs (Nones where it raises)."""
    wide = {k: v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in args.items()}
    try:
        outs = _flat(fn(**wide))
    except Exception:  # noqa: BLE001 - a form float64 does not take (mixed dtypes)
        return [None] * n
    return outs if len(outs) == n else [None] * n


def mismatch(g: torch.Tensor, e: torch.Tensor, alt: Optional[torch.Tensor], tolerance: str,
             ref: Optional[torch.Tensor] = None) -> Optional[str]:
    """Why ``g`` differs from eager's ``e`` (or its per-element ``alt``), or None. ``tolerance``:
    "exact" (two ulps: a contracted multiply-add), "inexact" (a math library's last bits) or
    "statistics" (a reduction's rounding, relative to its output's scale; a zero's sign is then
    rounding too: eager's -4e-33 for a constant row's normalization is exactly 0). ``ref``: the
    float64 answer; an element no farther from it than eager's passes."""
    if g.dtype != e.dtype or g.shape != e.shape:
        return f"dtype/shape {g.dtype}{tuple(g.shape)} vs eager {e.dtype}{tuple(e.shape)}"

    def agree(ref: torch.Tensor) -> torch.Tensor:
        if not ref.is_floating_point():
            return g == ref
        x, y = g.double(), ref.double()
        nan = x.isnan() & y.isnan()
        exact = (x == y) & (torch.signbit(x) == torch.signbit(y))
        both = torch.isfinite(x) & torch.isfinite(y)
        ulps = (2 if tolerance == "exact" else 64) * ULPS.get(e.dtype, 1.2e-7)
        close = both & (y != 0) & (x != 0) & ((x - y).abs() <= ulps * y.abs())
        if tolerance == "inexact":     # near zero: an absolute margin (sin(pi) is not 0), same sign
            close |= both & ((x - y).abs() <= ulps) & (torch.signbit(x) == torch.signbit(y))
        if tolerance == "statistics":  # a sum's rounding, relative to the segment's scale
            scale = float(y[torch.isfinite(y)].abs().max()) if bool(torch.isfinite(y).any()) else 1.0
            close |= both & ((x - y).abs() <= ulps * max(scale, 1.0))
        return nan | exact | close

    ok = agree(e)
    if alt is not None and alt.dtype == e.dtype and alt.shape == e.shape:
        ok |= agree(alt)
    if ref is not None and e.is_floating_point() and ref.shape == e.shape and not bool(ok.all()):
        # no farther from the float64 answer than eager is (eager's fp16 rounding of a tiny eps
        # to 0, its variance of a constant row of 1e4 that is not 0)
        x, y, z = g.double(), e.double(), ref.double()
        ok |= (x.isnan() & z.isnan()) | (torch.isfinite(x) & torch.isfinite(z) & (
            (x - z).abs() <= torch.where(torch.isfinite(y), (y - z).abs(), torch.full_like(z, math.inf))
            + 64 * ULPS.get(e.dtype, 1.2e-7) * z.abs()))
    if bool(ok.all()):
        return None
    bad = (~ok).nonzero()[0].tolist()
    at = tuple(bad)
    extra = f", eager per element {alt[at].item()!r}" if alt is not None and alt.shape == e.shape else ""
    return f"{int((~ok).sum())}/{e.numel()} elements; at {bad}: graphfuser {g[at].item()!r}, eager {e[at].item()!r}{extra}"


def _tolerance(row: str) -> str:
    if ROWS[row].kind in ("reduction", "normalization"):
        return "statistics"
    return "inexact" if row in INEXACT else "exact"


@pytest.mark.parametrize("row", sorted(ROWS))
def test_every_row_has_edge_forms(row):
    """A row added to the op table needs its edge forms (or a named reason to be exempt)."""
    assert row in SPECS or row in EXEMPT, f"op row {row!r}: add its forms to tests/ops/edge_specs.py"


def _row_dtypes(row: str) -> list:
    return [pytest.param(row, dt, id=f"{row}-{str(dt).split('.')[-1]}") for dt in DTYPES]


@pytest.mark.parametrize("row,dtype", [p for r in sorted(SPECS) for p in _row_dtypes(r)])
def test_row_edges(row, dtype):
    args = inputs(dtype)
    forms = [f for f in SPECS[row] if _eager_ok(f, args) and _scriptable(f)]
    if not forms:
        pytest.skip(f"eager or TorchScript takes none of {row}'s forms for {dtype}")
    # TorchScript pools a function's equal constants, and -0.0 == 0.0: forms spelling -0.0 get a
    # function of their own
    split = [[f for f in forms if "-0.0" not in f], [f for f in forms if "-0.0" in f]]
    problems = []
    for part, group in enumerate(g for g in split if g):
        problems += _check_forms(row, dtype, group, part)
    assert not problems, f"{row} on {dtype} (x stride-0, y/v stepped):\n" + "\n".join(problems)


def _check_forms(row: str, dtype: torch.dtype, forms: list[str], part: int) -> list[str]:
    """Script one function of ``forms``, run it past profiling, compare with eager."""
    args = inputs(dtype)
    name = f"edges_{row.strip('_')}_{str(dtype).split('.')[-1]}_{part}"
    fn = _compile(name, _source(name, forms))
    labels: list = []
    expected = _flat(fn(**args), labels)
    alts = _per_element(fn, args, (K, K)) if ROWS[row].kind in ("pointwise", "cast") else [None] * len(expected)
    refs = _float64(fn, args, len(expected))
    sf = graphfuser.script(fn)
    with config.override(disable=["fallback"]):
        for call in range(3):
            got = _flat(sf(*[inputs(dtype)[a] for a in NAMES]))
    assert len(got) == len(expected)
    problems = []
    for k, g, e, a, r in zip(labels, got, expected, alts, refs):
        form = forms[k]
        if isinstance(e, torch.Tensor):
            why = mismatch(g, e, a, _tolerance(row), r)
        else:
            why = None if (g == e or (isinstance(e, float) and math.isnan(e) and math.isnan(g))) else f"{g!r} vs {e!r}"
        if why and BOOL_SCALAR.search(form) and _bool_typed_as_int(form, g, args, row):
            continue
        if why:
            problems.append(f"{form}: {why}")
    return problems


# TorchScript types a bool Python scalar meeting a tensor as an int (``x + True`` becomes
# ``add(x, 1)``, a ``flag: bool`` argument ``add(x, Int(flag))``, ``True + x`` ``1 + x``): on a
# bool tensor the answer is int64 where eager's is bool. The graph graphfuser receives already
# says so; its answer is then eager's for the int, a deviation of TorchScript's frontend
# (``graphfuser.fuzz.known.DEVIATIONS["torchscript_bool_scalar"]``).
BOOL_SCALAR = re.compile(r"\b(True|False|flag)\b")


def _bool_typed_as_int(form: str, g: Any, args: dict, row: str) -> bool:
    """``g`` is eager's answer to ``form`` with its bool scalars read as ints."""
    as_int = BOOL_SCALAR.sub(lambda m: {"True": "1", "False": "0", "flag": "int(flag)"}[m.group(1)], form)
    try:
        e = eval(as_int, {"torch": torch}, dict(args))
    except Exception:  # noqa: BLE001
        return False
    return isinstance(g, torch.Tensor) and isinstance(e, torch.Tensor) and mismatch(g, e, None, _tolerance(row)) is None


@pytest.mark.xfail(strict=True, raises=Exception,
                   reason="a group holding a row sum and a column sum of one stepped input fails to lower "
                          "(LoweringError: column sums need a row kernel whose reduced axes are the contiguous "
                          "ones; codegen/reduction); the fallback answers, so only PYTORCH_NVFUSER_DISABLE=fallback "
                          "shows it")
def test_row_and_column_sums_of_one_input():
    problems = _check_forms("sum", torch.float32, ["torch.sum(y, 1, keepdim=True)", "torch.sum(y, 0, dtype=torch.float64)"], 9)
    assert not problems
