"""Judging against float64: per output, graphfuser's distance from the float64 reference beside
eager's.

A value close to eager's can still be worse than eager's: eager 1e-5 from the float64 answer and
graphfuser 1e-3 are "close" at a loose tolerance, and a reduction that sums in a worse order
shows exactly so. Each floating output of each call gets (graphfuser's distance, eager's
distance), the largest absolute difference from the reference over the elements where the
reference and both answers are finite (where eager overflowed or gave NaN and the reference did
not, the oracle's element checks judge). A result farther than ``RATIO`` times eager's distance
plus a floor (``FLOOR_ULPS`` units of the lowest precision the graph touches, at the output's
magnitude, and the reference's own float64 rounding) is a failure, ``far_from_float64``, even
where every element passed the comparison with eager. Where eager's own distance moves that far
when its intermediates are nudged by two ulps, the output's conditioning decides, not either
implementation: the ``ill_conditioned`` deviation.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch

RATIO = 2.0
FLOOR_ULPS = 16
NUDGED_RUNS = 6


def distance(x: torch.Tensor, z: torch.Tensor, ok: torch.Tensor) -> float:
    """The largest |x - z| over ``ok`` (0 where nothing is)."""
    if not bool(ok.any()):
        return 0.0
    return float((x[ok] - z[ok]).abs().max())


def distances(g: torch.Tensor, e: torch.Tensor, r: torch.Tensor) -> Optional[tuple[float, float, torch.Tensor]]:
    """(graphfuser's distance, eager's distance, the elements judged) of one floating output;
    None where the output is not floating or the reference does not line up."""
    if not (e.is_floating_point() and g.is_floating_point() and isinstance(r, torch.Tensor)
            and r.is_floating_point()) or tuple(r.shape) != tuple(e.shape) or tuple(g.shape) != tuple(e.shape):
        return None
    x, y, z = g.detach().cpu().double(), e.detach().cpu().double(), r.detach().cpu().double()
    ok = torch.isfinite(x) & torch.isfinite(y) & torch.isfinite(z)
    return distance(x, z, ok), distance(y, z, ok), ok


def floor(r: torch.Tensor, eps: float, ref_floor: float) -> float:
    z = r.detach().cpu().double()
    fin = torch.isfinite(z)
    scale = float(z[fin].abs().max()) if bool(fin.any()) else 0.0
    return FLOOR_ULPS * eps * scale + ref_floor


def far(dg: float, de: float, fl: float) -> bool:
    return dg > RATIO * de + fl


def judge(g: torch.Tensor, e: torch.Tensor, r: Any, eps: float, ref_floor: float, call: int, where: int,
          record: list, deviations: list, nudged: Callable[[int], Optional[tuple[list, list]]]
          ) -> Optional[tuple[str, str]]:
    """Record output ``where``'s distances from the float64 reference ``r`` in ``record``; the
    ``far_from_float64`` finding where graphfuser's is past the limit and eager's own, its
    intermediates nudged by two ulps (``nudged(seed)``: eager's (outputs, inputs), or None), does
    not reach that far (else the ``ill_conditioned`` deviation)."""
    d = distances(g, e, r)
    if d is None:
        return None
    dg, de, _ = d
    fl = floor(r, eps, ref_floor)
    record.append({"call": call, "output": where, "graphfuser": dg, "eager": de, "floor": fl})
    if not far(dg, de, fl):
        return None
    spread = de
    for seed in range(NUDGED_RUNS):
        run = nudged(seed)
        p = run[0][where] if run is not None and 0 <= where < len(run[0]) else None
        dp = distances(p, e, r) if isinstance(p, torch.Tensor) else None
        if dp is not None:
            spread = max(spread, dp[0])
    detail = (f"output {where}: graphfuser {dg:.4g} from float64, eager {de:.4g} "
              f"(limit {RATIO:g}x eager + floor {fl:.3g})")
    if not far(dg, spread, fl):
        deviations.append({"deviation": "ill_conditioned", "call": call,
                           "detail": f"{detail}; eager nudged by two ulps moves {spread:.4g} away"})
        return None
    return "far_from_float64", detail
