"""In-place writes through aliases: functionalization and partition follow torch's aliasing.

Ops that may return their input or a view of it (schema ``Tensor(a) -> Tensor(a)``, plus the
unannotated ``type_as`` / dropout in eval) share memory with it in eager; a write to either side
must be seen through the other, fused or not.
"""
import importlib.util
import os
import sys
import tempfile

import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.config import config
from graphfuser.ir import parse_graph, print_graph, verify
from graphfuser.passes import functionalize
from graphfuser.passes.aliasing import AliasSets, may_alias_input
from helpers import FT, fallback_counter

_SRC_DIR = tempfile.mkdtemp(prefix="gf_alias_")


def _script_src(name: str, body: str):
    """A function defined from source text in a real file (TorchScript reads the source)."""
    path = os.path.join(_SRC_DIR, f"m{abs(hash(body))}.py")
    with open(path, "w") as fh:
        fh.write("import torch\nimport torch.nn.functional as F\n" + body)
    spec = importlib.util.spec_from_file_location(f"gf_alias_{abs(hash(body))}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return getattr(mod, name)


EXPRS = {
    "float": "h.float()", "to_dtype": "h.to(torch.float32)", "to_other": "h.to(o)", "type_as": "h.type_as(o)",
    "contiguous": "h.contiguous()", "dropout_eval": "F.dropout(h, 0.5, False)", "view": "h.view(-1)",
    "reshape": "h.reshape(8, 4)", "expand": "h.unsqueeze(0).expand(2, 4, 8)", "squeeze": "h.unsqueeze(1).squeeze(1)",
    "slice": "h[1:3]", "select": "h[0]", "transpose": "h.transpose(0, 1)", "permute": "h.permute(1, 0)",
    "t": "h.t()", "flatten": "h.flatten()", "detach": "h.detach()",
}


def _run(fn, *args, calls=4):
    sf = graphfuser.script(fn)
    for _ in range(calls):
        a = [x.clone() for x in args]
        b = [x.clone() for x in args]
        torch.testing.assert_close(sf(*b), fn(*a))
        for x, y in zip(a, b):
            torch.testing.assert_close(y, x)
    return sf


@pytest.mark.parametrize("op", sorted(EXPRS))
def test_write_to_source_is_seen_through_alias(op):
    # the issue's repro is op="float": r = h.float() (h float32), h.mul_(0.5), return r
    fn = _script_src("f", f"""
def f(x, o):
    h = x * 2.0
    r = {EXPRS[op]}
    h.mul_(0.5)
    return r + 1.0, h * 3.0
""")
    _run(fn, torch.randn(4, 8), torch.randn(4, 8))


# expand: eager refuses to write an expanded tensor. type_as: torch.jit.script itself drops the
# write (its schema has no alias annotation, so TorchScript's dead-code pass deletes r.add_);
# graphfuser sees that in the source and runs the function eagerly.
@pytest.mark.parametrize("op", sorted(set(EXPRS) - {"expand"}))
def test_write_to_alias_is_seen_through_source(op):
    fn = _script_src("f", f"""
def f(x, o):
    h = x * 2.0
    r = {EXPRS[op]}
    r.add_(1.0)
    return h.sin() + 1.0
""")
    _run(fn, torch.randn(4, 8), torch.randn(4, 8))


def test_issue_repro_on_input():
    def f(h):
        r = h.float()
        h.mul_(0.5)
        return r

    _run(f, torch.rand(4, 8))


def test_alias_of_alias_chain():
    def f(x):
        h = x * 2.0
        r = h.float().contiguous().view(-1)
        h.mul_(0.5)
        return r * 2.0 + 1.0

    _run(f, torch.randn(4, 8))


def test_write_through_alias_of_other_dtype():
    # .double() of a float tensor is a copy: the write to h is not seen by r
    def f(x):
        h = x * 2.0
        r = h.double()
        h.mul_(0.5)
        return r + 1.0, h.relu()

    _run(f, torch.randn(4, 8))


def test_schema_alias_annotations():
    def f(x):
        return x.float(), x.view(-1), x * 2.0, x.sin()

    from graphfuser.frontend.torchscript import capture

    g = capture(f).graph
    verdict = {n.kind: may_alias_input(n) for n in g.nodes() if n.kind.startswith("aten::")}
    assert verdict["aten::to"] and verdict["aten::view"]
    assert not verdict["aten::mul"] and not verdict["aten::sin"]


F1 = FT(1)
F64 = FT(64, 1)


def test_inplace_that_would_broadcast_its_target_is_kept():
    g = verify(parse_graph(f"""
graph(%a : {F64}):
  %0 : int = prim::Constant[value=0]()
  %f : bool = prim::Constant[value=0]()
  %n : NoneType = prim::Constant()
  %l : int[] = prim::ListConstruct(%0)
  %v : {F1} = aten::mean(%a, %l, %f, %n)
  %w : {F1} = aten::mul_(%v, %a)
  return (%v)
"""))
    functionalize(g)
    assert "aten::mul_(%v, %a)" in print_graph(g)


def test_inplace_shape_error_survives_a_guard_miss():
    def f(x, y):
        v = x.sum(0)
        v.mul_(y)
        return v

    sf = _run(f, torch.randn(4, 8), torch.randn(8))
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        f(torch.randn(4, 8), torch.randn(3, 8))
    for _ in range(3):
        with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
            sf(torch.randn(4, 8), torch.randn(3, 8))


def test_inplace_with_a_promoting_argument_is_kept():
    def f(x, y):
        v = x * 2
        v.add_(y)
        return v

    _run(f, torch.randn(4, 8).half(), torch.randn(4, 8))


def test_inplace_shape_error_survives_a_guard_miss_when_the_target_is_a_group_input():
    # v comes from an op the partition skips, so the functional mul reads it as a group input
    def f(x, y):
        v = x.sum(0)
        v.mul_(y)
        return v.relu() + 1.0

    with config.override(skip_node_kinds=["aten::sum"]):
        sf = _run(f, torch.randn(4, 8), torch.randn(8))
        group = [n for n in sf._optimized.all_nodes() if n.kind.endswith("FusionGroup")][0]
        assert [n.kind for n in group.subgraph.nodes() if n.kind.startswith("aten::")] == [
            "aten::mul", "aten::relu", "aten::add"]
        for _ in range(3):
            with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
                sf(torch.randn(4, 1), torch.randn(8))
        for _ in range(3):
            x, y = torch.randn(5, 8), torch.randn(8)
            torch.testing.assert_close(sf(x, y), f(x, y))


def test_inplace_on_an_identity_alias_of_an_intermediate_fuses():
    # relu_ after dropout in eval writes the dropout's input (the same tensor in eager); nothing
    # reads that tensor afterwards, so the chain is made functional and fuses
    def f(x):
        h = x * 2.0
        d = F.dropout(h, 0.1, False)
        d.relu_()
        return d + 1.0

    sf = _run(f, torch.randn(4, 8))
    groups = [n for n in sf._optimized.all_nodes() if n.kind.endswith("FusionGroup")]
    assert len(groups) == 1
    assert not any(n.kind.endswith("_") for n in groups[0].subgraph.nodes())


def test_inplace_on_an_identity_alias_whose_source_is_read_later_is_kept():
    def f(x):
        h = x * 2.0
        d = h.float()
        d.relu_()
        return d + 1.0, h.sin()

    _run(f, torch.randn(4, 8))


# (F.dropout scripts to an If whose output TorchScript knows may alias: it keeps that write)
@pytest.mark.parametrize("expr", ["x.type_as(x)", "x.sum_to_size(x.shape)", "torch.atleast_1d(x)",
                                  "x.type_as(x).reshape(-1)", "x.type_as(x)\n    r = r[1:]"])
def test_write_torchscript_drops_runs_eagerly(expr):
    # torch.jit.script deletes r.mul_ (r looks fresh to its alias analysis); eager doubles x
    fn = _script_src("f", f"""
def f(x):
    r = {expr}
    r.mul_(2)
    return x + 1.0
""")
    with pytest.warns(UserWarning, match="dropped the in-place write"):
        sf = graphfuser.script(fn)
    for _ in range(4):
        a, b = torch.randn(4, 8), None
        b = a.clone()
        torch.testing.assert_close(sf(b), fn(a))
        torch.testing.assert_close(b, a)


def test_write_torchscript_keeps_still_fuses():
    def f(x):
        r = x.type_as(x)
        r.mul_(2)
        return r + 1.0

    sf = _run(f, torch.randn(4, 8))
    assert sf._optimized is not None
