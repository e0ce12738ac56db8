"""nn.Module: parameters and buffers are read at run time, so in-place updates are seen."""
from typing import Optional

import torch

import graphfuser
from helpers import fusion_groups


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(8))
        self.register_buffer("b", torch.randn(8))
        self.scale = 2.0

    def forward(self, x):
        return (x * self.w + self.b).tanh() * self.scale


def test_module_fuses_and_matches_eager():
    m = Block()
    sm = graphfuser.script(m)
    x = torch.randn(4, 8)
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(sm(x), m(x))
    g = graphfuser.last_executed_optimized_graph()
    assert str(g).startswith("graph(%self : __torch__.")
    assert 'prim::GetAttr[name="w"](%self)' in str(g)
    assert len(fusion_groups(g)) == 1


def test_parameter_and_buffer_changed_in_place_are_seen():
    m = Block()
    sm = graphfuser.script(m)
    x = torch.randn(4, 8)
    with torch.no_grad():
        for _ in range(3):
            sm(x)
        m.w.mul_(-3.0)
        torch.testing.assert_close(sm(x), m(x))
        m.b.add_(1.0)
        torch.testing.assert_close(sm(x), m(x))
        m.w.copy_(torch.zeros(8))
        torch.testing.assert_close(sm(x), m(x))


def test_parameter_replaced_is_seen():
    m = Block()
    sm = graphfuser.script(m)
    x = torch.randn(4, 8)
    with torch.no_grad():
        for _ in range(3):
            sm(x)
        m.w = torch.nn.Parameter(torch.ones(8))
        torch.testing.assert_close(sm(x), m(x))
        m.w = torch.nn.Parameter(torch.ones(8, dtype=torch.float64))   # guard miss: still right
        torch.testing.assert_close(sm(x), m(x))


def test_training_mode_keeps_autograd():
    m = Block()
    sm = graphfuser.script(m)
    x = torch.randn(4, 8)
    for _ in range(3):
        out = sm(x)
    out.sum().backward()
    ref = Block()
    ref.load_state_dict(m.state_dict())
    ref(x).sum().backward()
    torch.testing.assert_close(m.w.grad, ref.w.grad)


def test_submodules_are_inlined():
    class Outer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Block()
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x):
            return self.inner(self.lin(x)) + x

    sm, x = _warm(Outer().eval(), calls=3)
    assert "prim::CallMethod" not in str(sm.graph)


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
        self.register_buffer("shift", torch.ones(8))

    def forward(self, x):
        return (self.body(x) + self.shift).sigmoid()


def _warm(m: torch.nn.Module, calls: int = 4) -> tuple:
    """``m`` scripted and called ``calls`` times (matching eager) on a [4, 8] input; the scripted
    module and the input."""
    s = graphfuser.script(m)
    x = torch.randn(4, 8)
    with torch.no_grad():
        for _ in range(calls):
            torch.testing.assert_close(s(x), m(x))
    return s, x


def test_module_attributes_are_read_from_their_dicts():
    """The host program reads submodules, parameters and buffers from the dict that holds them
    (not through nn.Module.__getattr__), and still sees every later change to them."""
    m = _Block().eval()
    s, x = _warm(m)
    with torch.no_grad():
        assert "._modules['body']" in s.code and "._buffers['shift']" in s.code
        m.shift.fill_(3.0)                                        # in place
        torch.testing.assert_close(s(x), m(x))
        m.shift = torch.full((8,), -2.0)                          # buffer reassigned
        torch.testing.assert_close(s(x), m(x))
        m.body[0] = torch.nn.Linear(8, 8)                         # submodule replaced
        torch.testing.assert_close(s(x), m(x))
        m.body[0].weight = torch.nn.Parameter(torch.randn(8, 8))  # parameter replaced
        torch.testing.assert_close(s(x), m(x))


def test_module_attribute_that_moves_out_of_its_dict_still_runs():
    """A parameter deleted and set again as a plain tensor attribute lives in the instance dict:
    the program that read it from ``_parameters`` raises KeyError, and the call recovers."""
    m = _Block().eval()
    s, x = _warm(m)
    with torch.no_grad():
        lin = m.body[0]
        w = lin.weight.detach().clone() * 2
        del lin.weight
        lin.weight = w
        assert "weight" in lin.__dict__
        for _ in range(4):
            torch.testing.assert_close(s(x), m(x))


class _WithDefaults(torch.nn.Module):
    """timm's ``forward(self, x, attn_mask=None)``: callers leave the trailing arguments out."""

    def forward(self, x, mask: Optional[torch.Tensor] = None, scale: float = 2.0):
        y = (x * scale).relu()
        if mask is not None:
            y = y * mask
        return y + 1.0


def test_calls_that_leave_out_defaulted_arguments_take_the_fast_path():
    m = _WithDefaults()
    sf = graphfuser.script(m)
    x = torch.randn(4, 8)
    for _ in range(4):
        torch.testing.assert_close(sf(x), m(x))
    calls = []
    fast = sf._fast
    sf._fast = lambda *a: calls.append(len(a)) or fast(*a)
    mask = torch.rand(4, 8)
    for args in ((x,), (x, None), (x, None, 3.0), (x, mask)):
        torch.testing.assert_close(sf(*args), m(*args))
    assert calls[:2] == [3, 3], calls       # the defaults filled in, no bind
    torch.testing.assert_close(sf(x, scale=0.5), m(x, scale=0.5))     # keywords bind as before
