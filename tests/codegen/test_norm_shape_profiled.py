"""A ``normalized_shape`` the graph computes whole (``x.shape[-1:]``, not a list literal) is
profiled into a guarded constant, as reductions' dims are: the norm fuses, the guard checks the
list's value, and a call where it changed misses the guard and runs eager."""
import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.config import config
from helpers import DEVICES, fallback_counter, fusion_groups


def ln_last(x, w, b):
    return F.layer_norm(x * 2.0, x.shape[-1:], w, b, 1e-5)


def ln_last_two(x, w, b):
    return F.layer_norm(x * 2.0, x.shape[-2:], w, b, 1e-5)


def rms_last(x, w, b):
    return F.rms_norm(x * 2.0, x.shape[-1:], w, 1e-6) + b


def _norm_kinds(sf):
    return [n.kind for g in fusion_groups(sf._optimized) for n in g.subgraph.block.nodes]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fn, k", [(ln_last, 1), (ln_last_two, 2), (rms_last, 1)])
def test_computed_normalized_shape_fuses_and_guards(fn, k, device):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no GPU")

    def args(*shape):
        return (torch.randn(*shape, device=device), torch.randn(shape[-k:], device=device),
                torch.randn(shape[-k:], device=device))

    sf = graphfuser.script(fn)
    with config.override(disable=["fallback"]):
        for _ in range(3):
            sf(*args(4, 6, 16))
        counts = fallback_counter(sf)
        a = args(5, 6, 16)        # a new batch: same normalized_shape, the fused kernel runs
        torch.testing.assert_close(sf(*a), fn(*a))
    assert counts["fallback"] == 0
    assert any(kind in ("aten::layer_norm", "aten::rms_norm") for kind in _norm_kinds(sf)), str(sf._optimized)
    assert "values=[[" in str(sf._optimized)          # the guard checks the list's value
    b = args(4, 6, 24)            # normalized_shape changed: the guard misses, eager's values
    torch.testing.assert_close(sf(*b), fn(*b))
    assert counts["fallback"] == 1


def test_normalized_shape_varied_while_profiling_stays_unfused():
    """A list that changed between profiling runs is no constant: the node stays unfused and
    the partition log gives the reason."""
    sf = graphfuser.script(ln_last)
    for n in (16, 24, 32):
        sf(torch.randn(4, n), torch.randn(n), torch.randn(n))
    assert "aten::layer_norm" not in _norm_kinds(sf)
    x, w, b = torch.randn(4, 8), torch.randn(8), torch.randn(8)
    torch.testing.assert_close(sf(x, w, b), ln_last(x, w, b))
