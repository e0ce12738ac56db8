"""What the launchers no longer re-read per launch stays honoured on the GPU: the current stream
(asked once per launch from torch, never cached), the device (guarded; checked at launch only
with several devices)."""
import pytest
import torch

import graphfuser

pytestmark = pytest.mark.cuda


def _pointwise(x, y):
    return torch.sigmoid(x * y + 1.0) - y


def _reduction(x, y):
    return (x * y).sum(-1) + torch.relu(x).amax(-1)


@pytest.mark.parametrize("fn", [_pointwise, _reduction])
def test_side_stream_entered_after_warmup_is_used(fn):
    """Inputs written on a side stream behind a long sleep: a kernel launched on any other
    stream would read them unwritten."""
    x, y = torch.randn(256, 4096, device="cuda"), torch.randn(256, 4096, device="cuda")
    sf = graphfuser.script(fn)
    for _ in range(4):
        sf(x, y)
    assert "CudaFusionGroup" in str(graphfuser.last_executed_optimized_graph())
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    for _ in range(3):
        with torch.cuda.stream(s):
            torch.cuda._sleep(50_000_000)
            a, b = x * 2, y + 1
            out = sf(a, b)
        s.synchronize()
        # a launch on the wrong stream reads unwritten inputs (O(1) errors); sums of 4096
        # products differ from eager's in their order (1e-5 of their magnitude)
        torch.testing.assert_close(out, fn(x * 2, y + 1), rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(sf(x, y), fn(x, y), rtol=1e-4, atol=1e-3)     # back on the default stream


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_other_device_misses_guard_and_current_device_is_switched():
    x, y = torch.randn(64, 512, device="cuda:0"), torch.randn(64, 512, device="cuda:0")
    sf = graphfuser.script(_pointwise)
    for _ in range(4):
        sf(x, y)
    x1, y1 = x.to("cuda:1"), y.to("cuda:1")
    for _ in range(4):
        out = sf(x1, y1)
        assert out.device == x1.device
        torch.testing.assert_close(out.cpu(), _pointwise(x, y).cpu())
    with torch.cuda.device(1):       # cuda:0 tensors while another device is current
        torch.testing.assert_close(sf(x, y), _pointwise(x, y))
