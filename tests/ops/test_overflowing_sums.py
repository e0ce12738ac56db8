"""Normalizations of finite rows whose sums overflow float32 (0.5, then 3e38 twice: the shifted
sum is inf). Eager's kernels keep a finite running mean and an infinite M2 there, so rstd is 0 and
a layer norm gives its bias, on the CPU as on CUDA; graphfuser's shifted sums had made such rows NaN,
as for data holding an inf (fuzz graph 127 of CPU seed 33914 and graph 23 of CUDA seed 33802, both
through torch.compile). Rows holding an inf or a NaN stay NaN; ordinary rows keep their values."""
import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.config import config


def _ln(x, w, b):
    return F.layer_norm(x * 1.0, [x.shape[-1]], w, b, 1e-5)


def _var_mean(x):
    return torch.var_mean(x * 1.0, -1)


def _rows(width, dtype):
    torch.manual_seed(0)
    x = torch.randn(6, width)
    x[0, :3] = torch.tensor([0.5, 3e38, 3e38])
    x[1, :3] = torch.tensor([-1.0, -3e38, -3e38])
    x[2, 2], x[3, 0] = float("inf"), float("nan")
    return x.to(dtype), torch.randn(width).to(dtype), torch.randn(width).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("width", [5, 4096])
def test_layer_norm_rows_whose_sums_overflow(dtype, width):
    x, w, b = _rows(width, dtype)
    sf = graphfuser.script(_ln)
    with config.override(disable=["fallback"]):
        for _ in range(3):
            out = sf(x, w, b)
    assert "FusionGroup" in str(graphfuser.last_executed_optimized_graph())
    assert torch.equal(out[:2].float(), b.expand(2, width).float())
    assert bool(out[2:4].isnan().all())
    # eager agrees wherever it is finite: its CPU kernel's own mean overflows for rows of 5 (NaN
    # there), its Welford cascade over 4096 gives the bias as here
    ref = _ln(x, w, b)
    seen = ref.isfinite() | torch.arange(6).reshape(6, 1).ge(2)
    torch.testing.assert_close(out[seen], ref[seen], rtol=2e-2, atol=2e-2, equal_nan=True)
    if width == 4096:
        assert bool(ref[:2].isfinite().all())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_variance_of_rows_whose_sums_overflow_is_inf(dtype):
    """var / std accumulate in float64 on the CPU (float32 and bfloat16 data alike), so these rows
    do not overflow there: eager's inf variance and NaN rows for an inf or a NaN, as a guard."""
    x, _, _ = _rows(4096, dtype)
    sf = graphfuser.script(_var_mean)
    with config.override(disable=["fallback"]):
        for _ in range(3):
            var, _ = sf(x)
    ref, _ = _var_mean(x)
    assert bool(var[2:4].isnan().all())
    assert torch.equal(var[:2].isinf(), ref[:2].isinf())
    torch.testing.assert_close(var[4:], ref[4:], rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("front", ["script", "compile"])
@pytest.mark.parametrize("width", [16, 4096])
def test_layer_norm_gradient_of_rows_whose_sums_overflow(front, width):
    """The backward of those rows: the forward gives their bias (xhat 0), so their input gradient
    is 0 and their weight gradient gets nothing from them, as eager's long rows have it. The
    backward's own mean of such a row overflowed, and (x - inf) * 0 made it NaN (fuzz graph 469
    of CPU seed 34716, through torch.compile, a row of 16 holding 3e38 twice)."""
    x, w, b = _rows(width, torch.float32)
    w.requires_grad_(True)
    if front == "compile":
        from graphfuser.frontend.dynamo import graphfuser_backend

        torch._dynamo.reset()
        f = torch.compile(_ln, backend=graphfuser_backend)
    else:
        f = graphfuser.script(_ln)
    g = torch.randn(6, width)
    for _ in range(4):
        xg = x.clone().requires_grad_(True)
        dx, dw = torch.autograd.grad(f(xg, w, b), [xg, w], g)
    assert torch.equal(dx[:2], torch.zeros(2, width))
    assert bool(dx[2:4].isnan().all())
    xe = x.clone().requires_grad_(True)
    ex, ew = torch.autograd.grad(_ln(xe, w, b), [xe, w], g)
    torch.testing.assert_close(dx[4:], ex[4:], rtol=1e-4, atol=1e-5)
    # eager's own backward gives these rows 0 where its mean stayed finite, NaN where not
    assert bool(((ex[:2] == 0) | ex[:2].isnan()).all())
    if width == 4096:
        assert bool((ex[:2] == 0).any())
    # the weight's gradient: NaN from the inf / NaN rows in both; the two overflowing rows add 0
    both = torch.autograd.grad(_ln(x[4:].clone(), w, b), [w], g[4:])[0]
    finite = torch.autograd.grad(f(x[[0, 1, 4, 5]].clone(), w, b), [w], g[[0, 1, 4, 5]])[0]
    torch.testing.assert_close(finite, both, rtol=1e-4, atol=1e-5)
