"""How the op-table-wide edge check (``test_op_edges.py``) calls every row of ``graphfuser.ops.ROWS``.

Each row maps to the Python expressions that use it, over the inputs of one generated function:

- ``x``: ``(K, K)``, read through a stride-0 (expanded) dim: ``x[i, j] = VALUES[i]``
- ``y``: ``(K, K)``, a stepped slice (``[:, ::2]`` of a ``(K, 2K)`` tensor): ``y[i, j] = VALUES[j]``
- ``v``: ``(K,)``, a stepped slice: ``v[j] = VALUES[j]``; ``p``: ``(K,)``, dense and positive
- ``flag: bool`` (True) and ``n: int`` (2), run-time Python scalars the executor profiles

(TorchScript's constant pooling merges ``0.0`` and ``-0.0`` of one function, as
``torch.jit.script`` itself does: no expression here spells both) so that every pair of edge values meets in a binary op (signed zeros, infinities, NaN, a huge and
a subnormal-sized value). Operator rows take bool, int and float Python scalars on either side.
Rows that a user's code never spells (the random rows the dropout pass makes, autocast's casts)
are listed in ``EXEMPT`` with the reason and the test that covers them instead.
"""
from __future__ import annotations

F = "torch.nn.functional"
K = 12

OPERATORS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floor_divide": "//", "remainder": "%",
             "pow": "**", "bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^", "eq": "==", "ne": "!=",
             "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
# Python scalars an operator meets on either side: bool, int, float (signed zero, inf, NaN) and
# the run-time ``flag`` / ``n`` arguments
SCALARS = ("True", "False", "2", "0", "-0.0", "0.5", "float('inf')", "float('nan')", "flag", "n")


def _operator(sym: str) -> list[str]:
    forms = [f"x {sym} y", f"y {sym} x"]
    for s in SCALARS:
        forms += [f"x {sym} {s}", f"{s} {sym} y"]
    return forms


def _binary(name: str, scalar_other: bool = False, scalars: tuple = ("True", "2", "-0.0", "n")) -> list[str]:
    forms = [f"torch.{name}(x, y)", f"torch.{name}(y, x)"]
    if scalar_other:
        forms += [f"torch.{name}(y, {s})" for s in scalars]
    return forms


def _unary(name: str) -> list[str]:
    return [f"torch.{name}(x)", f"torch.{name}(y)"]


SPECS: dict[str, list[str]] = {name: _operator(sym) for name, sym in OPERATORS.items()}
SPECS["add"] += ["torch.add(x, y, alpha=2)", "torch.add(y, True, alpha=-1)", "torch.add(x, -0.0, alpha=n)"]
SPECS["sub"] += ["torch.sub(x, y, alpha=2)", "torch.sub(y, 2, alpha=0.5)"]
SPECS["rsub"] = ["torch.rsub(x, y)", "torch.rsub(y, 2)", "torch.rsub(x, True)", "torch.rsub(y, -0.0, alpha=2)"]
SPECS["div"] += ["torch.div(x, y, rounding_mode='floor')", "torch.div(y, x, rounding_mode='trunc')",
                 "torch.div(y, -0.0, rounding_mode='floor')", "torch.div(x, 2, rounding_mode='trunc')",
                 "torch.true_divide(x, y)"]
SPECS["pow"] += ["torch.pow(y, 0.5)", "torch.pow(x, -0.5)", "torch.pow(y, 3)", "torch.pow(x, -1)",
                 "torch.pow(2.0, y)", "torch.pow(y, flag)"]
for _n in ("fmod", "remainder"):
    SPECS[_n] = SPECS.get(_n, []) + _binary(_n, True)
for _n in ("atan2", "maximum", "minimum", "fmax", "fmin", "logical_and", "logical_or", "logical_xor"):
    SPECS[_n] = _binary(_n)
SPECS["max_other"] = ["torch.max(x, y)", "torch.max(y, x)"]
SPECS["min_other"] = ["torch.min(x, y)", "torch.min(y, x)"]
for _n in ("neg", "abs", "sign", "reciprocal", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt",
           "rsqrt", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "sigmoid", "erf", "erfc",
           "lgamma", "floor", "ceil", "trunc", "round", "frac", "logical_not", "bitwise_not", "isnan", "isinf",
           "isfinite", "relu", "relu6", "hardsigmoid", "hardswish", "mish", "silu", "detach"):
    SPECS[_n] = _unary(_n) if _n not in ("relu6", "hardsigmoid", "hardswish", "mish", "silu") else \
        [f"{F}.{_n}(x)", f"{F}.{_n}(y)"]
SPECS["clamp"] = ["torch.clamp(x, min=-0.0)", "torch.clamp(y, max=-0.0)", "torch.clamp(x, -1.5, -0.0)",
                  "torch.clamp(y, 0.0)", "torch.clamp(x, y)", "torch.clamp(x, None, y)", "torch.clamp(y, x, y)",
                  "torch.clamp(x, -n, n)", "torch.clamp(y, float('nan'))", "torch.clamp(x, 1.0, -1.0)",
                  "torch.clip(y, -0.0, 1.0)", "torch.clamp(x.float(), min=-0.0)"]
SPECS["clamp_min"] = ["torch.clamp_min(x, -0.0)", "torch.clamp_min(y, 0.0)", "torch.clamp_min(x, y)",
                      "torch.clamp_min(y, n)", "torch.clamp_min(x, float('nan'))"]
SPECS["clamp_max"] = ["torch.clamp_max(x, -0.0)", "torch.clamp_max(y, 0.0)", "torch.clamp_max(x, y)",
                      "torch.clamp_max(y, n)", "torch.clamp_max(x, float('inf'))"]
SPECS["where"] = ["torch.where(x > y, x, y)", "torch.where(y > 0, -0.0, x)", "torch.where(x != x, 2, y)",
                  "torch.where(y < 0, y, True)"]
SPECS["threshold"] = ["torch.threshold(x, 0.5, -0.0)", "torch.threshold(y, -0.0, 2.0)", "torch.threshold(x, 1, 7)"]
SPECS["lerp"] = ["torch.lerp(x, y, 0.5)", "torch.lerp(y, x, y)", "torch.lerp(x, y, -0.0)", "torch.lerp(y, x, 2.0)"]
SPECS["addcmul"] = ["torch.addcmul(x, x, y)", "torch.addcmul(y, x, y, value=2)", "torch.addcmul(x, y, y, value=-0.0)"]
SPECS["addcdiv"] = ["torch.addcdiv(x, x, y)", "torch.addcdiv(y, x, y, value=2)", "torch.addcdiv(x, y, x, value=-0.5)"]
SPECS["nan_to_num"] = ["torch.nan_to_num(x)", "torch.nan_to_num(y, 1.0, 2.0, -0.0)", "torch.nan_to_num(x, -0.0)"]
SPECS["to"] = ["x.float()", "y.half()", "x.double()", "y.long()", "x.int()", "y.to(torch.bool)",
               "x.to(torch.bfloat16)", "y.type_as(p)", "x.to(torch.uint8)"]
SPECS["dropout"] = [f"{F}.dropout(x, 0.5, False)", f"{F}.dropout(y, 0.0, True)", "torch.dropout(y, 0.25, False)"]
SPECS["masked_fill"] = ["x.masked_fill(y > 0, -0.0)", "y.masked_fill(x != x, True)", "x.masked_fill(y < 0, 2)",
                        "y.masked_fill(x == 0, float('nan'))"]
SPECS["leaky_relu"] = [f"{F}.leaky_relu(x)", f"{F}.leaky_relu(y, -0.0)", f"{F}.leaky_relu(x, 2.0)"]
SPECS["hardtanh"] = [f"{F}.hardtanh(x)", f"{F}.hardtanh(y, -0.0, 0.5)", f"{F}.hardtanh(x, -2.0, 0.5)"]
SPECS["gelu"] = [f"{F}.gelu(x)", f"{F}.gelu(y, approximate='tanh')"]
SPECS["softplus"] = [f"{F}.softplus(x)", f"{F}.softplus(y, 2.0, 1.0)", f"{F}.softplus(x, 0.5, 20.0)"]
# reductions: x's rows are constant (each one value), y's columns are; the other way every edge
# value meets in one segment
SPECS["sum"] = ["torch.sum(x, 1)", "torch.sum(y, 0)", "torch.sum(x, 1, keepdim=True)", "x.sum()",
                "torch.sum(y, 0, dtype=torch.float64)"]
SPECS["mean"] = ["torch.mean(x, 1)", "torch.mean(y, 0)", "torch.mean(y, [0, 1])"]
SPECS["prod"] = ["torch.prod(x, 1)", "torch.prod(y, 0)", "torch.prod(y, 1, keepdim=True)"]
SPECS["amax"] = ["torch.amax(x, 1)", "torch.amax(y, 0)", "torch.amax(y, [0, 1])"]
SPECS["amin"] = ["torch.amin(x, 1)", "torch.amin(y, 0)", "torch.amin(y, 1)"]
SPECS["var"] = ["torch.var(x, 1)", "torch.var(y, 0)", "torch.var(y, 1, unbiased=False)"]
SPECS["std"] = ["torch.std(x, 1)", "torch.std(y, 0)", "torch.std(y, 1, correction=0)"]
SPECS["var_mean"] = ["torch.var_mean(x, 1)", "torch.var_mean(y, 0)"]
SPECS["std_mean"] = ["torch.std_mean(x, 1)", "torch.std_mean(y, 0, correction=0)"]
SPECS["sum_to_size"] = [f"y.sum_to_size([1, {K}])", f"x.sum_to_size([{K}, 1])"]
SPECS["softmax"] = ["torch.softmax(x, 1)", "torch.softmax(y, 0)", "torch.softmax(y, 1)"]
SPECS["log_softmax"] = ["torch.log_softmax(x, 1)", "torch.log_softmax(y, 0)", "torch.log_softmax(y, 1)"]
SPECS["_safe_softmax"] = ["torch._safe_softmax(x, 1)", "torch._safe_softmax(y, 0)", "torch._safe_softmax(y, 1)"]
SPECS["_softmax"] = ["torch._softmax(x, 1, False)", "torch._softmax(y, 0, False)"]
SPECS["_log_softmax"] = ["torch._log_softmax(x, 1, False)", "torch._log_softmax(y, 0, False)"]
SPECS["layer_norm"] = [f"{F}.layer_norm(x, [{K}])", f"{F}.layer_norm(y, [{K}], v, v, 1e-12)",
                       f"{F}.layer_norm(x, [{K}], p, None, 1e-5)"]
SPECS["native_layer_norm"] = [f"torch.native_layer_norm(x, [{K}], v, p, 1e-5)",
                              f"torch.native_layer_norm(y, [{K}], p, v, 1e-12)"]
SPECS["rms_norm"] = [f"{F}.rms_norm(x, [{K}], v, 1e-12)", f"{F}.rms_norm(y, [{K}], p, 1e-5)"]
# batch norm in inference: channel c's weight, bias and running mean are VALUES[c] (a stepped
# slice), x's rows every edge value (a stride-0 dim); in training the statistics of each column
SPECS["batch_norm"] = [f"{F}.batch_norm(x, v, p, v, v, False, 0.1, 1e-12)",
                       f"{F}.batch_norm(y, v, p, p, None, False, 0.1, 1e-5)",
                       f"{F}.batch_norm(x, p, p, None, v, False, 0.1, 1e-5)"]
SPECS["batch_norm_train"] = [f"{F}.batch_norm(x, None, None, v, v, True, 0.1, 1e-5)",
                             f"{F}.batch_norm(y, None, None, p, None, True, 0.1, 1e-12)"]
SPECS["instance_norm"] = [f"{F}.instance_norm(y.unsqueeze(0), None, None, v, v, True, 0.1, 1e-5)",
                          f"{F}.instance_norm(x.unsqueeze(0), None, None, p, None, True, 0.1, 1e-12)"]
SPECS["group_norm"] = [f"{F}.group_norm(y, 3, v, v, 1e-5)", f"{F}.group_norm(x, 4, p, None, 1e-12)"]

EXEMPT = {
    "autocast_to_full_precision": "made by passes/autocast.py inside torch.autocast only "
                                  "(tests/passes/test_autocast*.py)",
    "autocast_to_reduced_precision": "made by passes/autocast.py inside torch.autocast only "
                                     "(tests/passes/test_autocast*.py)",
    "philox_dropout": "random: made by passes/random.py from dropout in training (tests/ops/test_random.py)",
    "philox_native_dropout": "random: made by passes/random.py (tests/ops/test_random.py)",
    "bias_grad": "made by passes/bias.py under grad, the route of a linear's bias gradient "
                 "(tests/passes/test_bias_gradients.py)",
    "dense_copy": "made by passes/broadcast_copy.py from a reshape of an expanded view "
                  "(tests/passes/test_broadcast_copy.py)",
    "layer_norm_train": "made by autodiff/saved.py from layer_norm under grad, whose edge forms are "
                        "layer_norm's; constant, huge-mean, inf and NaN rows in "
                        "tests/autodiff/test_layer_norm_statistics.py",
    "philox_rand_like": "random: made by passes/random.py (tests/ops/test_random.py)",
    "philox_bernoulli": "random: made by passes/random.py (tests/ops/test_random.py)",
    "philox_bernoulli_p": "random: made by passes/random.py (tests/ops/test_random.py)",
}
# a flip reads its operand back to front (an index remap in the kernel): of the stride-0 dim and
# of the stepped one, of an input and of an intermediate, alone and beside an unflipped read
SPECS["flip"] = ["torch.flip(x, [0]) + y", "torch.flip(y, [1]) * x", "y.flip([0, 1]) - x", "torch.flip(x * y, [-1])",
                 "torch.flip(x, [1]) + torch.flip(y, [0])"]
