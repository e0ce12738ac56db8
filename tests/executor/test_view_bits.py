"""Inputs with a lazy negation or conjugation bit (``z.conj().imag`` is a real tensor whose
memory holds the negated values; ``z.conj()`` a complex one holding the unconjugated ones): a
fused kernel reads memory as it is, so the group guards reject them and eager's ops resolve
them. Against eager, at graph inputs and from an op inside the graph, after the steady state."""
from __future__ import annotations

import pytest
import torch

import graphfuser
from graphfuser.config import config
from helpers import fusion_groups


def f(x, y):
    return (x * 2.0 + y).sin() * y


def _steady(sf, *args):
    with config.override(disable=["fallback"]):
        for _ in range(4):
            sf(*args)
    assert fusion_groups(sf._optimized)


@pytest.mark.parametrize("make", ["imag_of_conj", "neg_view"])
@pytest.mark.parametrize("position", [0, 1])
def test_negated_input_is_resolved(make, position):
    torch.manual_seed(0)
    x, y = torch.randn(6, 7), torch.randn(6, 7)
    sf = graphfuser.script(f)
    _steady(sf, x, y)
    z = torch.complex(torch.randn(6, 7), torch.randn(6, 7))
    lazy = z.conj().imag if make == "imag_of_conj" else torch._neg_view(torch.randn(6, 7))
    assert lazy.is_neg()
    args = [x, y]
    args[position] = lazy
    torch.testing.assert_close(sf(*args), f(*args))
    torch.testing.assert_close(sf(x, y), f(x, y))        # and the fused calls go on


def g(z, y):
    v = z.conj().imag               # a lazy negation made inside the graph (run eagerly)
    return (v * 2.0 + y).relu() - y


def test_negated_value_from_inside_the_graph():
    torch.manual_seed(1)
    z = torch.complex(torch.randn(5, 3), torch.randn(5, 3))
    y = torch.randn(5, 3)
    sf = graphfuser.script(g)
    for _ in range(4):
        out = sf(z, y)
    torch.testing.assert_close(out, g(z, y))


def h(a, b):
    return a * b + a


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_conjugated_complex_input_is_resolved(device):
    torch.manual_seed(2)
    a = torch.complex(torch.randn(4, 5), torch.randn(4, 5)).to(device)
    b = torch.complex(torch.randn(4, 5), torch.randn(4, 5)).to(device)
    with config.override(enable=["complex"]):
        sf = graphfuser.script(h)
        for _ in range(4):
            sf(a, b)
        if not fusion_groups(sf._optimized):
            pytest.skip(f"complex ops do not fuse on {device}")
        lazy = a.conj()
        assert lazy.is_conj()
        torch.testing.assert_close(sf(lazy, b), h(lazy, b))
        torch.testing.assert_close(sf(a, b), h(a, b))
