"""On the GPU, kernels with a max / min reduction compile without multiply-add contraction
(NVRTC ``--fmad=false``, ``cstyle_reduction.exact_products``): a log_softmax / softmax of
``x * s`` whose products round (200 * 1e10 in float32) matches eager along either dim."""
import pytest
import torch

import graphfuser
from graphfuser.config import config

pytestmark = pytest.mark.cuda


def scaled_log_softmax(x, s: float, dim: int):
    return torch._log_softmax(x * s, dim, False)


def scaled_softmax(x, s: float, dim: int):
    return torch.softmax(x * s, dim)


@pytest.mark.parametrize("fn", [scaled_log_softmax, scaled_softmax])
@pytest.mark.parametrize("dim", [-1, -2])
@pytest.mark.parametrize("s", [1e10, 1e30, 3.0])
def test_scaled_softmax_matches_eager(fn, dim, s):
    x = torch.tensor([[[7.0] * 4, [200.0] * 4, [13.0] * 4]], device="cuda").repeat(64, 1, 1)
    if dim == -1:
        x = x.transpose(1, 2).contiguous()
    sf = graphfuser.script(fn)
    with config.override(disable=["fallback"]):
        for _ in range(4):
            got = sf(x, s, dim)
    torch.testing.assert_close(got, fn(x, s, dim), rtol=1e-6, atol=1e-30)
