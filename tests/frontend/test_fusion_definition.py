"""FusionDefinition: define_tensor forms, scalars and constants, fd.ops from the op table, the
fusion cache (ids, lookup, one compile per definition), and every bad input."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from graphfuser.executor import compiled
from graphfuser.frontend import DataType, DefinitionError, Fusion, FusionDefinition
from graphfuser.ir.types import TensorType
from graphfuser.ops import ROWS


def _define(build):
    fs = Fusion()
    with FusionDefinition(fs) as fd:
        build(fd)
    return fs


def _input_types(fs: Fusion) -> list:
    return [v.type for v in fs._record.graph.inputs]


# -- define_tensor ------------------------------------------------------------------------------
def test_define_tensor_by_rank():
    def build(fd):
        t0 = fd.define_tensor(3)
        t1 = fd.define_tensor(3, DataType.Half)
        fd.add_output(fd.ops.add(t0, t1))

    fs = _define(build)
    a, b = _input_types(fs)
    assert a.sizes == (-1, -1, -1) and a.dtype == torch.float32 and a.stride_order is None
    assert b.dtype == torch.float16
    assert "contiguous=[False, False, False], dtype=DataType.Half" in fs.python_definition()
    x, y = torch.randn(2, 3, 4).transpose(0, 2), torch.randn(4, 3, 2).half()   # any layout
    torch.testing.assert_close(fs.execute([x, y])[0], x + y)


def test_define_tensor_by_sizes_and_strides():
    def build(fd):
        t0 = fd.define_tensor(sizes=[2, 4, 6], strides=[24, 6, 1], dtype=DataType.Half)
        t1 = fd.define_tensor(sizes=[2, 1, 6], strides=[6, 6, 1])
        t2 = fd.define_tensor(sizes=[4, 6], strides=[1, 4])
        fd.add_output(fd.ops.mul(fd.ops.add(t0, t1), t2))

    fs = _define(build)
    a, b, c = _input_types(fs)
    assert a.sizes == (-1, -1, -1) and a.contiguity == (True, True, True) and a.dtype == torch.float16
    assert b.sizes == (-1, 1, -1)
    assert c.contiguity == (False, False)
    text = fs.python_definition()
    assert "symbolic_sizes=[-1, 1, -1], contiguous=[True, True, True], dtype=DataType.Float" in text
    assert "symbolic_sizes=[-1, -1], contiguous=[False, False], dtype=DataType.Float" in text
    x, y, z = torch.randn(2, 4, 6).half(), torch.randn(2, 1, 6), torch.randn(6, 4).t()
    torch.testing.assert_close(fs.execute([x, y, z])[0], (x + y) * z)


def test_define_tensor_by_symbolic_sizes_and_contiguity():
    def build(fd):
        t0 = fd.define_tensor(symbolic_sizes=[-1, 1, -1], contiguous=[True, True, True], dtype=DataType.Float)
        t1 = fd.define_tensor([-1, -1, -1], [True, True, True])                    # positional form
        fd.add_output(fd.ops.sub(t1, t0))

    fs = _define(build)
    a, b = _input_types(fs)
    assert a.sizes == (-1, 1, -1) and a.stride_order == (0, 2) and a.contiguity == (True, True)
    assert a.broadcast_dims == (1,)
    x, y = torch.randn(2, 1, 8), torch.randn(2, 4, 8)
    torch.testing.assert_close(fs.execute([x, y])[0], y - x)


@pytest.mark.parametrize("kwargs, msg", [
    (dict(symbolic_sizes=[-1, 2]), "symbolic sizes are -1"),
    (dict(symbolic_sizes=[-1, -1], contiguous=[True]), "one bool per dim"),
    (dict(sizes=[2, 3], strides=[1]), "strides of the same length"),
    (dict(ndims=-1), "non-negative"),
    (dict(ndims=2, symbolic_sizes=[-1, -1]), "exactly one of"),
    (dict(ndims=2, dtype="float"), "is not a DataType"),
    (dict(ndims=2, dtype=DataType.Null), "Null"),
])
def test_define_tensor_rejects(kwargs, msg):
    with pytest.raises(DefinitionError, match=msg):
        with FusionDefinition(Fusion()) as fd:
            fd.define_tensor(**kwargs)


# -- scalars and constants ------------------------------------------------------------------------
def test_define_scalar_and_constants():
    def build(fd):
        t0 = fd.define_tensor(2)
        s0 = fd.define_scalar(dtype=DataType.Double)
        s1 = fd.define_scalar(DataType.Int)
        b = fd.define_constant(True)
        i = fd.define_constant(3)
        d = fd.define_constant(0.5)
        fd.add_output(fd.ops.add(fd.ops.mul(t0, s0), s1))
        fd.add_output(fd.ops.where(fd.ops.gt(t0, d), t0, i))
        fd.add_output(fd.ops.eq(fd.ops.gt(t0, 0.0), b))
        fd.add_output(fd.ops.mul(s0, s1))            # a scalar op and a scalar output

    fs = _define(build)
    text = fs.python_definition()
    for line in ("fd.define_scalar(dtype=DataType.Double)", "fd.define_scalar(dtype=DataType.Int)",
                 "fd.define_constant(True)", "fd.define_constant(3)", "fd.define_constant(0.50000)"):
        assert line in text
    x = torch.randn(3, 4)
    o0, o1, o2, o3 = fs.execute([x, 2.0, 3])
    torch.testing.assert_close(o0, x * 2.0 + 3)
    torch.testing.assert_close(o1, torch.where(x > 0.5, x, 3.0))
    torch.testing.assert_close(o2, x > 0)
    assert o3.item() == 6.0 and o3.dtype == torch.float64 and o3.dim() == 0


def test_define_constant_types():
    with FusionDefinition(Fusion()) as fd:
        t = fd.define_tensor(1)
        types = [fd.define_constant(v).value.type.name for v in (True, 2, 2.5, 1 + 2j)]
        with pytest.raises(DefinitionError, match="bool, int, float or complex"):
            fd.define_constant("x")
        fd.add_output(t)
    assert types == ["bool", "int", "float", "complex"]


# -- fd.ops -----------------------------------------------------------------------------------------
def test_ops_cover_every_row_with_its_arguments():
    import inspect

    for name, row in ROWS.items():
        op = getattr(FusionDefinition.Operators, name)
        params = list(inspect.signature(op).parameters.values())[1:]
        assert [p.name for p in params] == list(row.arg_names), name
        assert op.__doc__.splitlines()[0] == (row.doc or row.name)
        for p in params:
            assert (p.default is inspect.Parameter.empty) == (p.name not in row.defaults())


def test_ops_build_aten_nodes_like_torchscript():
    with FusionDefinition(Fusion()) as fd:
        t0, t1 = fd.define_tensor(2), fd.define_tensor(2)
        t2 = fd.ops.add(t0, t1)
        t3 = fd.ops.cast(t2, DataType.Half)
        t4 = fd.ops.div(t3, 2.0, rounding_mode="floor")
        fd.add_output(t4)
    nodes = {n.kind: n for n in fd.graph.block.nodes if n.kind != "prim::Constant"}
    add = nodes["aten::add"]
    assert add.inputs[:2] == [t0.value, t1.value] and add.inputs[2].constant() == 1
    assert "add.Tensor" in add.schema.schema
    to = nodes["aten::to"]
    assert [v.constant() for v in to.inputs[1:]] == [5, False, False, None]     # to.dtype, as scripted
    assert "to.dtype" in to.schema.schema
    assert "div.Scalar_mode" in nodes["aten::div"].schema.schema
    assert t3.value.type == TensorType(dtype=torch.float16, sizes=(-1, -1))
    assert t4.dtype is DataType.Half


def test_help_lists_operators_and_cli_prints_the_table():
    import pydoc

    text = pydoc.render_doc(FusionDefinition.Operators, renderer=pydoc.plaintext)
    assert "add(ops, /, self, other, alpha=1)" in text and "self + alpha * other" in text
    out = subprocess.run([sys.executable, "-m", "graphfuser", "ops", "--width", "200"], capture_output=True,
                         text=True, check=True).stdout
    assert "aten::add" in out and "self + alpha * other" in out and "(self, other, alpha=1)" in out


def test_sum_in_seed_example():
    """The issue's example; sum is a reduction row (ops/reduction.py)."""
    if "sum" not in ROWS:
        pytest.skip("no reduction rows in the op table yet (ops/reduction.py)")
    fs = Fusion()
    with FusionDefinition(fs) as fd:
        t0 = fd.define_tensor(symbolic_sizes=[-1, 1, -1], contiguous=[True, True, True], dtype=DataType.Float)
        t1 = fd.define_tensor(3)
        c0 = fd.define_constant(3.0)
        t2 = fd.ops.add(t0, t1)
        t3 = fd.ops.mul(t2, c0)
        t4 = fd.ops.sum(t3, [-1], False, DataType.Float)
        fd.add_output(t4)
    assert fs.python_definition().splitlines()[-2] == \
        "    T5 = fd.ops.sum(T4, axes=[-1], keepdim=False, dtype=DataType.Float)"
    x, y = torch.ones(2, 1, 8), torch.randn(2, 4, 8)
    from graphfuser.config import config

    with config.override(disable=["fallback"]):  # compiled, not run op by op
        out = fs.execute([x, y])[0]
    torch.testing.assert_close(out, ((x + y) * 3.0).sum(-1))


# -- the fusion cache -------------------------------------------------------------------------------
def _pointwise(fd):
    t0, t1 = fd.define_tensor(2), fd.define_tensor(2)
    fd.add_output(fd.ops.tanh(fd.ops.add(fd.ops.mul(t0, 3.25), t1)))


def test_identical_definitions_share_id_and_kernel():
    fs1 = _define(_pointwise)
    fs2 = _define(_pointwise)
    assert fs1.defined() and fs1.id() == fs2.id()
    x, y = torch.randn(5, 7), torch.randn(5, 7)
    before = compiled.STATS["builds"]
    o1 = fs1.execute([x, y])[0]
    o2 = fs2.execute([torch.randn(9, 3), torch.randn(9, 3)])[0]     # new sizes: same kernel
    o3 = Fusion(fs1.id()).execute([x, y])[0]
    assert compiled.STATS["builds"] - before <= 1
    torch.testing.assert_close(o1, torch.tanh(x * 3.25 + y))
    assert o2.shape == (9, 3)
    torch.testing.assert_close(o3, o1)


def test_different_definitions_get_different_ids():
    fs1 = _define(_pointwise)

    def other(fd):
        t0 = fd.define_tensor(2)
        fd.add_output(fd.ops.relu(t0))

    fs2 = _define(other)
    assert fs1.id() != fs2.id()


def test_lookup_and_reentry_errors():
    fs = _define(_pointwise)
    assert repr(Fusion(fs.id())) == f"Fusion({fs.id()})"
    with pytest.raises(DefinitionError, match="no fusion with id"):
        Fusion(10 ** 6)
    with pytest.raises(DefinitionError, match="already defined and cannot be re-entered"):
        FusionDefinition(fs)
    fresh = Fusion()
    assert not fresh.defined()
    with pytest.raises(DefinitionError, match="not defined yet"):
        fresh.execute([])
    with pytest.raises(DefinitionError, match="not defined yet"):
        fresh.id()


def test_print_shows_the_ir(capsys):
    fs = _define(_pointwise)
    fs.print()
    out = capsys.readouterr().out
    assert "aten::mul" in out and "aten::tanh" in out and out.startswith("graph(")


# -- bad definitions and inputs: errors before any kernel runs --------------------------------------
def test_output_never_added():
    fs = Fusion()
    with pytest.raises(DefinitionError, match="no output"):
        with FusionDefinition(fs) as fd:
            fd.ops.relu(fd.define_tensor(1))
    assert not fs.defined()


def test_value_from_another_definition():
    with FusionDefinition(Fusion()) as fd1:
        t = fd1.define_tensor(1)
        fd1.add_output(t)
    with pytest.raises(DefinitionError, match="belongs to another"):
        with FusionDefinition(Fusion()) as fd2:
            fd2.add_output(fd2.ops.neg(t))
    with pytest.raises(DefinitionError, match="belongs to another"):
        with FusionDefinition(Fusion()) as fd3:
            fd3.add_output(t)


@pytest.mark.parametrize("call, msg", [
    (lambda fd, t: fd.ops.add(t, torch.ones(2)), "is a torch.Tensor"),
    (lambda fd, t: fd.ops.add(t, t, fd.define_scalar()), "must be a constant"),
    (lambda fd, t: fd.ops.add(t, t, 1, 2), "too many positional"),
    (lambda fd, t: fd.ops.gelu(t, approximate=3), "no overload"),
    (lambda fd, t: fd.ops.add(t, fd.define_tensor(3)), "fd.ops.add"),        # shapes do not broadcast? (ok)
])
def test_bad_operator_calls(call, msg):
    with FusionDefinition(Fusion()) as fd:
        t = fd.define_tensor(2)
        if msg == "fd.ops.add":
            fd.add_output(call(fd, t))            # rank 2 + rank 3 broadcasts: accepted
            return
        with pytest.raises(DefinitionError, match=msg):
            call(fd, t)
        fd.add_output(t)


def test_unknown_operator_and_closed_definition():
    with FusionDefinition(Fusion()) as fd:
        t = fd.define_tensor(1)
        with pytest.raises(AttributeError, match="no operator 'nosuch'"):
            fd.ops.nosuch(t)
        fd.add_output(t)
    with pytest.raises(DefinitionError, match="finished"):
        fd.ops.relu(t)
    with pytest.raises(DefinitionError, match="inside `with"):
        FusionDefinition(Fusion()).define_tensor(1)


def _typed(fd):
    t0 = fd.define_tensor(symbolic_sizes=[-1, 1], contiguous=[True, True], dtype=DataType.Half)
    s0 = fd.define_scalar(DataType.Int)
    fd.add_output(fd.ops.mul(t0, s0))


@pytest.mark.parametrize("inputs, msg", [
    (lambda: [torch.ones(3, 1).half()], "takes 2 input"),
    (lambda: [torch.ones(3, 1).half(), 2, 3], "takes 2 input"),
    (lambda: [torch.ones(3, 1), 2], "dtype torch.float32; the definition says DataType.Half"),
    (lambda: [torch.ones(3).half(), 2], "rank 1; the definition says 2"),
    (lambda: [torch.ones(3, 4).half(), 2], "dim 1 is a broadcast dim"),
    (lambda: [torch.ones(3, 1).half(), 2.5], "must be a Python int"),
    (lambda: [2, 2], "must be a tensor"),
    (lambda: torch.ones(3, 1), "takes a list"),
])
def test_bad_inputs_rejected_before_any_kernel(inputs, msg):
    fs = _define(_typed)
    before = dict(compiled.STATS)
    with pytest.raises(DefinitionError, match=msg):
        fs.execute(inputs())
    assert compiled.STATS == before
    out = fs.execute([torch.ones(3, 1).half(), 2])[0]
    assert out.dtype == torch.float16 and out.shape == (3, 1)


def test_inputs_that_do_not_broadcast_fail_before_compiling():
    def build(fd):
        t0, t1 = fd.define_tensor(1), fd.define_tensor(1)
        fd.add_output(fd.ops.add(t0, t1))

    fs = _define(build)
    before = compiled.STATS["builds"]
    with pytest.raises(DefinitionError, match="do not fit the definition"):
        fs.execute([torch.ones(3), torch.ones(4)])
    assert compiled.STATS["builds"] == before
