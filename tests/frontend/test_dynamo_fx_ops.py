"""The FX -> aten vocabulary: which aten op and overload a torch-level call is (no Dynamo needed)."""
from __future__ import annotations

import operator

import pytest
import torch
import torch.nn.functional as F

from graphfuser.frontend.fx_ops import DEFAULT, aten_call, match_schema

T = torch.ones(2, 3)
M = torch.ones(2, 3, dtype=torch.bool)


def resolved(op, target, args, kwargs=None):
    found = aten_call(op, target, args, kwargs or {})
    if found is None:
        return None
    name, a, kw = found
    matched = match_schema(name, a, kw)
    if matched is None:
        return None
    schema, bound = matched
    return f"{name}.{schema.overload_name}" if schema.overload_name else name, \
        [None if v is DEFAULT else v for _, v in bound]


@pytest.mark.parametrize("call, expected", [
    (("call_function", operator.add, (T, T)), "aten::add.Tensor"),
    (("call_function", operator.add, (T, 1)), "aten::add.Scalar"),
    (("call_function", operator.add, (1.5, T)), "aten::add.Scalar"),
    (("call_function", operator.sub, (1.5, T)), "aten::rsub.Scalar"),
    (("call_function", operator.truediv, (T, 2)), "aten::div.Scalar"),
    (("call_function", operator.iadd, (T, T)), "aten::add_.Tensor"),
    (("call_function", operator.lt, (0.5, T)), "aten::gt.Scalar"),
    (("call_function", torch._C._nn.linear, (T, torch.ones(4, 3))), "aten::linear"),
    (("call_function", F.layer_norm, (T, (3,))), "aten::layer_norm"),
    (("call_function", F.softmax, (T,), {"dim": -1}), "aten::softmax.int"),
    (("call_function", F.dropout, (T, 0.1, True, False)), "aten::dropout"),
    (("call_function", F.dropout, (T, 0.1, True, True)), "aten::dropout_"),
    (("call_function", F.silu, (T,)), "aten::silu"),
    (("call_function", F.gelu, (T,), {"approximate": "tanh"}), "aten::gelu"),
    (("call_function", torch.cat, ((T, T), -1)), "aten::cat"),
    (("call_function", torch.ops.aten.mul.Tensor, (T, T)), "aten::mul.Tensor"),
    (("call_method", "view", (T, 3, 2)), "aten::view"),
    (("call_method", "transpose", (T, 0, 1)), "aten::transpose.int"),
    (("call_method", "view", (T, torch.float16)), "aten::view.dtype"),
    (("call_method", "masked_fill", (T, M, 0.0)), "aten::masked_fill.Scalar"),
    (("call_method", "masked_fill_", (T, M, T)), "aten::masked_fill_.Tensor"),
    (("call_method", "float", (T,)), "aten::to.dtype"),
    (("call_method", "to", (T, torch.float16)), "aten::to.dtype"),
    (("call_method", "to", (T, "cpu")), "aten::to.prim_Device"),
    (("call_method", "mean", (T, -1), {"keepdim": True}), "aten::mean.dim"),
    (("call_method", "add_", (T, T)), "aten::add_.Tensor"),
    (("call_function", F.adaptive_avg_pool2d, (torch.ones(1, 2, 4, 4), 1)), "aten::adaptive_avg_pool2d"),
    (("call_function", F.adaptive_avg_pool2d, (torch.ones(1, 2, 4, 4), (2, 1))), "aten::adaptive_avg_pool2d"),
    (("call_function", F.adaptive_avg_pool3d, (torch.ones(1, 2, 4, 4, 4), 2)), "aten::adaptive_avg_pool3d"),
    (("call_function", F.max_pool2d, (torch.ones(1, 2, 4, 4), 3, 2, 1), {"ceil_mode": False, "return_indices": False}),
     "aten::max_pool2d"),
    (("call_function", F.max_pool1d, (torch.ones(1, 2, 9), 2)), "aten::max_pool1d"),
    (("call_function", F.max_pool3d, (torch.ones(1, 2, 4, 4, 4), 2)), "aten::max_pool3d"),
])
def test_calls_resolve_to_the_overload_torchscript_picks(call, expected):
    got = resolved(*call)
    assert got is not None and got[0] == expected


def test_arguments_come_in_schema_order_with_defaults():
    w, b = torch.ones(3), torch.zeros(3)
    _, args = resolved("call_function", F.layer_norm, (T, (3,)), {"bias": b, "weight": w, "eps": 1e-3})
    assert args[0] is T and args[1] == (3,) and args[2] is w and args[3] is b and args[4] == 1e-3
    _, args = resolved("call_function", F.batch_norm, (T, b, w), {"training": True})
    assert args[0] is T and args[1:3] == [None, None] and args[3] is b and args[4] is w and args[5] is True
    _, args = resolved("call_method", "float", (T,))
    assert args[1] == torch.float32
    _, args = resolved("call_function", F.embedding, (torch.ones(2, dtype=torch.long), T))
    assert args[0] is T and args[2] == -1                             # weight first; no padding index


@pytest.mark.parametrize("call", [
    ("call_function", operator.add, (1, 2)),                  # no tensor: Python's own arithmetic
    ("call_function", operator.truediv, (1.0, T)),            # number / tensor: no aten spelling
    ("call_function", operator.getitem, (T, 0)),
    ("call_function", torch.zeros, (2, 3)),                   # sizes as separate arguments
    ("call_function", F.softmax, (T,)),                       # the legacy implicit dim
    ("call_function", F.embedding, (torch.ones(2, dtype=torch.long), T), {"max_norm": 1.0}),
    ("call_function", F.embedding, (torch.ones(2, dtype=torch.long), T), {"padding_idx": -1}),
    ("call_method", "__setitem__", (T, 0, 1.0)),
    ("call_method", "add", (T, T), {"out": T}),
    ("call_function", F.adaptive_avg_pool2d, (torch.ones(1, 2, 4, 4), (None, 2))),   # None: the input's size
    ("call_function", F.max_pool2d, (torch.ones(1, 2, 4, 4), 2), {"return_indices": True}),   # a tuple
])
def test_calls_without_an_aten_spelling_stay_python_calls(call):
    assert resolved(*call) is None


def test_adaptive_pool_sizes_become_the_schema_list():
    x = torch.ones(1, 2, 4, 4)
    assert resolved("call_function", F.adaptive_avg_pool2d, (x, 3))[1][1] == [3, 3]
    assert resolved("call_function", F.adaptive_avg_pool2d, (x,), {"output_size": (2, 1)})[1][1] == [2, 1]


def test_max_pool_arguments_in_schema_order():
    """``F.max_pool2d`` binds through its ``return_indices=False`` branch; a stride of None
    (the kernel size) is aten's empty list."""
    x = torch.ones(1, 2, 7, 7)
    assert resolved("call_function", F.max_pool2d, (x, 3))[1][1:] == [3, [], 0, 1, False]
    assert resolved("call_function", F.max_pool2d, (x, 3, 2, 1, 1), {"ceil_mode": True})[1][1:] == [3, 2, 1, 1, True]
