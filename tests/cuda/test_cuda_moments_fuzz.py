"""The moments changes the CPU fuzzer drove, on the GPU: var_mean / std_mean of a segment whose
only non-finite element is an inf in last place (the mean's last-element load and the int32
count of non-finite elements), normalizations of huge-mean data (x - mean as (x - k) - s1 / N),
and an empty batch (the launcher runs the fallback)."""
import pytest
import torch
import torch.nn.functional as F

import graphfuser

pytestmark = pytest.mark.cuda


def _var_mean_last(x):
    return torch.var_mean(x * 1.0, -1, correction=0)


def _std_mean_first(x):
    return torch.std_mean(x * 1.0, 0)


@pytest.mark.parametrize("fn, shape, dim", [(_var_mean_last, (64, 4099), 1), (_std_mean_first, (37, 40), 0),
                                            (_var_mean_last, (3, 20000), 1)])
def test_inf_last_in_a_segment_is_eagers_mean(fn, shape, dim):
    x = torch.randn(*shape, device="cuda")
    idx = [slice(None)] * 2
    idx[dim] = -1
    x[tuple(idx)] = float("inf")
    sf = graphfuser.script(fn)
    for _ in range(4):
        got = sf(x)
    exp = fn(x)
    # eager's CUDA Welford combines partials, so its order differs from the CPU's: the fused mean
    # must be inf or NaN exactly where the data holds the inf, and the variance NaN
    assert torch.isnan(got[0]).all() and torch.isnan(exp[0]).all()
    assert (~torch.isfinite(got[1])).all()


def _ln(x, w, b):
    return F.layer_norm(x * 1.0, [x.shape[-1]], w, b, 1e-5)


@pytest.mark.parametrize("n", [31, 1024, 4096])
def test_layer_norm_of_huge_mean_data_is_near_float64(n):
    g = torch.Generator().manual_seed(5)
    x = (1e4 + 1e-2 * torch.randn(64, n, generator=g)).cuda()
    w, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    sf = graphfuser.script(_ln)
    for _ in range(4):
        got = sf(x, w, b)
    ref = _ln(x.double(), w.double(), b.double())
    err = (got.double() - ref).abs().max().item()
    eager_err = (_ln(x, w, b).double() - ref).abs().max().item()
    assert err < 1e-3 and err <= eager_err, (err, eager_err)


def _softmax_and_exp(x, w):
    return F.softmax(x + w, dim=-1), torch.exp(w)


def test_empty_batch_runs_the_fallback():
    sf = graphfuser.script(_softmax_and_exp)
    w = torch.linspace(0, 1, 33, device="cuda")
    for n in (4, 4, 4, 4, 0, 0):
        x = torch.randn(n, 33, device="cuda")
        got, exp = sf(x, w), _softmax_and_exp(x, w)
        for a, e in zip(got, exp):
            torch.testing.assert_close(a, e)
