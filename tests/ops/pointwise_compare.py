"""How ``test_op_table_pointwise`` compares a fused output with eager's: bit for bit first, then
within the dtype's tolerance (an ulp or two of fp16 / bf16 for transcendental rows), or equal to
eager's fp32 op-math result rounded once; strides must match eager's."""
from __future__ import annotations

from typing import Any, Optional

import torch

from helpers import TOLERANCES

# Ops whose half-precision result may differ from eager by an ulp or two of fp16/bf16 (both
# compute in fp32 and round once; libm and torch's vectorized math differ in the last fp32 bit).
TRANSCENDENTAL = {
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan", "asin",
    "acos", "atan", "sinh", "cosh", "tanh", "sigmoid", "erf", "erfc", "lgamma", "atan2", "pow", "gelu",
    "silu", "softplus", "div", "reciprocal", "addcdiv", "lerp", "remainder", "fmod", "floor_divide",
}
HALF_TOL = dict(atol=1e-2, rtol=2e-2)


def _tolerance(entry: Any, out: torch.Tensor) -> dict:
    if out.dtype in (torch.float16, torch.bfloat16) and entry.row in TRANSCENDENTAL:
        return HALF_TOL
    return TOLERANCES.get(out.dtype, {})


def _same(g: torch.Tensor, w: torch.Tensor) -> bool:
    """Cheap exact check (assert_close costs ~3 ms a call; most outputs match bit for bit)."""
    if g.dtype != w.dtype or g.shape != w.shape:
        return False
    if w.is_floating_point():
        return bool(((g == w) | (torch.isnan(g) & torch.isnan(w))).all())
    return torch.equal(g, w)


def compare(entries: list, got: tuple, want: tuple, where: str, opmath: Optional[tuple] = None) -> list[str]:
    """Per-output comparison. ``opmath``: for fp16 / bf16 inputs, eager's results on the inputs
    upcast to fp32; a fused result equal to that, rounded once, is right too (eager's vectorized
    half kernels sometimes round an intermediate, e.g. the quotient of div(rounding_mode='trunc'))."""
    problems = []
    assert len(got) == len(want) == len(entries)
    for k, (e, g, w) in enumerate(zip(entries, got, want)):
        try:
            if not _same(g, w):
                try:
                    torch.testing.assert_close(g, w, equal_nan=True, **_tolerance(e, w))
                except AssertionError:
                    if opmath is None or not _same(g, opmath[k].to(w.dtype)):
                        raise
            if g.stride() != w.stride() and g.numel() > 1:
                raise AssertionError(f"strides {g.stride()} != eager {w.stride()} (sizes {tuple(w.shape)})")
        except AssertionError as exc:
            problems.append(f"{where}: o{k} = {e.expr}  [{e.row}]: {str(exc).strip()}")
    return problems
