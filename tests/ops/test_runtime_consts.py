"""Run-time scalars feeding a row's constant-only arguments (add's alpha, gelu's approximate,
leaky_relu's slope, softplus's beta / threshold, hardtanh's bounds ...) are profiled into
guarded constants, as a reduction's dims are: fused with the profiled value, and another value
at run time misses the guard and runs eager."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.config import config
from helpers import DEVICES, fallback_counter, fusion_groups, roundtrip


def add_alpha(x, y, alpha: float):
    return torch.add(x, y, alpha=alpha).relu()


def sub_alpha(x, y, alpha: float):
    return torch.sub(x * 2.0, y, alpha=alpha)


def gelu_mode(x, approximate: str):
    return F.gelu(x * 2.0, approximate=approximate) + 1.0


def slopes(x, slope: float, beta: float, lo: float):
    return (torch._C._nn.leaky_relu(x * 1.5, slope) + torch._C._nn.softplus(x, beta, 20.0)
            + torch._C._nn.hardtanh(x, lo, 0.5))


CASES = [
    (add_alpha, lambda x: (x, x.flip(0), 0.5), lambda x: (x, x.flip(0), 2.0)),
    (add_alpha, lambda x: (x, x.flip(0), 3), lambda x: (x, x.flip(0), -1)),
    (sub_alpha, lambda x: (x, x.flip(0), -0.25), lambda x: (x, x.flip(0), 1.0)),
    (gelu_mode, lambda x: (x, "tanh"), lambda x: (x, "none")),
    (gelu_mode, lambda x: (x, "none"), lambda x: (x, "tanh")),
    (slopes, lambda x: (x, 0.2, 2.0, -0.5), lambda x: (x, 0.3, 2.0, -0.5)),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_profiled_into_a_guarded_constant(device, case):
    fn, first, other = CASES[case]
    x = torch.randn(6, 7, device=device)
    sf = graphfuser.script(fn)
    with config.override(disable=["fallback"]):
        for _ in range(config.profiling_runs):
            sf(*first(x))
        counts = fallback_counter(sf)
        for _ in range(2):
            torch.testing.assert_close(sf(*first(x)), fn(*first(x)))
        assert counts["fallback"] == 0 and fusion_groups(sf._optimized), str(sf._optimized)
        text = roundtrip(sf._optimized)
        assert "values=[" in text, text
        # another value: the guard misses, eager computes with it
        torch.testing.assert_close(sf(*other(x)), fn(*other(x)))
        assert counts["fallback"] >= 1


def test_varying_during_profiling_stays_unfused_with_a_reason():
    x = torch.randn(6, 7)
    sf = graphfuser.script(add_alpha)
    for a in (0.5, 1.5, 2.5, 3.5):
        torch.testing.assert_close(sf(x, x, a), add_alpha(x, x, a))
    from graphfuser.ops import fusible

    adds = [n for n in sf._optimized.all_nodes() if n.kind == "aten::add"]
    assert adds and "changed between profiling runs" in fusible(adds[0])


@pytest.mark.parametrize("text,want", [
    # TorchScript prints every argument: two inputs are prod(self, *, dtype), four prod.dim_int
    ("aten::prod(%x, %six)", {"dtype": 6}),
    ("aten::prod(%x, %one, %false, %none)", {"dim": 1, "keepdim": False}),
    ("aten::sum(%x, %six)", {"dtype": 6}),
    ("aten::sum(%x, %dims, %false, %none)", {"dim": [1], "keepdim": False}),
    ("aten::mean(%x, %dims, %false, %none)", {"dim": [1], "keepdim": False}),
])
def test_parsed_reductions_bind_the_overload_of_their_arity(text, want):
    # a group of prod(x, dtype=torch.float32), printed and parsed (repro files, the CUDA compile
    # of CPU groups in the tests), bound its dtype as prod.dim_int's dim: "dim 6 is out of range"
    from graphfuser.ir import parse_graph
    from graphfuser.ops import bind, lookup

    g = parse_graph("graph(%x : Float(3, 4, strides=[4, 1], requires_grad=0, device=cpu)):\n"
                    "  %six : int = prim::Constant[value=6]()\n  %one : int = prim::Constant[value=1]()\n"
                    "  %false : bool = prim::Constant[value=0]()\n  %none : NoneType = prim::Constant()\n"
                    "  %dims : int[] = prim::Constant[value=[1]]()\n"
                    f"  %r : Tensor = {text}\n  return (%r)\n")
    node = next(n for n in g.block.nodes if n.kind.startswith("aten::"))
    _, consts, _ = bind(lookup(node.kind), node)
    for k, v in want.items():
        assert consts.get(k) == v, (k, consts)
