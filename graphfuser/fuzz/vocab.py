"""The fuzzer's vocabulary: dtypes, sizes, layouts, fills, literals and the ops a generated
graph is made of (``gen.py`` draws from these, simplest first so that hypothesis shrinks towards
the front)."""
from __future__ import annotations

FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64")
DTYPES = ("float32", "float32", "float16", "bfloat16", "float64", "float32", "int64", "int32", "int8",
          "uint8", "bool")
SIZES = (3, 1, 2, 5, 0, 7, 4, 16, 33)
LAYOUTS = ("dense", "transposed", "sliced", "expanded", "channels_last")
# ill-conditioned fills: "edge" mixes signed zeros, infinities, NaN, huge and tiny values with
# ordinary ones; "nan_inf" sprinkles NaN and infinities; "huge_mean" rows of mean 1e4 and spread
# 1e-2; "constant_rows" rows of one value
FILLS = ("normal", "positive", "constant_rows", "nan_inf", "huge_mean", "ints", "zeros", "edge")
# (TorchScript pools equal constants of a function and -0.0 == 0.0: a graph spelling both gets
# TorchScript's answer, the ``torchscript_semantics`` deviation, checked per case)
FLOAT_LITERALS = ("2.0", "0.5", "-1.5", "0.0", "3.0", "1e-06", "1e+30", 'float("nan")', 'float("inf")', "-0.0")
INT_LITERALS = ("2", "1", "-3", "0", "7")
# bool Python scalars, spelled so that the oracle can tell them from a keepdim=True: TorchScript
# folds them to the ints 1 and 0 (``torchscript_bool_scalar``)
BOOL_LITERALS = ("bool(1)", "bool(0)")
# run-time Python scalars a case passes (first value, then maybe another on later calls)
SCALAR_VALUES = {"float": (0.5, 2.0, -1.25, 0.0, 3.0, -0.0), "int": (2, 1, -1, 0, 3), "bool": (True, False)}

UNARY_FLOAT = ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan",
               "asin", "acos", "atan", "sinh", "cosh", "tanh", "sigmoid", "erf", "erfc", "lgamma", "reciprocal",
               "frac")
UNARY_ANY = ("neg", "abs", "sign", "floor", "ceil", "trunc", "round", "relu", "logical_not", "bitwise_not",
             "isnan", "isinf", "isfinite", "detach")
BINARY = ("add", "sub", "mul", "div", "rsub", "floor_divide", "atan2", "pow", "fmod", "remainder", "maximum",
          "minimum", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor",
          "bitwise_and", "bitwise_or", "bitwise_xor", "fmax", "fmin", "max_other", "min_other")
# rows whose torch spelling differs from the row name
TORCH_NAMES = {"max_other": "max", "min_other": "min"}
OPERATORS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floor_divide": "//", "remainder": "%",
             "pow": "**", "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
             "bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}
BOOL_RESULT = {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor", "logical_not",
               "isnan", "isinf", "isfinite"}
SPECIAL = ("leaky_relu", "hardtanh", "gelu", "silu", "softplus", "clamp", "clamp_min", "clamp_max", "where",
           "threshold", "lerp", "addcmul", "addcdiv", "nan_to_num", "dropout", "to", "relu6", "hardswish",
           "hardsigmoid", "mish", "masked_fill")
# ops that read their operand at other indices (ops/movement.py)
MOVEMENT = ("flip",)
REDUCTIONS = ("sum", "mean", "prod", "amax", "amin", "var", "std", "var_mean", "std_mean", "sum_to_size")
NORMS = ("softmax", "log_softmax", "_softmax", "_log_softmax", "_safe_softmax", "layer_norm", "native_layer_norm", "rms_norm",
         "batch_norm", "instance_norm", "group_norm")
# patterns a pass rewrites as a whole: a rotary embedding (passes/rotary.py) and a language
# model's loss (frontend/fx.py's cross_entropy, passes/sink_views.py), grouped-query heads
# (passes/broadcast_copy.py), attention under a boolean mask (passes/sdpa_bias.py), a 2-d max pool
# (runtime/max_pool.py on CUDA channels-last inputs)
COMPOSITES = ("rotary", "cross_entropy", "repeat_kv", "sdpa", "max_pool", "out_variant", "no_grad_block")
# Every op-table row, simplest first (hypothesis shrinks towards the front).
OPS = ("add", "mul") + tuple(o for o in BINARY if o not in ("add", "mul")) + UNARY_ANY + UNARY_FLOAT + SPECIAL \
    + MOVEMENT + REDUCTIONS + NORMS + COMPOSITES
INPLACE = ("mul_", "add_", "sub_", "div_", "clamp_", "relu_", "exp_", "neg_", "sigmoid_", "copy_", "fill_")
ALIASES = ("float", "to_same", "contiguous", "view", "reshape", "slice", "unsqueeze", "t", "expand", "dropout",
           "type_as", "squeeze")
TENSOR_ONLY = ("maximum", "minimum", "logical_and", "logical_or", "logical_xor", "atan2", "fmax", "fmin", "max_other",
               "min_other")     # binary rows whose second operand must be a tensor
