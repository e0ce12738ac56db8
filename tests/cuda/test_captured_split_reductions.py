"""Split reductions captured into a CUDA graph (runtime/scratch.py): the capture's launches
count with slices of one zeroed block, whose fill is captured too, so every replay starts with
zero counters; single-pass kernels (column sums of a tall tensor) and kernels with grid
barriers (a normalization over long columns) give eager's values on every replay."""
import pytest
import torch

import graphfuser
from graphfuser.runtime.scratch import split_scratch

pytestmark = pytest.mark.cuda


def column_sums(x: torch.Tensor) -> torch.Tensor:
    return (x * 2.0).sum(0)


def column_norm(x: torch.Tensor) -> torch.Tensor:
    m = x.mean(0, keepdim=True)
    v = ((x - m) * (x - m)).mean(0, keepdim=True)
    return (x - m) * torch.rsqrt(v + 1e-5)


@pytest.mark.parametrize("fn", [column_sums, column_norm])
def test_replays_of_captured_split_reductions(fn):
    torch.manual_seed(0)
    sf = graphfuser.script(fn)
    static_x = torch.randn(1 << 20, 4, device="cuda")
    # float32 sums of 2^20 elements in two orders: each is off by about sqrt(n) * eps * |x|
    # (1e-4 for these columns' sums of about 2000 in magnitude), so a sum that cancels to
    # 0.45 differed by 1.8e-4 on one unseeded run
    tol = dict(rtol=1e-4, atol=1e-3)
    for _ in range(4):
        torch.testing.assert_close(sf(static_x), fn(static_x), **tol)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s):
        sf(static_x)
        with torch.cuda.graph(g, stream=s):
            static_y = sf(static_x)
    torch.cuda.current_stream().wait_stream(s)
    scratch = split_scratch(static_x.device)
    assert scratch._graph_counters is not None and scratch._graph_counters[0] is not None
    for k in range(3):
        static_x.copy_(torch.randn(1 << 20, 4, device="cuda") * (k + 1) + k)
        g.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(static_y, fn(static_x), **tol)
