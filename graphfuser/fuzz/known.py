"""The one place where the fuzzer is told what is not a failure (deviations) and what is a known,
open defect (the CI budget expects those to fail, non-strictly, until their class is fixed).

``DEVIATIONS``: deliberate differences from eager, each with the knob that turns it off. The
fuzzer reports them in their own table, never as failures.

Each deviation is matched narrowly where the oracle meets it (``oracle.run_case``); the one that
depends on the error eager raised has its matcher here (``eager_launch_failure_on_empty``).

``KNOWN_DEFECTS``: open defect classes of issue 10. Each entry names the class, the failure
categories it shows up as and, where it is specific, the ops. ``tests/fuzz/test_fuzz_ci.py``
xfails (non-strictly) only when every failure of its budget matches an entry here; remove an
entry when its class is fixed, and the CI budget turns any recurrence into a hard failure.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import torch

DEVIATIONS: dict[str, dict[str, str]] = {
    "fp32_intermediates": {
        "what": "fp16/bf16 chains keep fp32 intermediates where eager rounds every op's result",
        "knob": "config key emulate_precision_casts (PYTORCH_NVFUSER_ENABLE=emulate_precision_casts)",
        "when_on": "pointwise chains match eager bit for bit",
    },
    "torchscript_semantics": {
        "what": "eager raises but torch.jit.script's own function does not (its frontend drops unused ops "
                "before graphfuser sees the graph), or a value differs from eager's where torch.jit.script's "
                "own function gives graphfuser's answer exactly and the graph spells -0.0 (TorchScript's "
                "constant pooling merges -0.0 with an equal 0.0): graphfuser answers as TorchScript does",
        "knob": "none (inherited from TorchScript; checked per case against torch.jit.script)",
        "when_on": "",
    },
    "dynamo_semantics": {
        "what": "through the torch.compile frontend: eager raises, or answers otherwise, where Dynamo itself "
                "(torch.compile with its own 'eager' backend, no graphfuser) answers as graphfuser does "
                "(integer addcdiv, which eager refuses, traces to a true division; a float argument of -0.0 "
                "after 0.0, which Dynamo's guard takes for the 0.0 its graph holds; a gradient of addcdiv with "
                "a value, which Dynamo rewrites as x + value * (t1 / t2), whose backward overflows where "
                "eager's formula does not), or raises as graphfuser "
                "does (a copy_ into an expanded tensor, which Dynamo's fake tensors refuse)",
        "knob": "none (inherited from Dynamo; checked per case against torch.compile(backend='eager'))",
        "when_on": "",
    },
    "torchscript_bool_scalar": {
        "what": "a bool Python scalar meeting a tensor (x + True, True / t, a flag: bool argument) is typed int "
                "by TorchScript's frontend (add(x, 1)): on a bool tensor eager's answer is bool, the graph's "
                "int64; graphfuser gives eager's answer for the int (checked per case, fuzz/inherited.py)",
        "knob": "none (inherited from TorchScript's frontend: the graph graphfuser receives holds the int)",
        "when_on": "",
    },
    "gradient_at_a_kink": {
        "what": "a few gradient elements of an op whose derivative jumps (amax / amin / max / min / "
                "maximum / minimum ties, relu / clamp / threshold / hardtanh kinks) differ: graphfuser's "
                "forward values, within rounding of eager's, fall on the other side of a tie or kink",
        "knob": "none (either side is a valid subgradient; the forward values already compared equal)",
        "when_on": "",
    },
    "empty_launch": {
        "what": "eager's CUDA kernel fails to launch on an empty tensor (a CUDA launch error for an input "
                "with a zero-size dim, e.g. group_norm over 0 channels): graphfuser launches nothing and "
                "returns the empty result",
        "knob": "none (the empty result is the right answer; eager's failure is a kernel launch bug)",
        "when_on": "",
    },
    "empty_statistics_grad": {
        "what": "a normalization's parameter gradient over an input with a zero-size dim (a group norm of "
                "empty groups): eager's backward gives NaN (0 times the NaN statistics of an empty group), "
                "graphfuser 0, the gradient of a weight that multiplies no element",
        "knob": "none (0 is the gradient of an empty sum; eager's NaN is its formula's 0 * NaN)",
        "when_on": "",
    },
    "hardswish_nan_grad": {
        "what": "hardswish's gradient at a NaN input on the CPU, where eager's own kernel disagrees with "
                "itself: its vectorized loop gives NaN for the elements of whole vector chunks (32 float32 "
                "elements on an AVX-512 host) and the upstream gradient for the scalar tail (a tensor smaller "
                "than one chunk: every element); graphfuser gives NaN, the vectorized answer (matched where "
                "it is the NaN itself, or by rerunning eager with every hardswish differentiated as its "
                "vectorized chunks: fuzz/grads.py ScalarTailClamps)",
        "knob": "none (which of NaN and the upstream gradient eager gives depends on the element's position)",
        "when_on": "",
    },
    "hardtanh_nan_grad": {
        "what": "hardtanh's (and relu6's) gradient at a NaN input on the CPU, where eager's own kernel "
                "disagrees with itself: its vectorized loop gives 0 for the elements of whole vector chunks "
                "((x > min) & (x < max) is false at a NaN) and the upstream gradient for the scalar tail "
                "(x <= min || x >= max is false too); graphfuser passes the upstream gradient, the scalar "
                "answer (matched where it is the NaN itself, or by rerunning eager with every hardtanh / relu6 "
                "differentiated as its scalar tail: fuzz/grads.py ScalarTailClamps)",
        "knob": "none (which of 0 and the upstream gradient eager gives depends on the element's position)",
        "when_on": "",
    },
    "welford_inf": {
        "what": "statistics of data holding an inf, where eager's own kernels disagree: a batch / instance "
                "norm's running mean or var after the call, which eager's CUDA kernel (Welford's update, "
                "inf - inf) makes NaN and graphfuser the inf the sum gives, as eager's CPU kernel does; and "
                "the mean of var_mean / std_mean, which eager's CUDA Welford makes the inf where the inf is "
                "the last element one thread meets and NaN elsewhere, eager's CPU kernel NaN unless the inf "
                "is the segment's last, graphfuser NaN on CUDA (its partials combine, as eager's do)",
        "knob": "none (which of NaN and inf eager gives depends on its reduction's order of the elements)",
        "when_on": "",
    },
    "rms_norm_inf_row": {
        "what": "an rms_norm row holding an inf on CUDA: eager's fused CUDA kernel makes the whole row NaN "
                "(in float64 too), and so the weight's gradient; its mean square is inf, its rsqrt 0, and x * 0 "
                "is 0 for every finite x, which graphfuser gives, as eager's CPU kernel does (values and "
                "gradients checked against eager's on the CPU)",
        "knob": "none (eager's CUDA kernel; 0 is the value of its formula and of eager on the CPU)",
        "when_on": "",
    },
    "cuda_one_sixth": {
        "what": "a float64 hardsigmoid or hardswish on CUDA: eager's CUDA kernels multiply by 1/6 rounded "
                "to float32 (1.0f / 6.0f) at every precision, so their float64 answers carry a float32 "
                "relative error (hardsigmoid(3.0) is 1.0000000298); graphfuser divides by 6, as eager's "
                "CPU kernels do, and gives eager's CPU answer on the same inputs",
        "knob": "none (eager's CUDA constant; the exact value is eager's CPU answer)",
        "when_on": "",
    },
    "layer_norm_overflow_row": {
        "what": "a float32 layer norm on the CPU of finite rows whose sum of squares overflows float32 "
                "(values past 1.8e19): eager's CPU kernel gives the bias for rows of its vector width "
                "or more (its float32 M2 is inf, rstd 0) and NaN for shorter ones (its scalar mean "
                "overflows); graphfuser gives the bias for every row, as eager's long rows and its CUDA "
                "kernel do (tests/ops/test_overflowing_sums.py)",
        "knob": "none (eager's answer depends on the row's length)",
        "when_on": "",
    },
    "layer_norm_inf_grad": {
        "what": "a layer norm's input gradient on the CPU, or a group norm's on either device, where the "
                "row's (group's) weighted gradients hold an inf (a "
                "weight of -inf, an upstream gradient divided by 0): the row's sums of them are infinite, and eager's CPU formula "
                "(rstd * g * w + b * x + c, with b and c built from both sums) makes every element of the row "
                "NaN, while graphfuser's (rstd * (g * w - (xhat * m2 + m1))) gives an inf where the two "
                "infinite sums have one sign at that element and NaN where they cancel",
        "knob": "none (both answers are non-finite; graphfuser's form keeps rows of huge mean accurate)",
        "when_on": "",
    },
    "eager_overflow": {
        "what": "eager's value is not finite where the float64 reference is (an fp16 product or exp past "
                "65504, or a product that underflowed to 0 times an inf): eager's precision gives no value "
                "to hold graphfuser to there; every other element is judged",
        "knob": "none (eager's own overflow; graphfuser's fp32 intermediates may or may not overflow there)",
        "when_on": "",
    },
    "fma_contraction": {
        "what": "a gradient where graphfuser's kernels with fused multiply-adds differ from eager and the "
                "same kernels without them give eager's answer: a multiply-add keeps a product unrounded, "
                "and in a sum that eager cancels exactly (d/dx of atan2(x, 2 * x)) that product's "
                "rounding error is what is left, about one ulp of the cancelled terms",
        "knob": "PYTORCH_NVFUSER_DISABLE=fma",
        "when_on": "",
    },
    "ill_conditioned": {
        "what": "graphfuser's value differs from the float64 reference by more than eager's but is the value "
                "of a pipeline whose every op is correctly rounded (each op computed in float64 and rounded "
                "to eager's dtype; a normalization's normalized value rounded before its affine, as every "
                "kernel computes it, its deviations taken from the exact mean or from the mean rounded to "
                "the kernel's accumulation dtype): an op amplifies its input's last ulp (acos of a value that rounds to 1); "
                "or the elements where it differs from eager are those eager's own value moves as far on when "
                "every input and intermediate is nudged by two ulps (cos of a float64 product near 1e132, "
                "whose last ulp another order of the products changes)",
        "knob": "none (the output's conditioning: eager's rounded intermediates carry that ulp too)",
        "when_on": "",
    },
}

# What CUDA says when a kernel is launched with an empty grid or block (cudaErrorInvalidValue,
# cudaErrorInvalidConfiguration); torch raises it as torch.AcceleratorError (a RuntimeError).
_LAUNCH_ERRORS = ("CUDA error: invalid argument", "CUDA error: invalid configuration argument")


def eager_launch_failure_on_empty(error: BaseException, args: Sequence[Any]) -> bool:
    """The ``empty_launch`` deviation: eager raised a CUDA launch error (nothing else) and one of
    the call's tensor arguments has a zero-size dim."""
    if not isinstance(error, RuntimeError) or not str(error).startswith(_LAUNCH_ERRORS):
        return False
    return any(hasattr(a, "shape") and 0 in tuple(a.shape) for a in args)

def welford_inf(ops: Sequence[str], g: Any, e: Any, judge: Any) -> bool:
    """The ``welford_inf`` deviation: the graph has a batch / instance norm (``g`` an inf where eager's
    ``e`` is NaN) or a var_mean / std_mean (``g`` NaN where ``e`` is an inf), and ``g`` differs from
    ``e`` only there (``judge(g')``, the oracle's own comparison, passes once those elements are
    eager's in ``g'``)."""
    if not g.is_floating_point() or g.shape != e.shape:
        return False
    odd = torch.zeros(g.shape, dtype=torch.bool, device=g.device)
    if any(op in ("batch_norm", "instance_norm") for op in ops):
        odd |= e.isnan() & g.isinf()
    if any(op in ("var_mean", "std_mean") for op in ops):
        odd |= g.isnan() & e.isinf()
    if not bool(odd.any()):
        return False
    g2 = torch.where(odd, e, g.detach())
    return judge(g2) is None


def rms_norm_inf_row(ops: Sequence[str], args: Sequence[Any], fn: Any, g: Any, e: Any, judge: Any) -> bool:
    """The ``rms_norm_inf_row`` deviation: the graph has an rms_norm, ``g`` differs from eager's CUDA
    ``e`` only where ``e`` is NaN, and there ``g`` is eager's CPU answer on the same inputs."""
    if "rms_norm" not in ops or not g.is_floating_point() or g.shape != e.shape or g.device.type != "cuda":
        return False
    odd = e.isnan() & ~g.isnan()
    if not bool(odd.any()) or judge(torch.where(odd, e, g.detach())) is not None:
        return False
    return any(isinstance(c, torch.Tensor) and c.shape == g.shape and
               bool(((c[odd.cpu()].float() - g.detach().cpu()[odd.cpu()].float()).abs() <= 1e-2).all())
               for c in _cpu_outputs(fn, args))


def _cpu_outputs(fn: Any, args: Sequence[Any]) -> list:
    """Eager's outputs of ``fn`` on CPU copies of ``args`` (none where it raises: the finding stands)."""
    try:
        cpu = fn(*[a.detach().cpu().clone() if isinstance(a, torch.Tensor) else a for a in args])
    except Exception:  # noqa: BLE001 - no CPU answer
        return []
    return list(cpu) if isinstance(cpu, (tuple, list)) else [cpu]


def cuda_one_sixth(ops: Sequence[str], device: str, args: Sequence[Any], fn: Any, g: Any, close: Any) -> bool:
    """The ``cuda_one_sixth`` deviation: a graph run on CUDA has a hardsigmoid or hardswish and a
    float64 argument, and ``close(g, c)`` holds for ``c`` eager's CPU answer of that output on the
    same inputs (``close`` returns None when two tensors agree)."""
    if not {"hardsigmoid", "hardswish"} & set(ops) or not isinstance(g, torch.Tensor) or device != "cuda":
        return False
    if not any(isinstance(a, torch.Tensor) and a.dtype == torch.float64 for a in args):
        return False
    return any(isinstance(c, torch.Tensor) and c.shape == g.shape and c.dtype == g.dtype and
               close(g.detach().cpu(), c) is None for c in _cpu_outputs(fn, args))


SQRT_FLOAT32_MAX = 1.8e19      # a finite float32 whose square overflows float32


def layer_norm_overflow_row(ops: Sequence[str], args: Sequence[Any], g: Any, e: Any, judge: Any) -> bool:
    """The ``layer_norm_overflow_row`` deviation: the graph has a layer norm, runs on the CPU and a
    float argument holds a finite value past float32's square root of its max; ``g`` differs from
    eager's ``e`` only where ``e`` is NaN (``judge(g')`` passes once those elements are eager's)."""
    if "layer_norm" not in ops or not g.is_floating_point() or g.shape != e.shape or g.device.type != "cpu":
        return False
    if not any(isinstance(a, torch.Tensor) and a.is_floating_point() and a.numel()
               and bool((a.detach().isfinite() & (a.detach().abs() >= SQRT_FLOAT32_MAX)).any()) for a in args):
        return False
    odd = e.isnan() & ~g.isnan()
    return bool(odd.any()) and judge(torch.where(odd, e, g.detach())) is None


def _long_row_layer_norm(input: torch.Tensor, normalized_shape: Sequence[int], weight: Any = None,
                         bias: Any = None, eps: float = 1e-5) -> torch.Tensor:
    """eager's layer norm as its CPU kernel computes rows of its vector width or more, on rows of
    any length: statistics exact, the variance rounded to the input's dtype (inf where finite data's
    variance overflows it, so rstd is 0 and the row its bias)."""
    dims = tuple(range(input.dim() - len(normalized_shape), input.dim()))
    x = input.double()
    mean = x.mean(dims, keepdim=True)
    var = x.var(dims, unbiased=False, keepdim=True).to(input.dtype).double()
    rstd = torch.rsqrt(var + eps)
    y = torch.where(rstd == 0, torch.zeros_like(x), (x - mean) * rstd).to(input.dtype)
    if weight is not None:
        y = y * weight
    return y + bias if bias is not None else y


class LongRowLayerNorm(torch.overrides.TorchFunctionMode):
    """Runs ``F.layer_norm`` as ``_long_row_layer_norm``: eager's program with the rule graphfuser
    keeps for every row (``layer_norm_overflow_row``)."""

    def __torch_function__(self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None) -> Any:
        if func is torch.nn.functional.layer_norm:
            return _long_row_layer_norm(*args, **(kwargs or {}))
        return func(*args, **(kwargs or {}))


def layer_norm_long_rows(ops: Sequence[str], args: Sequence[Any], fn: Any, where: int, g: Any, judge: Any) -> bool:
    """The ``layer_norm_overflow_row`` deviation past the layer norm (a comparison of its output, a
    reduction of it): the graph has a layer norm, runs on the CPU and a float argument holds a finite
    value past float32's square root of its max; ``g`` passes against output ``where`` of the
    program run with every layer norm's rows as eager's long rows (``LongRowLayerNorm``; fuzz
    graph 1083 of CPU seed 34719: ``expm1(log1p(layer_norm(x))) < 1`` over rows of 3 holding 3e38,
    eager's NaN rows False, graphfuser's bias rows True)."""
    if "layer_norm" not in ops or g.device.type != "cpu" or where < 0:
        return False
    if not any(isinstance(a, torch.Tensor) and a.is_floating_point() and a.numel()
               and bool((a.detach().isfinite() & (a.detach().abs() >= SQRT_FLOAT32_MAX)).any()) for a in args):
        return False
    try:
        with torch.no_grad(), LongRowLayerNorm():
            out = fn(*args)
    except Exception:  # noqa: BLE001 - no such run: the finding stands
        return False
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    want = outs[where] if where < len(outs) else None
    return isinstance(want, torch.Tensor) and tuple(want.shape) == tuple(g.shape) and judge(g, want) is None


def layer_norm_inf_grad(ops: Sequence[str], args: Sequence[Any], g: Any, e: Any, judge: Any) -> bool:
    """The ``layer_norm_inf_grad`` deviation: the graph has a layer norm and runs on the CPU; ``g``
    differs from eager's ``e`` only where ``e`` is NaN and ``g`` is an inf (``judge(g')`` passes
    once those elements are eager's). The row's weighted gradients hold an inf: an infinite weight
    (fuzz graph 186 of CPU seed 34701) or an upstream gradient divided by 0 (graph 1306 of CPU seed
    34717). ``args``: unused, kept for the other matchers' signature. Eager's group norm builds dx
    from the two sums on either device as well: an upstream gradient of -inf into a group of 4
    (fp16, CUDA seed 36401, graph 469; the same on the CPU)."""
    if not g.is_floating_point() or g.shape != e.shape or g.device.type == "meta":
        return False
    plain = {o.split(":")[-1] for o in ops}
    if not ("group_norm" in plain or ("layer_norm" in plain and g.device.type == "cpu")):
        return False
    odd = e.isnan() & g.isinf()
    return bool(odd.any()) and judge(torch.where(odd, e, g.detach())) is None


# (class name in issue 10, categories, ops or None for any op; "alias:*" matches every alias statement)
KNOWN_DEFECTS: list[tuple[str, frozenset[str], Optional[frozenset[str]]]] = [
    # none open: class 2 (the moments of normalizations) is fixed (ops/reduction.py shifted_moments)
]


def known_defect(category: str, ops: list[str]) -> Optional[str]:
    """The known-defect class a failure of ``category`` in a graph of ``ops`` belongs to, if any."""
    for name, cats, only in KNOWN_DEFECTS:
        if category in cats and (only is None or any(o in only or o.split(":")[0] + ":*" in only for o in ops)):
            return name
    return None
