"""Signed integer arithmetic wraps around as eager's does.

C leaves a signed overflow undefined and compilers use that (NVRTC folded ``relu6(x * x)`` of an
int32 ``x`` as if ``x * x >= 0``: fuzz seed 33303 on CUDA gave 6 where eager's wrapped square is
negative and gives 0); the kernels compute int32 / int64 add, sub, mul and neg in the unsigned
type (``ir/kir.prim_text``).
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.ir.kir import prim_text
from helpers import DEVICES


def squares(x: torch.Tensor, y: torch.Tensor):
    v = x * y
    s = v * v
    return F.relu6(s), -s, s + s, s - v * 3, (s * s).sum(-1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_overflowing_int_arithmetic_matches_eager(dtype, device):
    info = torch.iinfo(dtype)
    g = torch.Generator().manual_seed(5)
    x = torch.randint(info.min, info.max, (16, 1, 6), dtype=dtype, generator=g).to(device)
    x[0, 0, :4] = torch.tensor([info.max, info.min, -1, 0], dtype=dtype)
    y = torch.ones(4, 16, 1, 1, dtype=torch.bool, device=device)
    fn = graphfuser.script(squares)
    for _ in range(3):
        out = fn(x, y)
    assert graphfuser.last_executed_optimized_graph() is not None
    for a, e in zip(out, squares(x, y)):
        assert torch.equal(a, e)


def test_wrapping_text_only_for_wide_signed_ints():
    assert prim_text("mul", torch.int32, ["a", "b"]) == "gf_wrap_mul(a, b)"
    assert prim_text("neg", torch.int64, ["a"]) == "gf_wrap_neg(a)"
    assert prim_text("mul", torch.int16, ["a", "b"]) == "(a * b)"      # promoted to int in C: no overflow
    assert prim_text("add", torch.float32, ["a", "b"]) == "(a + b)"
