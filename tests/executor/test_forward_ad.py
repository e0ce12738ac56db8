"""Forward-mode AD through a scripted function or module: under ``forward_ad.dual_level`` a call
runs the unfused program (eager's ops carry the tangents; a fused kernel would read the
primal's memory and drop the tangent), before profiling and after the steady state alike, and
the fused calls around it are unchanged. ``torch.func.jvp`` and ``torch.compile``'s backend
against eager too."""
from __future__ import annotations

import pytest
import torch
import torch.autograd.forward_ad as fwAD
import torch.nn as nn

import graphfuser
from graphfuser import graphfuser_backend
from graphfuser.config import config
from helpers import fallback_counter, fusion_groups


def f(x, y):
    return (x * 2.0 + y).sin().relu() * y.exp()


def _dual(fn, primals, tangents):
    with fwAD.dual_level():
        out = fn(*[fwAD.make_dual(p, t) for p, t in zip(primals, tangents)])
        p, t = fwAD.unpack_dual(out)
        return p.clone(), None if t is None else t.clone()


@pytest.mark.parametrize("when", ["first_call", "steady"])
def test_function_tangents_are_eagers(when):
    torch.manual_seed(0)
    x, y = torch.randn(6, 7, dtype=torch.float64), torch.randn(6, 7, dtype=torch.float64)
    tx, ty = torch.randn_like(x), torch.randn_like(y)
    sf = graphfuser.script(f)
    if when == "steady":
        with config.override(disable=["fallback"]):
            for _ in range(4):
                sf(x, y)
        assert fusion_groups(sf._optimized)
    got, want = _dual(sf, (x, y), (tx, ty)), _dual(f, (x, y), (tx, ty))
    assert got[1] is not None, "the tangent was dropped"
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])


def test_fused_calls_go_on_after_dual_calls():
    x, y = torch.randn(5, 9), torch.randn(5, 9)
    sf = graphfuser.script(f)
    with config.override(disable=["fallback"]):
        for _ in range(3):
            sf(x, y)
        _dual(sf, (x, y), (torch.ones_like(x), torch.zeros_like(y)))
        counts = fallback_counter(sf)
        for _ in range(3):
            out = sf(x, y)
    torch.testing.assert_close(out, f(x, y))
    assert fusion_groups(sf._optimized) and counts["fallback"] == 0


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 16)
        self.norm = nn.LayerNorm(16)

    def forward(self, x):
        return self.norm(torch.nn.functional.gelu(self.fc(x))) + 1.0


@pytest.mark.parametrize("entry", ["script", "compile"])
def test_module_tangents_are_eagers(entry):
    torch.manual_seed(1)
    m = Block()
    run = graphfuser.script(m) if entry == "script" else torch.compile(m, backend=graphfuser_backend)
    x = torch.randn(4, 8)
    for _ in range(4):
        run(x)
    t = torch.randn_like(x)
    got, want = _dual(run, (x,), (t,)), _dual(m, (x,), (t,))
    assert got[1] is not None, "the tangent was dropped"
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got[1], want[1], rtol=1e-5, atol=1e-5)


def test_func_jvp_is_eagers():
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    sf = graphfuser.script(f)
    for _ in range(4):
        sf(x, y)
    got = torch.func.jvp(sf, (x, y), (torch.ones_like(x), torch.ones_like(y)))
    want = torch.func.jvp(f, (x, y), (torch.ones_like(x), torch.ones_like(y)))
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e)
