"""Capture: torch.jit.script's graph (calls inlined) converted to graphfuser's IR."""
import pytest
import torch

import graphfuser
from graphfuser.ops.aten import AtenCall
from graphfuser.frontend.torchscript import capture
from graphfuser.ir import print_graph, verify
from helpers import assert_in_order, roundtrip


def helper(x):
    return x * 2.0


def f(x, y, alpha: float = 0.5):
    o = helper(x) + y
    return o.relu() * alpha


def test_function_capture():
    cap = capture(f)
    g = verify(cap.graph)
    assert cap.module is None and cap.name == "f"
    assert cap.arg_names == ["x", "y", "alpha"] and cap.defaults == {"alpha": 0.5}
    text = print_graph(g)
    assert_in_order(text, "graph(%x.1 : Tensor,", "%y.1 : Tensor,", "%alpha.1 : float):",
                    "aten::mul", "aten::add", "aten::relu", "aten::mul", "return (")
    assert "prim::CallFunction" not in text           # calls are inlined
    for n in g.nodes():
        if n.kind.startswith("aten::"):
            assert isinstance(n.schema, AtenCall)
            assert n.source and "test_torchscript_capture.py:" in n.source
    roundtrip(g)


def test_module_capture_keeps_getattr():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.register_buffer("shift", torch.zeros(4))

        def forward(self, x):
            return self.lin(x) + self.shift

    m = M()
    cap = capture(m)
    g = verify(cap.graph)
    assert cap.module is m and cap.name == "M" and cap.arg_names == ["x"]
    assert str(g.inputs[0].type).startswith("__torch__.")
    text = print_graph(g)
    assert 'prim::GetAttr[name="shift"](%self' in text
    assert 'prim::GetAttr[name="weight"]' in text
    assert "prim::CallMethod" not in text


def test_control_flow_stays_blocks():
    def g(x, n: int):
        for _ in range(n):
            if bool(x.sum() > 0):
                x = x - 1.0
        return x

    text = print_graph(verify(capture(g).graph))
    assert_in_order(text, "prim::Loop(", "block0(", "prim::If(", "block0():", "block1():")


def test_constants_of_many_types():
    def g(x, s: str = "a\"b\n"):
        y = x.to(torch.float64)
        z = y.sum(dim=[0, 1], keepdim=True)
        return z * 1e-5, s, None, True

    cap = capture(g)
    text = roundtrip(cap.graph)
    assert_in_order(text, "float = prim::Constant[value=1e-05]()", "int[] = prim::ListConstruct(",
                    "Tuple[Tensor, str, NoneType, bool] = prim::TupleConstruct(")
    sf = graphfuser.script(g)
    x = torch.rand(2, 3)
    for _ in range(3):
        out, ref = sf(x), g(x)
        torch.testing.assert_close(out[0], ref[0])
        assert out[1:] == ref[1:] == ('a"b\n', None, True)


def test_script_rejects_what_it_cannot_capture():
    def g(x):
        return x.numpy()

    with pytest.raises(graphfuser.UnsupportedError, match="could not script g"):
        capture(g)
