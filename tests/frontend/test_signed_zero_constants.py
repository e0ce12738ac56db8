"""torch.jit.script pools a function's float constants -0.0 and 0.0 into one (they compare equal),
so its graph computes clamp(x, 0.0, 0.0) for clamp(x, -0.0, 0.0). graphfuser.script sees the two
literals in the source and runs such a function eagerly, with a warning naming the line."""
import warnings

import torch

import graphfuser
from graphfuser.frontend.dropped_writes import merged_signed_zeros


def _both_signs(x):
    return torch.reciprocal(torch.clamp(x * 1.0, -0.0, 0.0))


def _minus_only(x):
    return torch.reciprocal(torch.clamp(x * 1.0, min=-(-(-0.0))))


def _double_negation(x):
    return torch.reciprocal(torch.clamp(x * 1.0, -(-0.0), 0.0))


def test_scripted_graph_loses_the_sign():
    x = torch.tensor([-1.0, 1.0])
    # the premise: TorchScript itself differs from eager here
    assert not torch.equal(torch.jit.script(_both_signs)(x), _both_signs(x))


def test_both_signs_run_eagerly_and_match():
    x = torch.tensor([-0.0, 0.0, -1.0, 1.0, float("nan")])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sf = graphfuser.script(_both_signs)
        outs = [sf(x) for _ in range(3)]
    assert any("-0.0" in str(w.message) and "test_signed_zero_constants.py:13" in str(w.message) for w in caught)
    for out in outs:
        torch.testing.assert_close(out, _both_signs(x), equal_nan=True, rtol=0, atol=0)


def test_only_a_mix_of_signs_is_reported():
    assert merged_signed_zeros(_both_signs)
    assert merged_signed_zeros(_minus_only) == []
    assert merged_signed_zeros(_double_negation) == []     # -(-0.0) is 0.0: one sign
    x = torch.tensor([-0.0, 0.0, -1.0, 1.0])
    sf = graphfuser.script(_minus_only)
    for _ in range(3):
        out = sf(x)
    assert "FusionGroup" in str(graphfuser.last_executed_optimized_graph())
    torch.testing.assert_close(out, _minus_only(x), rtol=0, atol=0)
