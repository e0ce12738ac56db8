"""The CPU dialect's own float exp / tanh / erf / sigmoid (codegen/dialects.py, branch-free so that
simd loops vectorize them) at their edges: signed zeros, infinities, NaN, the points where their
formulas switch, and the ends of exp's range, against eager, sign of zero included (tanh(-0.0)
had been +0.0, which atan2 turned into 0 where eager gives -pi: fuzz graph 166 of CPU seed
33910)."""
import pytest
import torch

import graphfuser
from graphfuser.config import config

EDGES = [0.0, -0.0, 1e-30, -1e-30, 1e-8, -1e-8, 0.5, -0.5, 0.625, -0.625, 0.62499994, 1.0, -1.0, 9.0, -9.0,
         88.72283, 88.8, -103.972, -104.0, 3e38, -3e38, float("inf"), float("-inf"), float("nan")]
OPS = {"exp": torch.exp, "tanh": torch.tanh, "erf": torch.erf, "sigmoid": torch.sigmoid}


@pytest.mark.parametrize("name", list(OPS))
def test_edges_match_eager_with_the_sign_of_zero(name):
    op = OPS[name]

    def fn(x):
        return op(x * 1.0)

    x = torch.tensor(EDGES * 3, dtype=torch.float32)       # 72 elements: the simd body and a tail
    sf = graphfuser.script(fn)
    with config.override(disable=["fallback"]):
        for _ in range(3):
            out = sf(x)
    assert "CpuFusionGroup" in str(graphfuser.last_executed_optimized_graph())
    ref = fn(x)
    torch.testing.assert_close(out, ref, rtol=3e-7, atol=2e-7, equal_nan=True)
    zeros = ref == 0
    assert torch.equal(torch.signbit(out[zeros]), torch.signbit(ref[zeros])), (x[zeros], out[zeros], ref[zeros])
