"""Normalization rows of the op table: layer / RMS / batch / instance / group norm.

Like the reductions (``reduction.py``, whose row class, registration and moments they share),
every row decomposes into the kernel IR's reduction primitives plus pointwise ones: the
normalizations with statistics take ``(mean, M2)`` from ``reduction.moments`` (sums shifted by
the segment's first element: exact for constant rows), RMS norm a plain mean of squares, and
batch norm in inference reads its running statistics. Each row also gives its ``DimPlan``: the
normalized dims (the trailing ``normalized_shape`` dims, or every dim past N / past N and C) and
how weight, bias and running statistics line up with the input. A ``normalized_shape`` is a
list literal, a constant, or an int list the graph computes (``x.shape[-1:]``) that was the
same on every profiling run: the group holds it as a constant and its guard checks it.
"""
from __future__ import annotations

from typing import Any, Optional, Union

import torch
from torch._prims_common import suggest_memory_format

from ..config import config
from ..ir.kir import Expr
from ..ir.graph import Node, Value
from ..ir.types import TensorType
from .axes import DimPlan
from .norm_programs import batch_norm_train_eager, layer_norm_train_eager, split_mean_tensors
from .reduction import arg_expr, list_items, mean_of, need_const, rank_of, reduction, same_float, shifted_moments
from .table import OpCall


# -- dims -----------------------------------------------------------------------------------

# -- batch norm in training: the policy the row and the batch_norm_training pass share -------
# PYTORCH_NVFUSER_DISABLE=batch_norm_training leaves batch norm in training to eager (cuDNN on
# CUDA). Fused, its statistics reduce over N and the spatial dims per channel: on CUDA the outer
# and split reduction schedules (codegen/reduction_schedule.py) spread that over the whole grid.
DISABLED_REASON = "batch_norm in training runs eager's kernel (PYTORCH_NVFUSER_DISABLE=batch_norm_training)"
# On CUDA the fused form is opt-in: measured on an H100 (fwd + bwd of BN(train) + ReLU, fp32
# [64, 256, 56, 56]) it took 1.23 ms channels-last and 1.07 ms NCHW against cuDNN's 0.95 / 1.05 ms.
CUDA_REASON = "batch_norm in training on CUDA runs cuDNN (PYTORCH_NVFUSER_DISABLE=cuda_batch_norm_training)"


def cuda_training_fused() -> bool:
    """Whether a training batch norm on CUDA fuses (the default) or runs cuDNN. Fused, with the
    statistics saved for the backward (``autodiff/saved.py``), BN(train)+ReLU [64, 256, 56, 56]
    fp32 took 0.673 ms (channels-last) and 0.588 ms (NCHW) per forward + backward on an H100,
    against cuDNN's 0.960 / 1.053 and torch.compile's 0.805 / 0.670 in the same run."""
    return not config.is_disabled("cuda_batch_norm_training")


def norm_len(v: Any) -> Optional[int]:
    """Length of a ``normalized_shape`` argument: a constant list (or a constant value holding
    one) or a ``prim::ListConstruct``."""
    if isinstance(v, Value) and v.is_constant:
        v = v.constant()
    if isinstance(v, (list, tuple)):
        return len(v)
    if isinstance(v, int):
        return 1
    if isinstance(v, Value) and v.node is not None and v.node.kind == "prim::ListConstruct":
        return len(v.node.inputs)
    return None


def _layer_norm_plan(node: Node, args: dict, consts: dict) -> Union[DimPlan, str]:
    rank = rank_of(args["input"])
    k = norm_len(args["normalized_shape"])
    if k is None:
        return ("normalized_shape is neither a list literal nor an int list that every profiling run saw "
                "with one value (its length must be known)")
    if not 0 < k <= rank:
        return f"normalized_shape of length {k} for a rank-{rank} input"
    plan = {"input": tuple(range(rank))}
    for name in ("weight", "bias"):
        if isinstance(args.get(name), Value):
            if rank_of(args[name]) != k:
                return f"{name} has rank {rank_of(args[name])}, normalized_shape has {k} dims"
            plan[name] = tuple(range(rank - k, rank))
    red = tuple(range(rank - k, rank))
    outs = [tuple(range(rank))] + [tuple(None if d in red else d for d in range(rank))] * (len(node.outputs) - 1)
    return DimPlan(rank, plan, outs, red)


def _channel_plan(reduce_spatial: bool):
    def plan(node: Node, args: dict, consts: dict) -> Union[DimPlan, str]:
        rank = rank_of(args["input"])
        if rank < 2:
            return f"{node.kind} needs an input of rank >= 2"
        p = {"input": tuple(range(rank))}
        for name in ("weight", "bias", "running_mean", "running_var"):
            if isinstance(args.get(name), Value):
                if rank_of(args[name]) != 1:
                    return f"{name} must be 1-D"
                p[name] = (1,)
        if reduce_spatial:
            red = tuple(range(2, rank)) if args.get("use_input_stats") else ()
        else:       # batch_norm: batch statistics per channel in training
            red = (0,) + tuple(range(2, rank)) if args.get("training") else ()
        return DimPlan(rank, p, [tuple(range(rank))], red)
    return plan


def _group_norm_plan(node: Node, args: dict, consts: dict) -> Union[DimPlan, str]:
    """num_groups == 1: every dim but N is reduced, weight and bias line up with C.

    Other group counts are left to eager: per (N, group) statistics over C/G channels need the
    C dim split into a (G, C/G) pair of loop axes, and a loop axis here is always one whole
    tensor dim (the launcher sizes and strides it from that dim, and the guards check no
    concrete sizes). num_groups == C is the same as instance norm only while C stays equal to
    num_groups, which no guard checks, so it is not fused either."""
    rank = rank_of(args["input"])
    if rank < 2:
        return f"{node.kind} needs an input of rank >= 2"
    g = args.get("num_groups")
    if not isinstance(g, int) or isinstance(g, bool):
        return "group_norm with a run-time num_groups is not fused"
    if g != 1:
        sizes = getattr(args["input"].type, "sizes", None)
        if sizes is not None and sizes[1] == g:
            return (f"group_norm with num_groups == C == {g} is not fused: it equals instance norm only "
                    f"while C stays {g}, and the guards never check concrete sizes (a call with C = "
                    f"{2 * g} would pass them); only num_groups=1 is fused")
        return (f"group_norm with num_groups={g} is not fused (only num_groups=1): statistics per group "
                f"of C/{g} channels need the channel dim split into ({g}, C/{g}) loop axes, and a loop "
                f"axis is one whole tensor dim")
    p = {"input": tuple(range(rank))}
    for name in ("weight", "bias"):
        if isinstance(args.get(name), Value):
            if rank_of(args[name]) != 1:
                return f"{name} must be 1-D"
            p[name] = (1,)
    return DimPlan(rank, p, [tuple(range(rank))], tuple(range(1, rank)))


def _trailing_checks(node: Node, args: dict) -> list[tuple[Value, int, Any]]:
    """layer_norm / rms_norm: input.shape[-k:] == normalized_shape (eager raises otherwise)."""
    v, items = args["input"], list_items(args.get("normalized_shape"))
    if not isinstance(v, Value) or items is None:
        return []
    rank, k = rank_of(v), len(items)
    return [(v, rank - k + j, e) for j, e in enumerate(items)]


# -- lowerings ------------------------------------------------------------------------------
def _affine(call: OpCall, y: Expr) -> Expr:
    if isinstance(call.args.get("weight"), Expr):
        y = call.b.mul(y, call.x("weight"))
    if isinstance(call.args.get("bias"), Expr):
        y = call.b.add(y, call.x("bias"))
    return y


def _normalize(call: OpCall, acc: Optional[torch.dtype] = None,
               stats: Optional[torch.dtype] = None) -> tuple[Expr, Expr, Expr]:
    y, _, _, mean, rstd = _normalize_parts(call, acc, stats)
    return y, mean, rstd


def _batch_stats_acc(call: OpCall) -> Optional[torch.dtype]:
    """What a batch norm's (and an instance norm's, which eager runs as one) batch statistics
    accumulate in: float64 for float32 on the CPU, eager's CPU accumulation type there
    (``acc_type<float, false>``). Float32 sums of data near float's range overflow where eager's
    do not (fuzz graph 1382 of CPU seed 33421: [3e38, 0.33, 0.15] gave NaN statistics)."""
    t = call.types.get("input")     # (the value's dtype: a fused fp16 input is computed in float32)
    cpu32 = call.device_type == "cpu" and t is not None and t.dtype == torch.float32
    return torch.float64 if cpu32 else None       # (fp16 / bf16 accumulate in float there, as here)


def split_mean(b, k: Expr, c: Expr) -> tuple[Expr, Expr]:
    """``(hi, lo)``: ``k + c`` rounded, and its rounding error (Knuth's two-sum: ``hi + lo`` is
    ``k + c`` exactly). ``(x - hi) - lo`` is then ``x - mean`` to about one rounding of the
    result itself, whatever the shift ``k``: ``x - hi`` is exact for ``x`` near the mean (a
    huge mean with a small spread keeps its digits, as ``(x - k) - c`` did) and no longer
    carries ``x - k``'s rounding for ``x`` far from ``k`` (``x`` near a mean of 0.01 in a row
    whose first element is 2.5 lost 2e-7, 100x eager's error, which a later division by ``x``
    showed: fuzz graph 600 of CPU seed 33914)."""
    hi = b.add(k, c)
    kb = b.sub(hi, k)
    return hi, b.add(b.sub(k, b.sub(hi, kb)), b.sub(c, kb))


def _normalize_parts(call: OpCall, acc: Optional[torch.dtype] = None,
                     stats: Optional[torch.dtype] = None) -> tuple[Expr, Expr, Expr, Expr, Expr]:
    """(y, hi, lo, mean, rstd) of a normalization by the statistics of its segments: sums
    accumulated in ``acc`` (default: the compute dtype), then ``M2``, the variance, ``rstd``,
    ``hi + lo`` (the mean) and ``y = ((x - hi) - lo) * rstd`` [* weight] [+ bias] in ``stats``
    (default: ``acc``). Wider sums with narrower statistics keep the narrower dtype's overflow: an
    ``M2`` past its range is inf there, so ``rstd`` is 0, as eager's float32 Welford has it."""
    b, x = call.b, arg_expr(call, "input")
    _, c, mean, m2 = shifted_moments(call, x, acc)
    ct = acc or call.compute
    st = stats or ct
    var = b.div(b.cast(m2, st), b.reduction_size(st))
    rstd = b.call("rsqrt", b.add(var, call.const(call["eps"])))
    # Finite data whose sums overflow have M2 inf (rstd 0) and an offset c that may be inf or
    # NaN: the offset is taken as 0 there, so each finite x - k gives (x - k) * 0 = 0 and the row
    # its bias, eager's value (its running mean stays finite), on CUDA and on the CPU (a float32
    # layer norm of edge values gave NaN: fuzz graph 23 of CUDA seed 33802, graph 127 of CPU seed
    # 33914). A row value, not a test per element. Data holding an inf or a NaN have M2 NaN, so
    # their rows stay NaN.
    c_row = b.where(b.call("isfinite", c), c, call.const(0, ct))
    xc = b.cast(x, ct)
    hi, lo = split_mean(b, b.at_first(xc), c_row)     # (the shift shifted_moments took: one load)
    if st != ct:
        # the mean as two values of the statistics' dtype: hi rounded, lo the rest
        his = b.cast(hi, st)
        hi, lo = his, b.cast(b.add(b.sub(hi, b.cast(his, ct)), lo), st)
        xc = b.cast(x, st)
    y = b.mul(b.sub(b.sub(xc, hi), lo), rstd)
    return _affine(call, y), hi, lo, mean, rstd


def _row_sums_acc(call: OpCall) -> Optional[torch.dtype]:
    """What a layer norm's sums accumulate in: float64 for float32 compute on the CPU, whose
    statistics stay float32 (``_normalize_parts``'s ``stats``).

    The one-pass moments are sums shifted by the row's first element ``k``: float32 sums hold
    ``N * (mean - k)`` and ``N * (mean - k)^2`` to float32's resolution, so a first element far
    from the mean (an outlier, or 2.5 in a row of mean 0.0024 and spread 1) leaves the mean good
    only to float32's resolution at ``|k - mean|`` and the variance to that times
    ``((k - mean) / std)^2`` (a row of N(0, 1) after -3000: rstd off by 1e-4). Elements near the
    mean then came out with 100x eager's error, which a later division by them showed (fuzz
    graph 600 of CPU seed 33914). On CUDA float64 sums cost bandwidth (a bf16 layer norm
    [65536, 384] on an H100: 54.9 to 69.0 us): there the sums stay float32, good for a first
    element within a few spreads of the mean."""
    return torch.float64 if call.device_type == "cpu" and call.compute == torch.float32 else None


def _layer_norm(call: OpCall) -> Expr:
    """(x - mean) * rsqrt(var + eps) [* weight] [+ bias]"""
    return _normalize(call, _row_sums_acc(call), call.compute)[0]


def _native_layer_norm(call: OpCall) -> tuple[Expr, Expr, Expr]:
    """(layer_norm(x), mean, rstd)"""
    return _normalize(call, _row_sums_acc(call), call.compute)


def _layer_norm_train(call: OpCall) -> tuple[Expr, Expr, Expr, Expr]:
    """(layer_norm(x), shift, offset, rstd): the layer norm of ``_layer_norm`` and the per-row
    statistics its output is made of, ``y = ((x - shift) - offset) * rstd * w + b`` with
    ``shift + offset`` the row's mean (``split_mean``). A differentiable group saves them for
    its backward (``autodiff/saved.py``), which then reduces each row once (the gradient's two
    means) instead of rebuilding its statistics first."""
    y, hi, lo, _, rstd = _normalize_parts(call, _row_sums_acc(call), call.compute)
    return y, hi, lo, rstd


def _rms_norm(call: OpCall) -> Expr:
    """x * rsqrt(mean(x^2) + eps) [* weight]"""
    b, x = call.b, arg_expr(call, "input")
    eps = call["eps"]
    if eps is None:
        eps = torch.finfo(call.out_dtype).eps
    ms = mean_of(call, b.mul(x, x))
    return _affine(call, b.mul(x, b.call("rsqrt", b.add(ms, call.const(eps)))))


def _batch_norm(call: OpCall) -> Expr:
    """(x - running_mean) * rsqrt(running_var + eps) [* weight] [+ bias]; in training, the batch
    statistics over every dim but C (the running stats' update is separate nodes,
    passes/batch_norm.py)"""
    if call.args.get("training"):
        return _normalize(call, _batch_stats_acc(call))[0]
    b, x = call.b, arg_expr(call, "input")
    if call.device_type == "cpu" and _cpu_fast_path(call):
        return _batch_norm_folded(call, x)
    rv = call.x("running_var")
    if call.device_type != "cpu":
        # eager's CUDA kernels (Normalization.cu, every layout): (x - mean) * weight * invstd + bias,
        # the weight before the invstd (near float's max the order decides what overflows)
        y = b.sub(x, call.x("running_mean"))
        if isinstance(call.args.get("weight"), Expr):
            y = b.mul(y, call.x("weight"))
        y = b.mul(y, b.call("rsqrt", b.add(rv, call.const(call["eps"]))))
        return b.add(y, call.x("bias")) if isinstance(call.args.get("bias"), Expr) else y
    rounding = _param_rounding(call)
    if rounding is None:
        invstd = b.call("rsqrt", b.add(rv, call.const(call["eps"])))
    else:
        # eager's CPU kernel for a non-contiguous operand computes invstd as tensor ops in the
        # running variance's dtype: fp16 / bf16 round 1 / sqrt(var + eps) at every step (an eps
        # of 1e-12 added to a zero fp16 variance is 0: invstd inf)
        r = lambda e: b.call(rounding, e)  # noqa: E731
        invstd = r(b.call("reciprocal", r(b.call("sqrt", r(b.add(rv, call.const(call["eps"])))))))
    # (eager's CPU kernel for non-contiguous operands)
    return _affine(call, b.mul(b.sub(x, call.x("running_mean")), invstd))


_BN_OPERANDS = ("weight", "bias", "running_mean", "running_var")


def _contiguous(t: TensorType, channels_last: bool = False) -> bool:
    """Whether a profiled layout is torch-contiguous (or channels-last): size-1 dims aside, the
    dims run outer to inner in order and each is dense."""
    if t.stride_order is None or t.contiguity is None or t.sizes is None:
        return True
    dims = [d for d in range(len(t.sizes)) if t.sizes[d] != 1]
    order = [d for d in ((0,) + tuple(range(2, len(t.sizes))) + (1,)) if d in dims] if channels_last else dims
    return list(t.stride_order) == order and all(t.contiguity)


def _cpu_fast_path(call: OpCall) -> bool:
    """Whether eager's CPU batch norm takes its fast path here: the input contiguous or
    channels-last and every per-channel operand contiguous (a stride-0 input or a stepped-slice
    weight sends it down the general path, which computes differently)."""
    x = call.types.get("input")
    if x is not None and not (_contiguous(x) or (x.rank == 4 and _contiguous(x, channels_last=True))):
        return False
    return all(_contiguous(call.types[n]) for n in _BN_OPERANDS if n in call.types)


def _param_rounding(call: OpCall) -> Optional[str]:
    t = call.types.get("running_var")
    return {torch.float16: "round_half", torch.bfloat16: "round_bf16"}.get(t.dtype) if t is not None else None


def _batch_norm_folded(call: OpCall, x: Expr) -> Expr:
    """eager's CPU fast path: the channel's terms folded first, x * alpha + beta with alpha =
    invstd * weight and beta = bias - mean * alpha (in float for fp16 / bf16). Where the terms
    overflow or meet an infinity this differs from (x - mean) * invstd * weight + bias (an
    infinite weight: x * inf - mean * inf is NaN where x and mean share a sign)."""
    b = call.b
    invstd = b.call("rsqrt", b.add(call.x("running_var"), call.const(call["eps"])))
    alpha = b.mul(invstd, call.x("weight")) if isinstance(call.args.get("weight"), Expr) else invstd
    bias = call.x("bias") if isinstance(call.args.get("bias"), Expr) else call.const(0)
    return b.add(b.mul(x, alpha), b.sub(bias, b.mul(call.x("running_mean"), alpha)))


def _batch_norm_train(call: OpCall) -> tuple[Expr, Expr, Expr, Expr]:
    """(batch_norm(x) in training, shift, offset, rstd): the batch norm of ``_normalize`` and the
    per-channel statistics its output is made of, ``y = ((x - shift) - offset) * rstd * w + b``
    with ``shift + offset`` the channel's mean exactly (``split_mean``). A differentiable group saves them for its backward
    (``autodiff/saved.py``), which then reads x twice, not three times."""
    y, hi, lo, _, rstd = _normalize_parts(call, _batch_stats_acc(call))
    return y, hi, lo, rstd


def _group_norm(call: OpCall) -> Expr:
    """per (n, group): (x - mean) * rsqrt(var + eps) [* weight] [+ bias]; float32 statistics on
    the CPU accumulate in float64, as the batch and instance norms' do (one group, which is not
    rewritten as an instance norm: a sample holding 3e38 gave 0 everywhere, its variance inf and
    the rsqrt 0, where float64 gives -0.41 ... 2.45 and eager's float32 NaN; fuzz graph 1018 of
    seed 33691)"""
    return _normalize(call, _batch_stats_acc(call))[0]


def _instance_norm(call: OpCall) -> Expr:
    """per (n, c): (x - mean) * rsqrt(var + eps) [* weight] [+ bias]; running stats when not use_input_stats"""
    if not call["use_input_stats"]:
        return _batch_norm(call)
    return _normalize(call, _batch_stats_acc(call))[0]


# -- checks ---------------------------------------------------------------------------------
def _running_stats_need_grad(args: dict) -> Optional[str]:
    """Running stats that require grad: eager raises for a non-empty input (native_batch_norm is
    not differentiable with respect to them) and returns an output without grad for an empty
    one; a fused group would make an output that requires grad. Left to eager."""
    if any(isinstance(args.get(n), Value) and getattr(args[n].type, "requires_grad", False)
           for n in ("running_mean", "running_var")):
        return "running_mean / running_var require grad (eager raises: not differentiable); not fused"
    return None


def cpu_mixed_dtypes(x: Value, params: list) -> Optional[str]:
    """Eager's CPU batch norm takes parameters (weight, bias, running stats) of the input's dtype,
    or float32 ones for an fp16 / bf16 input; other mixes raise "mixed dtype (CPU)" for a
    non-empty input. Left to eager, which raises (or returns the empty result)."""
    t = x.type
    if not isinstance(t, TensorType) or t.device is None or t.device.type != "cpu":
        return None
    dts = {p.type.dtype for p in params if isinstance(p, Value) and isinstance(p.type, TensorType)}
    if not dts or dts == {t.dtype} or (t.dtype in (torch.float16, torch.bfloat16) and dts == {torch.float32}):
        return None
    return f"parameters of dtypes {sorted(map(str, dts))} for a {t.dtype} input (eager raises: mixed dtype (CPU))"


def _batch_norm_check(node: Node, args: dict, consts: dict) -> Optional[str]:
    why = _running_stats_need_grad(args)
    if why:
        return why
    why = cpu_mixed_dtypes(node.inputs[0], [args.get(n) for n in ("weight", "bias", "running_mean", "running_var")])
    if why:
        return why
    training = consts.get("training")
    if training is None:
        return "batch_norm with a run-time training flag is not fused"
    if training:
        if config.is_disabled("batch_norm_training"):
            return DISABLED_REASON
        device = getattr(node.inputs[0].type, "device", None) if node.inputs else None
        if device is not None and device.type == "cuda" and not cuda_training_fused():
            return CUDA_REASON
        if any(isinstance(args.get(n), Value) for n in ("running_mean", "running_var")):
            return ("batch_norm in training mode updates its running stats in place; not fused (the "
                    "batch_norm_training pass splits the update off where the flag is known True and the "
                    "running stats are Tensor-typed)")
        return need_const("eps")(node, args, consts)
    if not isinstance(args.get("running_mean"), Value) or not isinstance(args.get("running_var"), Value):
        return "batch_norm inference needs running_mean and running_var tensors"
    return need_const("eps")(node, args, consts)


def _instance_norm_check(node: Node, args: dict, consts: dict) -> Optional[str]:
    why = _running_stats_need_grad(args)
    if why:
        return why
    use = consts.get("use_input_stats")
    if use is None:
        return "instance_norm with a run-time use_input_stats is not fused"
    given = [isinstance(args.get(n), Value) for n in ("running_mean", "running_var")]
    if use and any(given):
        return ("instance_norm with input stats updates the running stats in place; not fused (the "
                "batch_norm_training pass splits the update off where use_input_stats is known True and "
                "the running stats are Tensor-typed)")
    if not use and not all(given):
        return "instance_norm without input stats needs running_mean and running_var tensors"
    return need_const("eps")(node, args, consts)


_REDUCED_FLOATS = (torch.float16, torch.bfloat16)


def check_group_norm(input: torch.Tensor, num_groups: int, weight: Optional[torch.Tensor],
                     bias: Optional[torch.Tensor]) -> None:
    """Raise eager ``group_norm``'s error for these arguments, if it has one (the host program
    calls this where ``group_norm`` was decomposed into an instance norm of a grouped view,
    which checks none of it: ``passes/decompose.py``).

    A cheap screen of eager's preconditions (rank, ``C % num_groups``, 1-D weight and bias of C
    elements on the input's device, and the mixed-dtype rule) decides whether eager's own
    ``group_norm`` runs on the arguments; it raises eager's exact error. The mixed-dtype rule is
    the device's: on the CPU, parameters of another dtype than the input must all be float32
    with a float16 / bfloat16 input; the CUDA kernel passes that check too but then reads the
    parameters as the input's dtype ("expected scalar type BFloat16 but found Float" for a
    spatial size above 1), so there any parameter of another dtype goes to eager."""
    suspect = input.dim() < 2 or not input.is_floating_point() or num_groups <= 0 \
        or input.shape[1] % num_groups != 0
    params = [p for p in (weight, bias) if p is not None]
    if not suspect:
        c = input.shape[1]
        suspect = any(p.dim() != 1 or p.shape[0] != c or p.device != input.device for p in params)
    if not suspect and any(p.dtype != input.dtype for p in params):
        suspect = input.device.type != "cpu" or input.dtype not in _REDUCED_FLOATS \
            or any(p.dtype != torch.float32 for p in params)
    if suspect:
        torch.group_norm(input, num_groups, weight, bias)


def group_norm_layout(y: torch.Tensor, input: torch.Tensor) -> torch.Tensor:
    """``y`` (a contiguous ``group_norm`` result) in the memory format eager's ``group_norm`` gives
    its output for ``input``: ``input.suggest_memory_format()`` on the CPU (channels-last for a
    channels-last 4-D or 5-D input), contiguous on other devices. The end of ``group_norm``'s
    decomposition (``passes/decompose.py``), whose views give a contiguous result.

        >>> x = torch.randn(2, 4, 3, 3).contiguous(memory_format=torch.channels_last)
        >>> group_norm_layout(torch.zeros(2, 4, 3, 3), x).stride()
        (36, 1, 12, 4)
    """
    if input.device.type == "cpu" and input.dim() in (4, 5):
        fmt = suggest_memory_format(input)
        if fmt != torch.contiguous_format:
            return y.contiguous(memory_format=fmt)
    return y.contiguous()


def grouped_instance_norm(input: torch.Tensor, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor],
                          running_mean: Optional[torch.Tensor], running_var: Optional[torch.Tensor],
                          use_input_stats: bool, momentum: float, eps: float, cudnn_enabled: bool) -> torch.Tensor:
    """What the host program runs for the ``instance_norm`` of ``group_norm``'s grouped view
    ``[N, G, C/G, S]`` (``passes/decompose.py``) where it is not fused: profiling calls, the
    fallback, unfused groups. It computes what the fused kernel does (``shifted_moments``): the
    moments of ``d = x - k``, ``k`` the group's first element, then ``((x - hi) - lo) * rsqrt(var +
    eps)`` with ``hi + lo = k + mean(d)`` exactly (``split_mean``), in float32 (float64 for a
    float64 input). A constant group gives 0 and a huge mean with a small spread keeps its digits.
    Neither of eager's kernels does: ``instance_norm`` is batch norm underneath, whose CPU mean is
    an fp32 sum divided by N (a constant group with a small eps comes out as -0.001), and
    ``group_norm`` applies ``x * rstd - mean * rstd``, which cancels for a huge mean.

        >>> x = torch.full((2, 3, 4, 5), 1 / 3)
        >>> grouped_instance_norm(x, None, None, None, None, True, 0.0, 1e-12, True).abs().max()
        tensor(0.)
    """
    if input.dim() < 3 or not use_input_stats or input.numel() == 0 or not input.is_floating_point() or \
            any(t is not None for t in (weight, bias, running_mean, running_var)):
        return torch.instance_norm(input, weight, bias, running_mean, running_var, use_input_stats, momentum,
                                   eps, cudnn_enabled)
    x = input if input.dtype == torch.float64 else input.float()
    dims = tuple(range(2, x.dim()))
    k = x[(slice(None), slice(None)) + (slice(0, 1),) * len(dims)]
    d = x - k
    var, mean = torch.var_mean(d, dims, correction=0, keepdim=True)
    # contiguous, as eager instance_norm's output (the decomposition reshapes it back to the input's
    # shape). An fp16 / bf16 input's result stays float32 (``widened``): the decomposition's affine
    # then runs in float32 and its type_as rounds once, as eager's group_norm and the fused kernel
    # do (rounded here, then scaled and shifted in fp16, an fp16 group norm near tan's pole was an
    # ulp off in the profiling call: fuzz graph 7399 of seed 9797)
    hi, lo = split_mean_tensors(k, mean)
    return (((x - hi) - lo) * torch.rsqrt(var + eps)).contiguous()


def widened(node) -> bool:
    """Whether ``node`` is the decomposition's instance norm, whose fp16 / bf16 input gives a
    float32 result (``grouped_instance_norm``): the op table accepts that profiled dtype."""
    return getattr(node.schema, "op", None) is grouped_instance_norm


_LN = ("input", "normalized_shape", "weight=None", "bias=None", "eps=1e-05", "cudnn_enable=True")
reduction("layer_norm", ("aten::layer_norm",), "normalization", _LN, _layer_norm, planner=_layer_norm_plan,
          out_dtype=same_float, consts=("eps",), shape_args=("normalized_shape",), profiled_lists=("normalized_shape",), size_checks=_trailing_checks,
          eager=lambda input, ns, weight=None, bias=None, eps=1e-5, cudnn_enable=True:
          torch.layer_norm(input, ns, weight, bias, eps),
          doc="(x - mean) * rsqrt(var + eps) * weight + bias over the last dims")
reduction("native_layer_norm", ("aten::native_layer_norm",), "normalization",
          ("input", "normalized_shape", "weight", "bias", "eps"), _native_layer_norm, planner=_layer_norm_plan,
          out_dtype=same_float, consts=("eps",), shape_args=("normalized_shape",), profiled_lists=("normalized_shape",), size_checks=_trailing_checks,
          n_outputs=3,
          eager=torch.native_layer_norm, doc="(layer_norm, mean, rstd)")
reduction("layer_norm_train", ("graphfuser::layer_norm_train",), "normalization",
          ("input", "normalized_shape", "weight", "bias", "eps"), _layer_norm_train, planner=_layer_norm_plan,
          out_dtype=same_float, consts=("eps",), shape_args=("normalized_shape",),
          profiled_lists=("normalized_shape",), size_checks=_trailing_checks, n_outputs=4,
          eager=layer_norm_train_eager,
          doc="layer norm and its per-row statistics (shift, offset, rstd), which a differentiable group "
              "saves for its backward")
reduction("rms_norm", ("aten::rms_norm",), "normalization", ("input", "normalized_shape", "weight=None", "eps=None"),
          _rms_norm, planner=_layer_norm_plan, out_dtype=same_float, consts=("eps",),
          shape_args=("normalized_shape",), profiled_lists=("normalized_shape",), size_checks=_trailing_checks, eager=torch.rms_norm,
          doc="x * rsqrt(mean(x^2) + eps) * weight")
reduction("batch_norm", ("aten::batch_norm",), "normalization",
          ("input", "weight", "bias", "running_mean", "running_var", "training", "momentum", "eps",
           "cudnn_enabled"), _batch_norm, planner=_channel_plan(False), out_dtype=same_float,
          consts=("training", "eps"), check=_batch_norm_check,
          eager=lambda input, w, b, rm, rv, training, momentum, eps, cudnn=True:
          torch.batch_norm(input, w, b, rm, rv, training, momentum, eps, cudnn),
          doc="batch norm: running stats, or batch stats over N and the spatial dims in training (channel dim 1, "
              "any memory format)")
def _batch_norm_train_plan(node: Node, args: dict, consts: dict) -> Union[DimPlan, str]:
    plan = _channel_plan(False)(node, {**args, "training": True}, consts)
    if isinstance(plan, str):
        return plan
    stats = tuple(None if d in plan.reduced else d for d in range(plan.rank))
    return DimPlan(plan.rank, plan.args, [plan.outputs[0]] + [stats] * 3, plan.reduced)


reduction("batch_norm_train", ("graphfuser::batch_norm_train",), "normalization",
          ("input", "weight", "bias", "eps"), _batch_norm_train, planner=_batch_norm_train_plan,
          out_dtype=same_float, consts=("eps",), n_outputs=4, eager=batch_norm_train_eager,
          doc="batch norm in training and its statistics (shift, offset, rstd), which a differentiable "
              "group saves for its backward")
reduction("instance_norm", ("aten::instance_norm",), "normalization",
          ("input", "weight", "bias", "running_mean", "running_var", "use_input_stats", "momentum", "eps",
           "cudnn_enabled"), _instance_norm, planner=_channel_plan(True), out_dtype=same_float,
          consts=("use_input_stats", "eps"), check=_instance_norm_check,
          eager=lambda input, w, b, rm, rv, use, momentum, eps, cudnn=True:
          torch.instance_norm(input, w, b, rm, rv, use, momentum, eps, cudnn),
          doc="per-sample, per-channel normalization over the spatial dims")
reduction("group_norm", ("aten::group_norm",), "normalization",
          ("input", "num_groups", "weight=None", "bias=None", "eps=1e-05", "cudnn_enabled=True"), _group_norm,
          planner=_group_norm_plan, out_dtype=same_float, consts=("num_groups", "eps"),
          eager=lambda input, num_groups, weight=None, bias=None, eps=1e-5, cudnn_enabled=True:
          torch.group_norm(input, num_groups, weight, bias, eps, cudnn_enabled),
          doc="per-sample normalization over C and the spatial dims (fused for num_groups=1)")
