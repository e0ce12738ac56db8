"""``out=`` overloads (``torch.mul(a, 2.0, out=o)``: ``aten::mul`` with a written ``out``
argument, ``mul.out``) write their argument: dead code elimination keeps them whether or not
their result is used, and the partition orders them as the writes they are. Against eager,
the function's results and the written tensors, through the profiling calls and the steady
state, by ``graphfuser.script`` and the ``torch.compile`` backend."""
from __future__ import annotations

import warnings

import pytest
import torch

import graphfuser
from graphfuser import graphfuser_backend
from graphfuser.passes.partition import _mutates


def unused_result(a, out):
    torch.mul(a, 2.0, out=out)
    return out.sin()


def used_result(a, b, out):
    y = torch.add(a, b, out=out)
    return y * 2.0 + out.sin()


def into_a_view(a, out):
    torch.mul(a, 3.0, out=out[:, :2])
    return out.exp()


def reduction_out(a, out):
    torch.sum(a, 0, out=out)
    return (out * 2.0).relu()


def matmul_out(a, b, out):
    torch.matmul(a, b, out=out)
    return out + 1.0


CASES = {
    "unused_result": (unused_result, lambda: (torch.randn(5, 4), torch.zeros(5, 4))),
    "used_result": (used_result, lambda: (torch.randn(5, 4), torch.randn(5, 4), torch.zeros(5, 4))),
    "into_a_view": (into_a_view, lambda: (torch.randn(5, 2), torch.zeros(5, 4))),
    "reduction_out": (reduction_out, lambda: (torch.randn(5, 4), torch.zeros(4))),
    "matmul_out": (matmul_out, lambda: (torch.randn(5, 3), torch.randn(3, 4), torch.zeros(5, 4))),
}


@pytest.mark.parametrize("entry", ["script", "compile"])
@pytest.mark.parametrize("case", list(CASES))
def test_out_writes_are_eagers(case, entry):
    fn, make = CASES[case]
    torch.manual_seed(0)
    run = graphfuser.script(fn) if entry == "script" else torch.compile(fn, backend=graphfuser_backend, dynamic=False)
    for step in range(5):
        args = make()
        mine = [a.clone() for a in args]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = fn(*args)
            got = run(*mine)
        torch.testing.assert_close(got, want, msg=lambda m: f"call {step}: {m}")
        for a, e in zip(mine, args):
            torch.testing.assert_close(a, e, msg=lambda m: f"call {step}, a written argument: {m}")


def test_an_out_overload_counts_as_a_write():
    sf = graphfuser.script(unused_result)
    node = next(n for n in sf.graph.all_nodes() if n.kind == "aten::mul")
    assert len(node.inputs) == 3 and _mutates(node)
    plain = graphfuser.script(doubled)
    assert not any(_mutates(n) for n in plain.graph.all_nodes() if n.kind == "aten::mul")


def doubled(a):
    return torch.mul(a, 2.0)
