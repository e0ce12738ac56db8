"""CUDA's numerics policies, lowered for a CUDA device and rendered for the CPU: the lowering is
target-neutral (one kernel IR, two renderers), so a CPU kernel built with the CUDA policies
checks their values on a machine without a GPU. The kernel cache is cleared around each test: a
CPU group of CUDA numerics must not serve later CPU calls."""
import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.config import config
from graphfuser.executor import compiled
from graphfuser.ops.table import OpCall


@pytest.fixture
def cuda_numerics(monkeypatch):
    init = OpCall.__init__

    def as_cuda(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.device_type = "cuda"

    compiled._MEMORY.clear()
    monkeypatch.setattr(OpCall, "__init__", as_cuda)
    with config.override(disable=["compile_cache"]):
        yield
    compiled._MEMORY.clear()


def _ln(x, w, b):
    return F.layer_norm(x * 1.0, [x.shape[-1]], w, b, 1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("width", [5, 4096])
def test_layer_norm_rows_whose_sums_overflow(cuda_numerics, dtype, width):
    """Finite rows whose shifted sums overflow (0.5 then 3e38 twice) give the bias, eager's CUDA
    value (its Welford variance is inf, its rstd 0); rows holding an inf or a NaN stay NaN; the
    variance of the overflowing rows is inf, not NaN."""
    torch.manual_seed(0)
    x = torch.randn(6, width)
    x[0, :3] = torch.tensor([0.5, 3e38, 3e38])
    x[1, :3] = torch.tensor([-1.0, -3e38, -3e38])
    x[2, 2], x[3, 0] = float("inf"), float("nan")
    x, w, b = x.to(dtype), torch.randn(width).to(dtype), torch.randn(width).to(dtype)
    sf = graphfuser.script(_ln)
    sv = graphfuser.script(lambda_free_var)
    with config.override(disable=["fallback"]):
        for _ in range(3):
            out, (var, _) = sf(x, w, b), sv(x)
    assert torch.equal(out[:2].float(), b.expand(2, width).float())
    assert bool(out[2:4].isnan().all())
    ref = _ln(x.double(), w.double(), b.double())
    torch.testing.assert_close(out[4:].double(), ref[4:], rtol=2e-2, atol=2e-2)
    assert bool(var[:2].isinf().all()) and bool(var[2:4].isnan().all())


def lambda_free_var(x):
    return torch.var_mean(x * 1.0, -1)
