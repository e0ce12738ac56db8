"""python_definition: the seed's format, the dump for frontend and scripted fusions, the round
trip (print -> exec -> execute -> compare) for scripted groups covering the op table, and the
standalone repro the failure path writes."""
from __future__ import annotations

import glob
import runpy

import pytest
import torch

import graphfuser
from fd_helpers import define_from_text, definitions_in
from graphfuser.config import config
from graphfuser.executor import compiled
from graphfuser.executor.fusion import FusionFailure
from graphfuser.executor.fusion_eager import eager_runner
from graphfuser.frontend import DataType, Fusion, FusionDefinition
from graphfuser.ops.python_definition import float_text, python_definition
from graphfuser.ir.types import TensorType
from helpers import fusion_groups

SEED = """\
def nvfuser_fusion_id{fid}(fd : FusionDefinition) -> None :
    T0 = fd.define_tensor(symbolic_sizes=[-1, 1, -1], contiguous=[True, True, True], dtype=DataType.Float)
    T1 = fd.define_tensor(symbolic_sizes=[-1, -1, -1], contiguous=[False, False, False], dtype=DataType.Float)
    S2 = fd.define_constant(3.00000)
    T3 = fd.ops.add(T0, T1)
    T4 = fd.ops.mul(T3, S2)
    fd.add_output(T4)"""


def _seed_fusion() -> Fusion:
    fs = Fusion()
    with FusionDefinition(fs) as fd:
        t0 = fd.define_tensor(symbolic_sizes=[-1, 1, -1], contiguous=[True, True, True], dtype=DataType.Float)
        t1 = fd.define_tensor(3)
        c0 = fd.define_constant(3.0)
        fd.add_output(fd.ops.mul(fd.ops.add(t0, t1), c0))
    return fs


def test_seed_format():
    fs = _seed_fusion()
    assert fs.python_definition() == SEED.format(fid=fs.id())


def test_float_text():
    assert [float_text(v) for v in (3.0, 0.5, 0.044715, 1e-12, float("inf"))] == \
        ["3.00000", "0.50000", "0.044715", "1e-12", "float('inf')"]


def test_printed_definition_runs_and_is_the_same_fusion():
    fs = _seed_fusion()
    again = define_from_text(fs.python_definition())
    assert again.id() == fs.id()
    x, y = torch.randn(2, 1, 8), torch.randn(2, 4, 8)
    torch.testing.assert_close(again.execute([x, y])[0], (x + y) * 3.0)


def test_dump_for_frontend_fusions(capsys):
    """Printed when the fusion is compiled for a new input signature."""
    fs = _seed_fusion()
    with config.override(dump=["python_definition"]):
        fs.execute([torch.randn(1, 1, 8, dtype=torch.float32), torch.randn(1, 4, 8)])   # a new signature
    assert definitions_in(capsys.readouterr().out) == [fs.python_definition()]


# -- scripted groups ------------------------------------------------------------------------------
def arith(x, y, z):
    return (x + y * 2.0 - z) / (y.abs() + 1.0) - torch.rsub(x, z, alpha=2) + (-x).reciprocal()


def unary(x, y, z):
    a = torch.exp(x) + torch.log(x.abs() + 1) + torch.sqrt(y.abs()) + torch.sin(x) * torch.cos(y)
    b = torch.tanh(z) + torch.sigmoid(x) + torch.erf(y) + torch.expm1(z) + torch.log1p(x.abs()) + torch.atan(y)
    c = torch.floor(x) + torch.ceil(y) + torch.round(z) + torch.trunc(x) + torch.frac(y) + torch.sign(z)
    return a, b * c


def activations(x, y, z):
    F = torch.nn.functional
    return (F.relu(x) + F.leaky_relu(y, 0.2) + F.hardtanh(z, -0.5, 0.5) + F.gelu(x, approximate="tanh")
            + F.gelu(y) + F.silu(z) + F.softplus(x, 2.0, 10.0))


def selects(x, y, z):
    a = torch.where(x > y, x, 0.5) + torch.clamp(x, -0.3, 0.3) + torch.clamp_min(y, 0.1) + torch.clamp_max(z, 0.2)
    b = torch.maximum(x, y) - torch.minimum(y, z) + torch.threshold(x, 0.1, 2.0) + torch.lerp(x, y, 0.3)
    return a, b + torch.addcmul(x, y, z, value=0.5) + torch.addcdiv(x, y, z.abs() + 1.0, value=2.0)


def powers(x, y, z):
    a = x ** 2 + x.pow(3.0) + torch.pow(x.abs() + 1.0, y) + torch.fmod(x, 0.7) + torch.remainder(y, 0.7)
    return a + torch.div(x, z, rounding_mode="trunc") + torch.div(y, z, rounding_mode="floor")


def classes(x, y, z):
    w = torch.nan_to_num(x / y) + torch.nn.functional.dropout(z, 0.5, False)
    return torch.isnan(w) | torch.isinf(x / y), torch.isfinite(w) & (x < y), torch.logical_not(x >= z), w


def casts(x, y, z):
    return (x.half() * 2).float() + y.to(torch.float64), z.type_as(y.half()), (x * 10).int()


def ints(a, b):
    return ((a * 3 + b) & 7) | (a ^ 3), ~b, (a > b) != (a <= b), torch.logical_or(a == 1, b != 2)


def scalars(x, s: float, n: int):
    return x * s + n, torch.eq(x, s)


def arith_selects_powers(x, y, z):
    return arith(x, y, z), selects(x, y, z), powers(x, y, z)


def unary_activations(x, y, z):
    return unary(x, y, z), activations(x, y, z)


def classes_casts(x, y, z):
    return classes(x, y, z), casts(x, y, z)


def reductions(x, y, z):
    """Reduction rows too (lists of dims, a run-time normalized_shape, weights)."""
    return (torch.softmax(x * 2.0, -1), torch.layer_norm(x, [x.size(-1)], y[0], z[0], 1e-5), x.sum(-1),
            (x + 1).mean([0], keepdim=True))


def _float3(layout: str):
    x = torch.randn(6, 10)
    y = torch.randn(10, 6).t() if "transposed" in layout else torch.randn(6, 10)
    z = torch.randn(1, 10) if "broadcast" in layout else torch.randn(6, 10)
    return x, y + 0.1, z


# Few functions, many rows each: every group compiles twice here (scripted, then re-defined).
CASES = [(arith_selects_powers, "transposed+broadcast"), (unary_activations, "dense"),
         (classes_casts, "transposed"), (reductions, "dense")]


def _inputs_for(sub) -> list:
    """Random inputs of the group's profiled types (sizes, strides, dtypes); an int scalar is the
    first tensor's last size (it may be a shape, as in layer_norm's normalized_shape)."""
    out = []
    size = next(v.type.sizes[-1] for v in sub.inputs if isinstance(v.type, TensorType))
    for v in sub.inputs:
        t = v.type
        if not isinstance(t, TensorType):
            out.append({"int": size, "bool": True}.get(t.name, 1.25))
            continue
        n = 1 + sum((s - 1) * st for s, st in zip(t.sizes, t.strides))
        if t.dtype.is_floating_point:
            base = torch.randn(n).to(t.dtype)
        elif t.dtype == torch.bool:
            base = torch.rand(n) > 0.5
        else:
            base = torch.randint(-8, 8, (n,)).to(t.dtype)
        out.append(base.as_strided(t.sizes, t.strides))
    return out


def _roundtrip_groups(fn, *args) -> int:
    sf = graphfuser.script(fn)
    for _ in range(3):
        sf(*args)
    groups = fusion_groups(sf._optimized)
    for k, group in enumerate(groups):
        sub = group.subgraph
        fs = define_from_text(python_definition(sub, k))
        inputs = _inputs_for(sub)
        got = fs.execute(inputs)
        expected = eager_runner(sub, "reference")(*inputs)
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            tol = {"rtol": 1e-2, "atol": 1e-2} if e.dtype == torch.float16 else {"rtol": 1e-5, "atol": 1e-5}
            torch.testing.assert_close(g, e, equal_nan=True, **tol)
    return len(groups)


@pytest.mark.parametrize("fn, layout", CASES, ids=[f"{f.__name__}-{lay}" for f, lay in CASES])
def test_scripted_groups_roundtrip(fn, layout):
    assert _roundtrip_groups(fn, *_float3(layout)) >= 1


def test_scripted_int_and_scalar_groups_roundtrip():
    a, b = torch.randint(-5, 5, (7, 9)), torch.randint(-5, 5, (7, 9))
    assert _roundtrip_groups(ints, a, b) >= 1
    assert _roundtrip_groups(scalars, torch.randn(4, 5), 0.5, 2) >= 1


def test_dump_for_scripted_groups(capsys):
    sf = graphfuser.script(arith)
    with config.override(dump=["python_definition"]):
        for _ in range(3):
            sf(*_float3("broadcast"))
    texts = definitions_in(capsys.readouterr().out)
    groups = fusion_groups(sf._optimized)
    assert texts and len(texts) == len(groups)
    for text, group in zip(texts, groups):
        assert text == python_definition(group.subgraph, group.attrs["cache_id"])
        define_from_text(text)


# -- repro scripts --------------------------------------------------------------------------------
def _break_compile(monkeypatch):
    def boom(cg):
        raise RuntimeError("injected launcher failure")

    monkeypatch.setattr(compiled, "_build_launcher", boom)
    monkeypatch.setattr(compiled, "_MEMORY", {})


def _run_script(path: str, monkeypatch, capsys) -> str:
    """Run a repro script as ``__main__`` (in this process: a fresh one would spend seconds on imports)."""
    monkeypatch.setenv("PYTORCH_NVFUSER_DISABLE", "fallback")    # what the script sets; restored after
    capsys.readouterr()
    runpy.run_path(path, run_name="__main__")
    return capsys.readouterr().out


def test_failed_scripted_group_writes_runnable_repro(monkeypatch, tmp_path, capsys):
    _break_compile(monkeypatch)
    sf = graphfuser.script(casts)
    with config.override(disable=["fallback"], repro_dir=str(tmp_path)):
        with pytest.raises(FusionFailure, match="injected launcher failure"):
            for _ in range(3):
                sf(*_float3("transposed"))
    report = glob.glob(str(tmp_path / "*.txt"))[0]
    text = open(report).read()
    assert "## python definition" in text and "def nvfuser_fusion_id" in text
    script = report[:-4] + ".py"
    assert "fd.ops.cast" in open(script).read() and "rand([6, 10], [1, 6]" in open(script).read()
    monkeypatch.undo()
    assert "(6, 10) torch.int32" in _run_script(script, monkeypatch, capsys)


def test_failed_frontend_fusion_writes_runnable_repro(monkeypatch, tmp_path, capsys):
    _break_compile(monkeypatch)

    fs = Fusion()
    with FusionDefinition(fs) as fd:
        t0 = fd.define_tensor(2, DataType.Half)
        s0 = fd.define_scalar(DataType.Double)
        fd.add_output(fd.ops.mul(fd.ops.cast(t0, DataType.Float), s0))
    with config.override(disable=["fallback"], repro_dir=str(tmp_path)):
        with pytest.raises(FusionFailure):
            fs.execute([torch.randn(3, 4).half(), 2.0])
    script = glob.glob(str(tmp_path / "*.py"))[0]
    monkeypatch.undo()
    assert "(3, 4) torch.float32" in _run_script(script, monkeypatch, capsys)
