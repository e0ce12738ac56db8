"""One tensor of graphfuser's against eager's and the float64 reference: the margins the fuzz
oracle (``oracle.py``) judges every output, mutated input and gradient with."""
from __future__ import annotations

from typing import Optional

import torch

from .inputs import DTYPE

# Tight margin of graphfuser against eager, in units of the output dtype's epsilon.
EPS = {torch.float64: 2.2e-16, torch.float32: 1.2e-7, torch.float16: 9.8e-4, torch.bfloat16: 7.8e-3}
TIGHT_ULPS = 64
LOOSE_ULPS = 256


def _lowest_eps(case: dict) -> float:
    src = case["source"]
    eps = EPS[torch.float32]
    if "float16" in src or "half" in src or any(i.get("dtype") == "float16" for i in case["inputs"]):
        eps = EPS[torch.float16]
    if "bfloat16" in src or any(i.get("dtype") == "bfloat16" for i in case["inputs"]):
        eps = EPS[torch.bfloat16]
    if case.get("autocast"):
        eps = max(eps, EPS[DTYPE[case["autocast"]]])
    return eps


def compare_tensor(g: torch.Tensor, e: torch.Tensor, r: Optional[torch.Tensor], low_eps: float,
                   check_strides: bool = True, ref_floor: float = 0.0,
                   eager_noise: float = 2.0) -> Optional[tuple[str, str]]:
    """(category, detail) of the first difference of ``g`` from eager ``e``, or None.

    Against the float64 reference ``r``: an element passes when graphfuser is faithful to it
    (within ``LOOSE_ULPS`` of the lowest precision the graph touches: eager's own error, e.g. a
    huge mean's rounding, is no defect of graphfuser's), or when eager is faithful to it and
    graphfuser is no farther from it than eager plus the tight margin. ``ref_floor`` is the reference's own absolute accuracy (float64 rounding at
    the inputs' magnitude): differences below it are not judged. Where eager itself is not
    faithful (an ill-conditioned output), graphfuser's error may reach ``eager_noise`` times eager's
    worst error on the output. Eager's worst error is one draw of rounding noise that another
    order of summation draws differently: outputs pass 2 (fuzz graph 1942 of seed 8787: a
    matmul of a float32 group norm against positive weights cancels 4099 terms of magnitude 1
    to 20; graphfuser's group norm is as exact as eager's, 3e-7 against 2e-7 to 5e-7 over three
    draws, and the matmul turned one ulp's difference into 1.6e-5 where eager's worst was
    1.0e-5), gradients 4, as a gradient is a sum whose rounding noise, over few elements, is one
    sample of a spread eager's order of summation happens to draw low in."""
    if g.dtype != e.dtype:
        return "wrong_dtype", f"{g.dtype} vs eager {e.dtype}"
    if tuple(g.shape) != tuple(e.shape):
        return "wrong_shape", f"{tuple(g.shape)} vs eager {tuple(e.shape)}"
    if g.requires_grad != e.requires_grad:
        return "wrong_requires_grad", f"{g.requires_grad} vs eager {e.requires_grad}"
    if e.numel() == 0:
        return None
    gd, ed = g.detach().cpu(), e.detach().cpu()
    if ed.is_floating_point() or ed.is_complex():
        x, y = gd.double(), ed.double()
        # A float64 output computed from float32 work is only as exact as float32: the margin
        # uses the lowest precision the graph touches.
        eps = max(EPS.get(ed.dtype, 1.2e-7), low_eps if ed.dtype == torch.float64 else 0.0)
        fin = torch.isfinite(y)
        scale = y[fin].abs().mean().item() if fin.any() else 1.0
        tight = TIGHT_ULPS * eps * (y.abs() + scale + 1e-30)
        # margins only between finite values: an infinite eager value makes the margin infinite,
        # which took -inf for +inf (a -0.0 divisor Dynamo's graph held as 0.0 went unjudged)
        both = torch.isfinite(x) & fin
        same = (x == y) | (x.isnan() & y.isnan()) | (both & ((x - y).abs() <= tight))
        overflow = None
        if (r is None or tuple(r.shape) != tuple(e.shape)) and low_eps > eps:
            # no reference to tell rounding from error (its backward raised: an input written in
            # place after the float64 matmul saved it, where autocast's saved a bf16 copy): a float32
            # value computed from bf16 / fp16 ones may differ from eager's by a couple of roundings
            # of that precision (fuzz graph 231 of seed 9494: a gradient 1 bf16 ulp apart)
            same = same | (both & ((x - y).abs() <= 2 * low_eps * (y.abs() + scale)))
        if r is not None and tuple(r.shape) == tuple(e.shape):
            z = r.detach().cpu().double()
            zr = z.to(ed.dtype).double()            # the reference rounded to the output dtype
            loose = LOOSE_ULPS * max(low_eps, eps) * (z.abs() + scale + 1e-30) + ref_floor
            zfin = torch.isfinite(z)          # (the margins again only between finite values)
            faithful = (fin & zfin & ((y - z).abs() <= loose)) | (y.isnan() & z.isnan()) | (y == zr)
            closer = ((x - z).abs() <= (y - z).abs() + tight + ref_floor) | (x == zr) | (x.isnan() & z.isnan())
            g_faithful = (torch.isfinite(x) & zfin & ((x - z).abs() <= loose)) | (x.isnan() & z.isnan()) | (x == zr)
            same = same | g_faithful | (faithful & closer)
            if not bool(same.all()):
                # no worse than eager in the max norm: graphfuser's error on each element left is no
                # larger than eager's own worst error on this output (both finite against a finite
                # reference): ill-conditioned outputs (a normalization of near-constant groups, a
                # pole of lgamma) are judged by the error eager itself makes there
                ok = torch.isfinite(y) & torch.isfinite(z)
                bound = float((y - z)[ok].abs().max()) if bool(ok.any()) else 0.0
                within = torch.isfinite(x) & ok & ((x - z).abs() <= eager_noise * bound + ref_floor)
                # eager overflowed where the reference is finite (an fp16 product or exp past
                # 65504, or underflowed to 0 and met an inf: NaN): eager's precision gave no
                # answer there to hold graphfuser to (fuzz graph 2871 of seed 6161); where that
                # is all that differs, the deviation ``eager_overflow``
                overflow = torch.isfinite(z) & ~torch.isfinite(y)
                same = same | within
        if bool(same.all()):
            return _strides(g, e) if check_strides else None
        if overflow is not None and bool((same | overflow).all()):
            return "eager_overflow", f"{int((~same).sum())}/{e.numel()} elements"
        bad = (~same).nonzero()[0].tolist()
        n = int((~same).sum())
        ref = f", fp64 reference {float(r.detach().cpu().double()[tuple(bad)]):.6g}" if r is not None and \
            tuple(r.shape) == tuple(e.shape) else ""
        return "wrong_value", (f"{n}/{e.numel()} elements; at {bad}: graphfuser {float(x[tuple(bad)]):.6g}, "
                               f"eager {float(y[tuple(bad)]):.6g}{ref}")
    same = gd == ed
    if r is not None and tuple(r.shape) == tuple(e.shape) and not bool(same.all()):
        same = same | (gd == r.detach().cpu().to(ed.dtype))
    if not bool(same.all()):
        bad = (~same).nonzero()[0].tolist()
        return "wrong_value", (f"{int((~same).sum())}/{e.numel()} elements; at {bad}: graphfuser "
                               f"{gd[tuple(bad)].item()}, eager {ed[tuple(bad)].item()}")
    return _strides(g, e) if check_strides else None


def _strides(g: torch.Tensor, e: torch.Tensor) -> Optional[tuple[str, str]]:
    if e.numel() <= 1:
        return None
    for d in range(e.dim()):
        if e.shape[d] > 1 and g.stride(d) != e.stride(d):
            return "wrong_strides", f"{tuple(g.stride())} vs eager {tuple(e.stride())} for shape {tuple(e.shape)}"
    return None


def _magnitude(args: list) -> float:
    """The largest finite magnitude among the floating-point tensor arguments (1 without one)."""
    m = 1.0
    for a in args:
        if isinstance(a, torch.Tensor) and a.is_floating_point() and a.numel():
            f = a.detach().double().abs()
            f = f[torch.isfinite(f)]
            if f.numel():
                m = max(m, float(f.max()))
    return m
