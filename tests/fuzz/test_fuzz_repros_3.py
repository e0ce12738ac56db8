"""Repros the fuzzer found (logs/fuzz-*.md), continued from test_fuzz_repros.py: aliases an
in-place write reaches, identity ops that return their input, errors eager raises for unused
values, gradients of inputs behind undefined gradients."""

import pytest
import torch
import torch.nn.functional as F

import graphfuser

from test_fuzz_repros import _run


def _write_through_identity_alias_after_a_read(x0):
    v0 = x0 * torch.rsqrt(x0.pow(2).mean(-1, keepdim=True) + 0.1)
    v1 = v0 * v0.size(-1)
    v2 = v1.float()
    v1.mul_(0.5)
    v3 = v0.type_as(v0)
    v3.mul_(2)
    v4 = F.dropout(v3, 0.5, False)
    v3.mul_(0.5)
    return v4, v1


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_fallback_does_not_write_an_alias_that_is_read_later(dtype):
    # ``v3 = v0.type_as(v0)`` is ``v0`` itself; the group holding ``v3.mul_(2)`` returns ``v0``
    # from before the write (``v1`` reads it). Its fallback ran the write in place again, into
    # that returned ``v0``: the first guard miss (a new batch size and layout) gave v1 twice over
    calls = iter([(1, False)] * 8 + [(3, True)] * 6)

    def make():
        b, t = next(calls)
        x = torch.full((b, 2, 3, 1), 1e6, dtype=dtype)
        return (x.transpose(1, 2).contiguous().transpose(1, 2) if t else x,)

    _run(_write_through_identity_alias_after_a_read, make, calls=7)


def _eval_dropout_and_mul(x, s: float):
    return F.dropout(x, 0.5, False), x * s


def _zero_p_dropout(x):
    return F.dropout(x, 0.0, True) + 0, F.alpha_dropout(x, 0.3, False)


@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("fn", [_eval_dropout_and_mul, _zero_p_dropout])
def test_dropout_that_returns_its_input_returns_it(fn, requires_grad):
    """Dropout not training (or with p = 0) returns its input itself in eager: the same tensor,
    strides and all (fuzz graph 3439 of seed 10909: a differentiable group's copy of a sliced
    bf16 input came back contiguous)."""
    base = torch.randn(7, 8, dtype=torch.bfloat16, requires_grad=requires_grad)
    x = base[:, ::2]
    sf = graphfuser.script(fn)
    for _ in range(4):
        got, want = sf(x, 2.0) if fn is _eval_dropout_and_mul else sf(x), \
            fn(x, 2.0) if fn is _eval_dropout_and_mul else fn(x)
        for g, e in zip(got, want):
            torch.testing.assert_close(g, e)
            assert g.stride() == e.stride()
    if fn is _eval_dropout_and_mul:
        assert got[0] is x


def _dead_integer_division(x, s: int):
    v = torch.floor_divide(x, s)
    return x * v.size(-1)


def test_unused_integer_division_by_zero_still_raises():
    """Eager raises ZeroDivisionError for an integer division by 0 even where only the result's
    size is read: the division is not dead code (fuzz graph 3572 of seed 10909)."""
    x = torch.randint(0, 100, (3, 4), dtype=torch.uint8)
    sf = graphfuser.script(_dead_integer_division)
    for _ in range(3):
        torch.testing.assert_close(sf(x, 3), _dead_integer_division(x, 3))
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        _dead_integer_division(x, 0)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        sf(x, 0)


def _self_copy(x0):
    v0 = F.dropout(x0, 0.5, False)
    v0.copy_(v0)
    return v0 != x0, v0


def test_copy_onto_itself_of_a_leaf_requiring_grad_raises_as_eager():
    # fuzz graph 838 of seed 11313: the eval dropout returns its input, so copy_ writes a leaf that
    # requires grad onto itself; eager raises, and so must the host program's copy_
    sf = graphfuser.script(_self_copy)
    for _ in range(3):
        with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
            _self_copy(torch.randn(3, 4, requires_grad=True))
        with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
            sf(torch.randn(3, 4, requires_grad=True))
    x = torch.randn(3, 4)
    for a, b in zip(sf(x), _self_copy(x)):
        torch.testing.assert_close(a, b)


def _dead_group_norm(x1, w, b):
    v0 = F.group_norm(x1, 5, w, b, 0.1)
    return torch.erfc(x1)


def test_input_behind_only_undefined_gradients_gets_none_not_zeros():
    # fuzz graph 306 of seed 11313: the group norm's output is unused; the partial backward of the
    # group beside it gave that output's producer a zero gradient, whose backward multiplied it by
    # the NaN statistics of a row holding a NaN: NaN gradients where eager has numbers
    sf = graphfuser.script(_dead_group_norm)
    for _ in range(5):
        x = torch.randn(16, 5, 2).to(torch.bfloat16)
        x[0, 0, 0] = float("nan")
        x[3, 1, 1] = float("inf")
        x.requires_grad_()
        w = torch.randn(5).to(torch.bfloat16).requires_grad_()
        b = torch.randn(5).to(torch.bfloat16).requires_grad_()
        got = torch.autograd.grad(sf(x, w, b).float().sum(), x)[0]
        want = torch.autograd.grad(_dead_group_norm(x, w, b).float().sum(), x)[0]
        torch.testing.assert_close(got, want, equal_nan=True)


def test_exact_normalization_reference_keeps_eagers_layout():
    """The float64 reference's exact normalizations (fuzz/reference.ExactMoments) return eager's
    layout: a group norm of a transposed input, then ``.view(-1)`` of it, raised in the
    reference (its exact value kept the input's transposed strides), and graphfuser's exact
    answer (a group of one element normalizes to 0) was judged against eager's cancellation
    noise alone (fuzz graph 994 of CPU seed 36582)."""
    from graphfuser.fuzz.reference import ExactMoments

    x = torch.rand(6, 300).t().contiguous().t() + 0.1          # transposed [6, 300]
    b = torch.randn(300)

    def fn(x, b):
        v0 = F.group_norm(x, 300, None, b, 1e-12)
        return v0.view(-1)

    with ExactMoments():
        ref = fn(x.double(), b.double())
    # one element a group: the normalized value is 0, the output the bias
    torch.testing.assert_close(ref, b.double().expand(6, 300).reshape(-1))
    torch.testing.assert_close(graphfuser.script(fn)(x, b), b.expand(6, 300).reshape(-1))
