"""Rotary embeddings on the GPU through the torch.compile backend (graphfuser/passes/rotary.py):
the split form without grad, the flipped form under grad (a roll only where flips do not fuse;
and in CUDA-graph-replayed training steps); values, strides and gradients against eager's."""
import pytest
import torch

import graphfuser
from graphfuser.config import config
from graphfuser.frontend.dynamo import graphfuser_backend
from helpers import TOLERANCES
from tests.passes.test_rotary import rope

pytestmark = pytest.mark.cuda


def _inputs(dtype, grad):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 64, 8, 64, generator=g)
    q.view(-1)[::97] = float("inf")
    q = q.transpose(1, 2)                                            # [b, heads, seq, dim], strided
    k = torch.randn(2, 64, 2, 64, generator=g).transpose(1, 2)
    cos, sin = torch.randn(2, 64, 64, generator=g), torch.randn(2, 64, 64, generator=g)
    return [t.to("cuda", dtype).requires_grad_(grad and i < 2) for i, t in enumerate((q, k, cos, sin))]


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_rotary_on_cuda_matches_eager(dtype, grad):
    args = _inputs(dtype, grad)
    torch._dynamo.reset()
    sf = torch.compile(rope, backend=graphfuser_backend)
    with config.override(disable=["fallback"]), torch.set_grad_enabled(grad):
        for _ in range(6):        # profiling, the rewrite's extra profiling call, fused, replayed
            out = sf(*args)
            g = str(graphfuser.last_executed_optimized_graph())     # the forward's (before backward runs)
            ref = rope(*args)
            for o, r in zip(out, ref):
                torch.testing.assert_close(o, r, equal_nan=True, **TOLERANCES[o.dtype])
                assert o.stride() == r.stride()
            if grad:
                seeds = [torch.ones_like(r) for r in ref]
                got = torch.autograd.grad(out, args[:2], seeds)
                want = torch.autograd.grad(ref, args[:2], seeds)
                for a, b in zip(got, want):
                    torch.testing.assert_close(a, b, equal_nan=True, **TOLERANCES[a.dtype])
    assert "aten::cat" not in g and "aten::roll" not in g, g      # (flips fuse: no roll under grad either)
