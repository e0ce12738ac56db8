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
    # eager's CUDA Welford combines partials, empty ones included, so an inf gives NaN or inf by
    # where it falls; the fused mean is NaN wherever the data holds an inf, the variance too
    assert torch.isnan(got[0]).all() and torch.isnan(exp[0]).all()
    assert torch.isnan(got[1]).all() and (~torch.isfinite(exp[1])).all()


def _ln(x, w, b):
    return F.layer_norm(x * 1.0, [x.shape[-1]], w, b, 1e-5)


def _std_mean_and_gelu(x):
    return torch.std_mean(x, None, correction=0, keepdim=True)[1], F.gelu(x, approximate="tanh")


def test_inf_last_in_a_short_strided_segment_is_eagers_nan():
    """fuzz graph 41 of CUDA seed 7878: the mean of a sliced [-0.09, 1.23, inf] was inf (the CPU
    Welford's rule for an inf in last place), eager's CUDA mean NaN."""
    sf = graphfuser.script(_std_mean_and_gelu)
    for _ in range(4):
        sf(torch.randn(6, device="cuda")[::2])
    x = torch.tensor([-0.09, 0, 1.23, 0, float("inf"), 0], device="cuda")[::2]
    got, exp = sf(x), _std_mean_and_gelu(x)
    assert torch.isnan(exp[0]).all() and torch.isnan(got[0]).all(), got[0]
    torch.testing.assert_close(got[1], exp[1])


def _overflow_rows():
    return torch.tensor([[0., 1e30, 0., 1e30], [-3e29, 7e29, 1e30, 1.], [1., 2., 3., 4.], [5., -1., 0., 2.]],
                        device="cuda")


def _gn(x, w, b):
    return F.group_norm(x * 1.0, 2, w, b, 1e-5)


@pytest.mark.parametrize("fn, shape", [(_ln, (4, 4)), (_gn, (2, 4, 2))])
def test_finite_data_whose_squares_overflow(fn, shape):
    """fuzz graph 2403 of CUDA seed 7777: a group norm of 0 and 1e30 (variance 2.5e59, past
    float32) was NaN (inf - inf); the variance rounds to inf, so the normalization is 0, then
    the affine: eager's group norm value, and a correctly rounded pipeline's."""
    x = _overflow_rows().reshape(shape)
    w, b = torch.tensor([2., 3., 4., 5.], device="cuda"), torch.tensor([.5, -1., 0., 1.], device="cuda")
    sf = graphfuser.script(fn)
    for _ in range(3):
        sf(torch.randn(shape, device="cuda"), w, b)
    got, exp = sf(x, w, b), fn(x, w, b)
    huge = (slice(0, 2),) if fn is _ln else (0,)
    bias = b.expand(2, 4) if fn is _ln else b[:, None].expand(4, 2)
    assert torch.equal(got[huge], bias), got[huge]
    if fn is _gn:
        # eager's group norm gives that value too; its layer norm NaN (the oracle's eager_overflow)
        assert torch.equal(got[huge], exp[huge]), (got[huge], exp[huge])
    rest = (slice(2, 4),) if fn is _ln else (1,)
    torch.testing.assert_close(got[rest], fn(x.double(), w.double(), b.double())[rest].float())


def test_variance_of_finite_data_past_the_range_is_inf():
    sf = graphfuser.script(_var_mean_last)
    for _ in range(3):
        sf(torch.randn(4, 4, device="cuda"))
    var, mean = sf(_overflow_rows())
    assert torch.equal(var[:2].cpu(), torch.full((2,), float("inf")))
    torch.testing.assert_close(mean, _var_mean_last(_overflow_rows().double())[1].float(), rtol=1e-6, atol=0)


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
