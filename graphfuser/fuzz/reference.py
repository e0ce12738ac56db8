"""The float64 reference's normalizations: exact moments.

The fuzz oracle (``oracle.py``) judges graphfuser against a float64 run of the case. torch's
float64 normalization kernels are not exact for constant rows, nor for rows whose mean is huge
against their spread; under :class:`ExactMoments` the reference computes layer / batch /
instance / group norm from deviations taken against a double-double mean instead.
"""
from __future__ import annotations

import math
from typing import Any, Optional

import torch


def _deviations(x: torch.Tensor, dims: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """(deviations from the mean, their sum of squares) over ``dims`` (keepdim), the mean held as a
    double-double ``hi + lo``: a second pass corrects the mean, and what rounding the corrected
    mean to float64 loses is kept and subtracted apart. Exact for constant segments, unlike
    torch's float64 kernels; and for rows of mean 1e4 and spread 1e-2 the deviations are not off
    by the float64 mean's rounding (1e-12, 1e-10 of the spread: fuzz graph 2090 of seed 8787,
    where the reference's layer norm summed to 1.5e-10 instead of 0)."""
    n = max(1, x.numel() // max(1, x.sum(dims, keepdim=True).numel()))
    first = x.sum(dims, keepdim=True) / n
    residual = (x - first).sum(dims, keepdim=True) / n
    hi = first + residual
    lo = residual - (hi - first)                    # exact: the error of rounding first + residual
    if _MEAN_TO[0] is not None:
        # the mean as a kernel holds it: correctly rounded to its accumulation dtype
        d = x - hi.to(_MEAN_TO[0]).double()
    else:
        d = (x - hi) - lo
    return d, (d * d).sum(dims, keepdim=True)


class ExactMoments(torch.overrides.TorchFunctionMode):
    """Under this mode the reference computes the normalizations two-pass in float64 (mean,
    then deviations from it), rounded to eager's output dtype: torch's kernels are not exact for
    constant rows (a batch norm of a constant channel gives 1e-12 noise in float64, 1e-5 in
    float32, which a following comparison or a tiny eps turns into a different answer). Other
    ops run as usual. ``stages``: the normalized value and each affine step are rounded to that
    dtype too, as every kernel computes them (eager's and graphfuser's): a group norm of -1 plus a
    bias of 1.0 is then 0, where rounding only the sum keeps the -3e-8 of the exact value (fuzz
    graph 225 of CPU seed 33701, whose logical_and of that value flipped). ``rounded_mean``: the
    deviations are taken from the mean correctly rounded to the kernel's accumulation dtype, as a
    kernel holds it: a float64 row equal to its channel's mean rounded to float64 is then 0, where
    its exact deviation is -2.4e-17 (fuzz graph 345 of CPU seed 34735: a batch norm's value at a
    row equal to the channel's float64 mean, whose logical_xor with another value flipped)."""

    def __init__(self, stages: bool = False, rounded_mean: bool = False) -> None:
        super().__init__()
        self.stages = stages
        self.rounded_mean = rounded_mean

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        x = args[0] if args else kwargs.get("input")
        if isinstance(x, torch.Tensor) and x.is_floating_point() and name in _EXACT:
            # eager runs first: its checks and errors, and its running-stats update
            out = func(*args, **kwargs)
            wide = [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
            _ROUND_TO[0] = out.dtype if self.stages else None
            _MEAN_TO[0] = (torch.float64 if out.dtype == torch.float64 else torch.float32) if self.rounded_mean else None
            try:
                exact = _EXACT[name](*wide, **kwargs)
            except Exception:  # noqa: BLE001 - a signature the exact form does not cover
                exact = NotImplemented
            finally:
                _ROUND_TO[0] = _MEAN_TO[0] = None
            if exact is NotImplemented or exact.shape != out.shape:
                return out
            # in eager's layout: a view the graph takes of it next must work as on eager's (a
            # group norm of a transposed input, then .view(-1): fuzz graph 994 of CPU seed 36582
            # had no reference and was judged against eager's cancellation noise alone)
            return torch.empty_like(out).copy_(exact.to(out.dtype))
        return func(*args, **kwargs)


# the dtype the exact forms round their stages to while ``ExactMoments(stages=True)`` runs one
_ROUND_TO: list = [None]
# the dtype the mean is rounded to before the deviations while ``ExactMoments(rounded_mean=True)``
# runs one: a kernel's accumulation dtype (float32, or float64 for float64 data)
_MEAN_TO: list = [None]


def _stage(y: torch.Tensor) -> torch.Tensor:
    dtype = _ROUND_TO[0]
    return y if dtype is None else y.to(dtype).double()


def _affine(y: torch.Tensor, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor], shape) -> torch.Tensor:
    y = _stage(y)
    if weight is not None:
        y = _stage(y * weight.reshape(shape))
    return y + bias.reshape(shape) if bias is not None else y


def _exact_layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5, *rest, **kw):
    if kw or rest or input.shape[input.dim() - len(normalized_shape):] != tuple(normalized_shape):
        return NotImplemented
    dims = tuple(range(input.dim() - len(normalized_shape), input.dim()))
    d, m2 = _deviations(input, dims)
    y = d * torch.rsqrt(m2 / max(1, math.prod(normalized_shape)) + eps)
    return _affine(y, weight, bias, normalized_shape)


def _exact_channels(input, weight, bias, eps, dims, n_per):
    d, m2 = _deviations(input, dims)
    y = d * torch.rsqrt(m2 / n_per + eps)
    return _affine(y, weight, bias, [1, -1] + [1] * (input.dim() - 2))


def _exact_batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1,
                      eps=1e-5, *rest):
    if not training or input.dim() < 2 or input.numel() == 0 or rest:
        return NotImplemented       # inference: eager's own
    dims = (0,) + tuple(range(2, input.dim()))
    return _exact_channels(input, weight, bias, eps, dims, input.numel() // input.shape[1])


def _exact_instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                         use_input_stats=True, momentum=0.1, eps=1e-5, *rest):
    if not use_input_stats or input.dim() < 3 or input.numel() == 0 or rest:
        return NotImplemented
    dims = tuple(range(2, input.dim()))
    return _exact_channels(input, weight, bias, eps, dims, max(1, math.prod(input.shape[2:])))


def _exact_group_norm(input, num_groups, weight=None, bias=None, eps=1e-5, *rest):
    if num_groups < 1 or input.dim() < 2 or input.numel() == 0 or rest or input.shape[1] % num_groups:
        return NotImplemented
    n, c = input.shape[0], input.shape[1]
    grouped = input.reshape(n, num_groups, -1)      # per (sample, group): C/G channels x spatial
    d, m2 = _deviations(grouped, (2,))
    y = (d * torch.rsqrt(m2 / max(1, grouped.shape[2]) + eps)).reshape(input.shape)
    return _affine(y, weight, bias, [1, c] + [1] * (input.dim() - 2))


_EXACT = {"layer_norm": _exact_layer_norm, "batch_norm": _exact_batch_norm,
          "instance_norm": _exact_instance_norm, "group_norm": _exact_group_norm}



_LOW = (torch.float32, torch.float16, torch.bfloat16)
_RANDOM = ("dropout", "rand", "bernoulli", "normal", "uniform", "multinomial", "poisson")


def _wide(a: Any) -> Any:
    return a.double() if isinstance(a, torch.Tensor) and a.dtype in _LOW else a


def _aliases(out: torch.Tensor, args: Any) -> bool:
    ptr = out.untyped_storage().data_ptr()
    return any(isinstance(a, torch.Tensor) and a.untyped_storage().data_ptr() == ptr for a in args)


class _NewResults(torch.overrides.TorchFunctionMode):
    """Eager runs each op; ``results`` may then replace the results it made (None: keep them).
    In-place and random ops keep theirs."""

    def results(self, func, args: tuple, kwargs: dict, outs: tuple, flat: list) -> Optional[list]:
        raise NotImplementedError

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        if name.endswith("_") or any(r in name for r in _RANDOM):
            return out
        single = isinstance(out, torch.Tensor)
        outs = (out,) if single else out
        if not isinstance(outs, tuple):
            return out
        items = self.results(func, args, kwargs, outs, list(args) + list(kwargs.values()))
        if items is None:
            return out
        if single:
            return items[0]
        return type(out)(items) if hasattr(out, "n_fields") else tuple(items)


class RoundedIntermediates(_NewResults):
    """Eager's dtypes, with every op that makes a new floating tensor computed in float64 and
    rounded to eager's result dtype: a pipeline whose every op is correctly rounded. Where an op
    amplifies the last ulp of its input (acos of a value that rounds to 1: fuzz graph 6476 of seed
    9292, acos(erf(x)) with erf(x) = 1 - 2.8e-8, which a correctly rounded float32 erf makes 1.0
    and acos then 0, against 2.38e-4 in float64), that ulp is the output's conditioning, not an
    error: a value this pipeline gives is one a faithful implementation may give. Views, in-place
    ops and random ops run as eager's."""

    def results(self, func, args: tuple, kwargs: dict, outs: tuple, flat: list) -> Optional[list]:
        if not any(isinstance(o, torch.Tensor) and o.dtype in _LOW and not _aliases(o, flat) for o in outs):
            return None
        if getattr(func, "__name__", "") in _EXACT:
            return None     # (the normalizations: ExactMoments' forms, which round their own stages)
        try:
            exact = func(*[_wide(a) for a in args], **{k: _wide(v) for k, v in kwargs.items()})
        except Exception:  # noqa: BLE001 - no float64 form: eager's
            return None
        exacts = (exact,) if len(outs) == 1 and isinstance(exact, torch.Tensor) else exact
        if not isinstance(exacts, tuple) or len(exacts) != len(outs):
            return None
        return [x.to(o.dtype) if isinstance(o, torch.Tensor) and isinstance(x, torch.Tensor) and o.dtype in _LOW
                and x.shape == o.shape and not _aliases(o, flat) else o for o, x in zip(outs, exacts)]


class PerturbedIntermediates(_NewResults):
    """Eager's pipeline with every new floating result moved by ``ulps`` units of its dtype's
    epsilon, relative, with a seeded random sign per element: what another order of a
    reduction's additions or products, or a last-ulp difference of a math function, may do to
    each intermediate. The spread of the outputs of a few such runs is the output's sensitivity
    to rounding; where it covers graphfuser's difference from eager, eager's value has no more
    claim to be right than graphfuser's (cos of a float64 product of 33 values near 1e4: one ulp
    of the product, 1e116, moves the cosine anywhere in [-1, 1]; fuzz graph 1988 of seed 11414)."""

    def __init__(self, seed: int, ulps: float = 2.0) -> None:
        super().__init__()
        self.gen = torch.Generator().manual_seed(seed)
        self.ulps = ulps

    def nudge(self, t: torch.Tensor) -> torch.Tensor:
        signs = (torch.randint(0, 2, t.shape, generator=self.gen) * 2 - 1).to(device=t.device, dtype=t.dtype)
        return t * (signs * (self.ulps * torch.finfo(t.dtype).eps) + 1)

    def results(self, func, args: tuple, kwargs: dict, outs: tuple, flat: list) -> Optional[list]:
        return [self.nudge(o) if isinstance(o, torch.Tensor) and o.is_floating_point() and o.numel()
                and not _aliases(o, flat) else o for o in outs]


def spread_patched(g: torch.Tensor, e: torch.Tensor, runs: list) -> Optional[torch.Tensor]:
    """``g`` with eager's values where it differs from eager's ``e`` by at most twice the spread
    of ``runs`` (eager's value under ``PerturbedIntermediates`` of a few seeds) and ``e`` (the
    largest minus the smallest, per element); None where no element is covered or a run is
    missing or of another shape."""
    if not e.is_floating_point() or g.dtype != e.dtype or tuple(g.shape) != tuple(e.shape) or not e.numel():
        return None
    ed = e.detach().cpu().double()
    hi, lo, odd = ed.clone(), ed.clone(), torch.zeros(ed.shape, dtype=torch.bool)
    for p in runs:
        if not isinstance(p, torch.Tensor) or tuple(p.shape) != tuple(e.shape):
            return None
        pd = p.detach().cpu().double()
        odd |= pd.isnan() != ed.isnan()
        hi, lo = torch.fmax(hi, pd), torch.fmin(lo, pd)
    spread = (hi - lo).nan_to_num(nan=0.0)
    spread[odd] = math.inf
    covered = (g.detach().cpu().double() - ed).abs() <= 2 * spread
    if not bool(covered.any()):
        return None
    return torch.where(covered.to(g.device), e, g.detach())


_CASTS = ("to", "type", "type_as", "float", "double", "half", "bfloat16")


class CastCopies(torch.overrides.TorchFunctionMode):
    """Every dtype cast makes a copy, as eager's casts between the case's own dtypes do: in the
    float64 reference a cast to float64 of a float64 tensor is that tensor, so ``F.linear(x0,
    x2.to(x0.dtype))`` saves ``x2`` itself, and a later ``x2.copy_(...)`` makes the reference's
    backward raise where eager's (an fp16 copy saved) does not (fuzz graph 363 of CPU seed 36520
    through the compile frontend). Used only where that error is all that stood in the way and
    the outputs are the aliasing run's (``fuzz/reference_runs.py`` ``_grad_reference``)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if getattr(func, "__name__", "") in _CASTS and args and out is args[0] and isinstance(out, torch.Tensor):
            return out.clone()
        return out
