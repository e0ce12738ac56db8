"""The op table's pointwise rows, continued from ``test_op_table_pointwise.py`` (its entries,
generated functions and comparison): eager's errors raised by the scripted functions, every row
covered, type promotion between tensors of two dtypes, a run-time scalar exponent eager
rejects, and ``x ** s`` at special values."""
from __future__ import annotations

import warnings

import pytest
import torch

import graphfuser
from graphfuser.ops import ROWS
from helpers import TOLERANCES, fusion_groups
from test_op_table_pointwise import (FAMILIES, FAMILY_DTYPES, FLOATS, E, _compile_source, _ref_args,  # noqa: F401
                                     _single_node, _source, compare, family_function, make_inputs,
                                     unfused_reasons)


@pytest.mark.parametrize("family,dtype", [pytest.param(f, d, id=f"{f}-{str(d).replace('torch.', '')}")
                                          for f in FAMILIES for d in FAMILY_DTYPES[f]])
def test_eager_errors_raise(family: str, dtype: torch.dtype) -> None:
    """Where the row's eager reference raises for a dtype, the scripted function raises too."""
    _, _, errors = family_function(family, dtype)
    inputs = make_inputs(family, dtype, "dense")
    for k, (e, msg) in enumerate(errors):
        name = f"err_{family}_{str(dtype).replace('torch.', '')}_{k}"   # unique: TorchScript caches by name
        fn = _compile_source(name, _source(name, family, [e]))
        sf = graphfuser.script(fn)
        for _ in range(3):
            with pytest.raises(Exception) as info:
                sf(*inputs)
            got = f"{type(info.value).__name__}: {info.value}"
            assert got.split(":")[0] == msg.split(":")[0], f"{e.expr}: eager says {msg!r}, scripted {got!r}"


def test_every_pointwise_row_is_covered() -> None:
    covered = {e.row for entries in FAMILIES.values() for e in entries}
    from graphfuser.ops.random import RANDOM_ROWS

    # random rows: eager cannot reproduce their numbers (tests/ops/test_random.py); autocast's
    # device-conditional casts need an autocast state (tests/passes/test_autocast.py); the
    # bias-gradient route is made by a pass under grad (tests/passes/test_bias_gradients.py), the
    # dense copy of a broadcast view by a pass too (tests/passes/test_broadcast_copy.py)
    elsewhere = set(RANDOM_ROWS) | {"autocast_to_full_precision", "autocast_to_reduced_precision", "bias_grad",
                                    "dense_copy"}
    missing = sorted(r.name for r in ROWS.values() if r.kind in ("pointwise", "cast") and r.name not in covered
                     and r.name not in elsewhere)
    assert not missing, f"op-table rows without a per-op test entry: {missing}"


def test_runtime_scalar_that_eager_rejects() -> None:
    """Guards do not look at scalar values: an int ** (run-time int) that turns negative after
    profiling must raise as eager does, never return 1s."""
    def int_pow(x, i: int):
        return torch.pow(x, i) + 1

    x = torch.arange(-3, 5)
    sf = graphfuser.script(int_pow)
    for _ in range(3):
        torch.testing.assert_close(sf(x, 3), int_pow(x, 3))
    with pytest.raises(RuntimeError, match="negative integer powers"):
        sf(x, -1)
    # a tensor exponent: eager truncates 2 ** -k to 0 for integers
    def int_pow_tensor(x, y):
        return torch.pow(x, y) * 1

    y = torch.arange(-3, 5)
    sf = graphfuser.script(int_pow_tensor)
    for _ in range(3):
        torch.testing.assert_close(sf(torch.full((8,), 2), y), int_pow_tensor(torch.full((8,), 2), y))


# -- type promotion across tensors of different dtypes --------------------------------------------
MIXED = [
    E("add", "x + y", "x", "y"), E("add", "torch.add(x, y, alpha=2)", "x", "y", 2), E("sub", "x - y", "x", "y"),
    E("mul", "x * y", "x", "y"), E("div", "x / y", "x", "y"), E("maximum", "torch.maximum(x, y)", "x", "y"),
    E("eq", "x == y", "x", "y"), E("lt", "x < y", "x", "y"), E("where", "torch.where(x > y, x, y)", "cond_xy", "x", "y"),
    E("clamp", "torch.clamp(x, y)", "x", "y"), E("atan2", "torch.atan2(x, y)", "x", "y"),
    E("bitwise_or", "x | y", "x", "y"), E("logical_and", "torch.logical_and(x, y)", "x", "y"),
    E("add", "x + y.sum()", "x", "y"), E("mul", "x * y[0, 0]", "x", "y"),
]
MIXED_PAIRS = [(torch.float16, torch.float32), (torch.bfloat16, torch.float16), (torch.int32, torch.int64),
               (torch.int32, torch.float16), (torch.bool, torch.int32), (torch.bool, torch.float32),
               (torch.int64, torch.float64), (torch.uint8, torch.int8), (torch.int16, torch.bfloat16)]


def _mixed_values(dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.randint(0, 2, (4, 6), generator=gen).bool()
    if not dtype.is_floating_point:
        return torch.randint(1, 9, (4, 6), generator=gen).to(dtype)
    return (torch.randn(4, 6, generator=gen) * 3).to(dtype)


@pytest.mark.parametrize("a,b", [pytest.param(a, b, id=f"{a}-{b}".replace("torch.", "")) for a, b in MIXED_PAIRS])
def test_mixed_dtype_promotion(a: torch.dtype, b: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(7)
    x, y = _mixed_values(a, gen), _mixed_values(b, gen)
    entries = []
    for e in MIXED:
        try:
            args, kw = _ref_args(e, {"x": x, "y": y})
            ROWS[e.row].eager(*args, **kw)
            eval(e.expr, {"torch": torch, "x": x, "y": y})   # x + y.sum(): y.sum() is not a row
        except Exception:
            continue
        entries.append(e)
    name = f"mixed_{str(a)[6:]}_{str(b)[6:]}"
    fn = _compile_source(name, _source(name, "special", entries))   # signature (x, y)
    want = fn(x, y)
    sf = graphfuser.script(fn)
    problems = []
    for call in range(3):
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            got = sf(x, y)
        problems += compare(entries, got, want, f"call {call}")
    assert fusion_groups(sf._optimized), sf._optimized
    unfused = unfused_reasons(sf._optimized, entries)
    problems += [f"o{k} = {entries[k].expr} not fused: {r}" for k, r in unfused.items()
                 if not (entries[k].row == "bitwise_or" and "bitwise" in r)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_pow_of_a_run_time_half_exponent_at_special_values(dtype) -> None:
    """``x ** s`` with a run-time Python number ``s``: eager's pow(Tensor, Scalar) takes sqrt
    for 0.5 and rsqrt for -0.5, which differ from C's pow at -inf and -0 (sqrt(-inf) is NaN,
    pow(-inf, 0.5) inf; fuzz graph 2283 of CPU seed 12424). Every exponent against eager."""
    def fn(x, s: float):
        return (x * 1.0) ** s

    x = torch.tensor([float("-inf"), float("inf"), -0.0, 0.0, -2.0, 3.0, float("nan"), 0.25], dtype=dtype)
    sf = graphfuser.script(fn)
    for s in (0.5, -0.5, 2.0, 3.0, -1.0, -2.0, 1.5, 0.5, -0.5):
        out, ref = sf(x, s), fn(x, s)
        torch.testing.assert_close(out, ref, equal_nan=True, **TOLERANCES[dtype])
        num = ~ref.isnan()        # (the sign of zeros and infinities; a NaN's sign bit means nothing)
        assert torch.equal(out.isnan(), ref.isnan()) and torch.equal(torch.signbit(out[num]), torch.signbit(ref[num])), \
            (s, out, ref)
    assert fusion_groups(sf._optimized)
