"""Long float sums stay as accurate as eager's: the CPU kernels sum in chunks
(codegen/reduction/blocks.py), so the error does not grow with the reduced extent. Positive
data makes every sum well conditioned: a relative error above 1e-6 in float32 is the
accumulation's, not the data's (a serial sum of 200,000 values lost 8.6e-6; fuzz graph 5005
found batch norm's variance off by 2e-5)."""
import pytest
import torch
import torch.nn.functional as F

import graphfuser


def _rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float(((out.double() - ref) / ref.abs().clamp_min(1e-300)).abs().max())


def _fused(fn, *args):
    sf = graphfuser.script(fn)
    for _ in range(3):
        out = sf(*args)
    return out


def _rows(x):
    return (x * 2.0).sum(-1)


def _cols(x):
    return (x * 2.0).sum(0)


def _all(x):
    return (x * 2.0).sum()


def _strided_rows(x):
    return (x * 2.0).sum([1, 2])


@pytest.mark.parametrize("fn,shape", [
    (_rows, (3, 200_003)),                 # row kernel, simd lanes
    (_cols, (200_003, 5)),                 # outer kernel, one accumulator per column lane
    (_all, (400_001,)),                    # one row split across threads
    (_strided_rows, (2, 33, 4099 * 2)),    # gathered loads: no simd, one serial accumulator
])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_long_sums_are_accurate(fn, shape, dtype):
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(shape, generator=g) * 3 + 1000).to(dtype)
    if fn is _strided_rows:
        x = x[:, :, ::2]
    out = _fused(fn, x)
    ref = fn(x.double())
    assert _rel_err(out, ref) <= max(1e-6, 2 * _rel_err(fn(x), ref))


def test_long_sums_keep_inf_and_nan():
    x = torch.rand(4, 5000)
    x[0, 10], x[1, 4000], x[2, 3], x[2, 4500] = float("inf"), float("nan"), float("inf"), -float("inf")
    x[3] = 1e38                              # the sum overflows to inf part way
    for fn in (_rows, _cols):
        torch.testing.assert_close(_fused(fn, x), fn(x), equal_nan=True)


def _bn_train(x, rm, rv):
    return F.batch_norm(x * 4099, rm, rv, None, None, True, 0.1, 0.1)


def test_batch_norm_training_statistics_of_long_channels():
    # fuzz graph 5005: 135,000 values near 6,000 per channel, read through a strided view
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(33, 2, 8198, generator=g) * 3 + 0.01)[:, :, ::2]
    sf = graphfuser.script(_bn_train)
    for _ in range(4):
        rm, rv = torch.zeros(2), torch.ones(2)
        out = sf(x, rm, rv)
        rm64, rv64 = torch.zeros(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64)
        ref = _bn_train(x.double(), rm64, rv64)
        em, ev = torch.zeros(2), torch.ones(2)
        eager = _bn_train(x, em, ev)
        assert _rel_err(rv, rv64) <= max(2e-6, 2 * _rel_err(ev, rv64))
        assert float((out.double() - ref).abs().max()) <= max(2e-6, 2 * float((eager.double() - ref).abs().max()))


def _spread(x):
    return torch.std(x * 1e30, None, unbiased=False, keepdim=True), torch.var_mean(x * 2.0, [1], correction=1)


def test_cpu_var_and_std_accumulate_in_float64_as_eager():
    # fuzz graph 5799 (seed 8383): eager's CPU var / std of float32 accumulate in float64, so a
    # spread of 1e30 (squares of 1e60, past float32's range) gives its std; float32 sums gave NaN
    sf = graphfuser.script(_spread)
    x = torch.randn(37, 4099, generator=torch.Generator().manual_seed(4))
    for _ in range(4):
        got, want = sf(x), _spread(x)
    torch.testing.assert_close(got[0], want[0], rtol=1e-6, atol=0)
    for g, w in zip(got[1], want[1]):
        torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-7)
    assert "CpuFusionGroup" in str(graphfuser.last_executed_optimized_graph())


def _near_range_norms(x, w, b):
    # (the instance norm over each channel's 3 values, as one sample's spatial dim)
    per_channel = x.permute(1, 0, 2, 3).reshape(1, 2, 3, 1) * 1.0
    return F.batch_norm(x, None, None, w, b, True, 0.1, 1e-12) * 1.0, F.instance_norm(per_channel, eps=1e-12)


@pytest.mark.parametrize("grad", [False, True])
def test_cpu_batch_statistics_of_float32_near_its_range_stay_finite(grad):
    # fuzz graph 1382 (CPU seed 33421): a channel of [3e38, 0.33, 0.15]. Its float32 shifted sum
    # (-6e38) overflowed and the statistics went NaN; eager's CPU batch norm accumulates float32
    # in float64, so graphfuser does too: the float64 reference's values and gradients
    x = torch.tensor([3e38, 0.33, 0.15, 1e38, -2e38, 0.5]).view(3, 2, 1, 1).requires_grad_(grad)
    w = torch.tensor([0.7, -1.3]).requires_grad_(grad)
    b = torch.tensor([-0.17, 0.4]).requires_grad_(grad)
    sf = graphfuser.script(_near_range_norms)
    for _ in range(4):
        got = sf(x, w, b)
    ref = _near_range_norms(x.double(), w.double(), b.double())
    for g, r in zip(got, ref):
        assert g.dtype == torch.float32 and bool(torch.isfinite(g).all())
        torch.testing.assert_close(g.double(), r, rtol=1e-5, atol=1e-6)
    if grad:
        gg = torch.autograd.grad(sum(o.sum() for o in got), (x, w, b))
        gr = torch.autograd.grad(sum(o.sum() for o in ref), (x, w, b))
        for a, e in zip(gg, gr):
            assert bool(torch.isfinite(a).all())
            torch.testing.assert_close(a.double(), e.double(), rtol=1e-4, atol=1e-6)
    assert "CpuFusionGroup" in str(graphfuser.last_executed_optimized_graph())
