"""Hand schedules: the seed's pointwise example (merge -> split 128 -> split 4 -> compute_at ->
inline_most -> BIDx / Unroll / TIDx -> parallelize_all_like) against eager and the automatic
schedule, other legal schedules, every illegal one, the dumps, and CUDA (NVRTC / GPU)."""
from __future__ import annotations

import dataclasses

import pytest
import torch

import graphfuser
from graphfuser.codegen.schedule import LoopNest
from graphfuser.config import config
from graphfuser.executor import compiled
from graphfuser.frontend import (ComputeAtMode, DataType, DefinitionError, Fusion, FusionDefinition, ParallelType,
                                 ScheduleError)
from graphfuser.ir.clone import clone_graph
from graphfuser.ir.types import TensorType
from graphfuser.runtime import nvrtc
from helpers import DEVICES

P = ParallelType


def seed_fusion(schedule: bool = True, contiguous: bool = True, scale: float = 2.0) -> Fusion:
    """tv3 = tv0 + (tv1 + scale), scheduled as in the seed's C++ example."""
    fs = Fusion()
    with FusionDefinition(fs) as fd:
        tv0 = fd.define_tensor(symbolic_sizes=[-1, -1], contiguous=[contiguous] * 2)
        tv1 = fd.define_tensor(symbolic_sizes=[-1, -1], contiguous=[contiguous] * 2)
        tv2 = fd.ops.add(tv1, fd.define_constant(scale))
        tv3 = fd.ops.add(tv0, tv2)
        fd.add_output(tv3)
        if schedule:
            fd.schedule()
            tv3.merge(0)
            tv3.split(0, 128)
            tv3.split(0, 4)
            for tv in (tv0, tv1):
                tv.compute_at(tv3, -1, ComputeAtMode.MostInlined)
            fd.inline_most()
            tv3.axis(0).parallelize(P.BIDx)
            tv3.axis(1).parallelize(P.Unroll)
            tv3.axis(2).parallelize(P.TIDx)
            tv3.parallelize_all_like()
    return fs


@pytest.mark.parametrize("device", DEVICES)
def test_seed_schedule_matches_eager_and_automatic(device):
    manual, auto = seed_fusion(), seed_fusion(schedule=False)
    assert manual.id() != auto.id()
    for shape in ((37, 129), (4, 1000)):
        x, y = torch.randn(*shape, device=device), torch.randn(*shape, device=device)
        got = manual.execute([x, y])[0]
        torch.testing.assert_close(got, x + (y + 2.0))
        torch.testing.assert_close(got, auto.execute([x, y])[0])


def test_seed_schedule_kernel_and_loop_nest(capsys):
    fs = Fusion()
    with FusionDefinition(fs) as fd:
        tv0, tv1 = fd.define_tensor([-1, -1], [True, True]), fd.define_tensor([-1, -1], [True, True])
        tv3 = fd.ops.add(tv0, fd.ops.add(tv1, 2.0))
        fd.add_output(tv3)
        with fd.schedule():
            tv3.merge(0).split(0, 128).split(0, 4)
            tv0.compute_at(tv3, -1, ComputeAtMode.MostInlined)
            tv3.parallelize(0, P.BIDx).parallelize(1, P.Unroll).parallelize(2, P.TIDx)
            tv0.parallelize_all_like(tv3)
            fd.print_loop_nest()
            tv0.print_loop_nest()
    out = capsys.readouterr().out
    assert "for i0 in BIDx(ceilDiv(ceilDiv((n0 * n1), 128), 4)):" in out
    assert "  for i1 in Unroll(4):" in out and "    for i2 in TIDx(128):" in out
    assert out.count("for i2 in TIDx(128)") == 2                      # tv0 was replayed and parallelized
    x, y = torch.randn(33, 65), torch.randn(33, 65)
    torch.testing.assert_close(fs.execute([x, y])[0], x + (y + 2.0))
    with config.override(dump=["scheduler_params", "cpp_kernel"]):
        fs.execute([torch.randn(3, 2).t(), y[:2, :3].contiguous()])        # a new signature: compiles
    dumped = capsys.readouterr().out
    assert "tv.merge(0)\ntv.split(0, 128)\ntv.split(0, 4)\ntv.parallelize(0, ParallelType.BIDx)" in dumped
    assert "#pragma GCC unroll 4" in dumped


def test_automatic_schedule_dump_shows_transforms(capsys):
    def f(x):
        return (x * 2.0).relu()

    sf = graphfuser.script(f)
    with config.override(dump=["scheduler_params"]):
        for _ in range(3):
            sf(torch.randn(16, 3, 5).transpose(0, 1))
    out = capsys.readouterr().out
    assert "PointwiseParams(target='cpu'" in out and "tv.parallelize(0, ParallelType.BIDx)" in out


@pytest.mark.parametrize("build, inputs", [
    # reorder: iterate a transposed input in memory order
    (lambda t: t.reorder({0: 1}).split(0, 3).parallelize(0, P.BIDx),
     lambda: [torch.randn(5, 13), torch.randn(13, 5).t()]),
    # vectorize the inner split of the innermost dim (CPU: a simd loop)
    (lambda t: t.split(1, 4).parallelize(2, P.Vectorize).parallelize(0, P.BIDx),
     lambda: [torch.randn(5, 12), torch.randn(5, 12)]),
    (lambda t: t.merge(0).split(0, 8).parallelize(1, P.Vectorize),
     lambda: [torch.randn(5, 11), torch.randn(5, 11)]),
    # split with the outer part of the given size
    (lambda t: t.split(1, 3, inner_split=False).parallelize(1, P.Unroll),
     lambda: [torch.randn(4, 10), torch.randn(4, 10)]),
    # symbolic dims that are 1 at run time: extent-1 loops
    (lambda t: t.merge(0).split(0, 4).parallelize(1, P.Unroll),
     lambda: [torch.randn(1, 7), torch.randn(1, 7)]),
])
def test_other_manual_schedules(build, inputs):
    fs = Fusion()
    with FusionDefinition(fs) as fd:
        t0, t1 = fd.define_tensor([-1, -1], [True, True]), fd.define_tensor([-1, -1], [True, True])
        t2 = fd.ops.mul(fd.ops.sub(t0, t1), 3.0)
        fd.add_output(t2)
        with fd.schedule():
            build(t2)
    x, y = inputs()
    torch.testing.assert_close(fs.execute([x, y])[0], (x - y) * 3.0)


def test_broadcast_input_and_new_sizes_reuse_the_kernel():
    fs = Fusion()
    with FusionDefinition(fs) as fd:
        t0 = fd.define_tensor(symbolic_sizes=[-1, 1, -1], contiguous=[True, True, True])
        t1 = fd.define_tensor(symbolic_sizes=[-1, -1, -1], contiguous=[True, True, True])
        t2 = fd.ops.add(t0, t1)
        fd.add_output(t2)
        with fd.schedule():
            t2.merge(1).merge(0).split(0, 64).parallelize(0, P.BIDx).parallelize(1, P.TIDx)
    x, y = torch.randn(2, 1, 8), torch.randn(2, 4, 8)
    torch.testing.assert_close(fs.execute([x, y])[0], x + y)
    before = compiled.STATS["builds"]
    x, y = torch.randn(3, 1, 50), torch.randn(3, 7, 50)
    torch.testing.assert_close(fs.execute([x, y])[0], x + y)
    assert compiled.STATS["builds"] == before


# -- illegal schedules ----------------------------------------------------------------------------
def _schedule(body, contiguous=True, extra_output=False):
    fs = Fusion()
    with FusionDefinition(fs) as fd:
        t0 = fd.define_tensor([-1, -1], [contiguous] * 2)
        t1 = fd.define_tensor([-1, -1], [contiguous] * 2)
        t2 = fd.ops.add(t0, t1)
        t3 = fd.ops.relu(t2)
        fd.add_output(t3)
        if extra_output:
            fd.add_output(t2)
        with fd.schedule():
            body(fd, t0, t1, t3)
    return fs


@pytest.mark.parametrize("body, msg, kw", [
    (lambda fd, a, b, c: c.split(2, 4), "T3.split: axis 2 does not exist", {}),
    (lambda fd, a, b, c: c.merge(1), "axis 2 does not exist", {}),
    (lambda fd, a, b, c: c.reorder({0: 5}), "does not exist", {}),
    (lambda fd, a, b, c: c.parallelize(0, P.BIDx).parallelize(1, P.BIDx), "already bound to BIDx", {}),
    (lambda fd, a, b, c: c.split(1, 4).parallelize(2, P.Vectorize), "not declared contiguous",
     {"contiguous": False}),
    (lambda fd, a, b, c: c.split(0, 4).parallelize(1, P.Vectorize), "only the innermost axis", {}),
    (lambda fd, a, b, c: c.parallelize(0, P.Unroll), "constant extent", {}),
    (lambda fd, a, b, c: c.split(0, 0), "positive integer", {}),
    (lambda fd, a, b, c: c.parallelize(0, "BIDx"), "not a ParallelType", {}),
    (lambda fd, a, b, c: c.compute_at(a, -1), "is not a producer of", {}),
    (lambda fd, a, b, c: a.compute_at(c, 3), "outside T3's 2 axes", {}),
    (lambda fd, a, b, c: a.compute_at(c, -1, "MostInlined"), "ComputeAtMode", {}),
    (lambda fd, a, b, c: a.merge(0), "transform an output", {}),
    (lambda fd, a, b, c: (c.merge(0), fd._outputs[1].split(0, 2)), "scheduled differently", {"extra_output": True}),
    (lambda fd, a, b, c: b.parallelize_all_like(c.merge(0)), "apply the same transforms", {}),
])
def test_illegal_schedules(body, msg, kw):
    with pytest.raises(ScheduleError, match=msg):
        _schedule(body, **kw)


def test_scheduling_outside_the_schedule_phase():
    with pytest.raises(ScheduleError, match="call fd.schedule"):
        with FusionDefinition(Fusion()) as fd:
            t = fd.define_tensor(2)
            fd.add_output(t)
            t.merge(0)
    with FusionDefinition(Fusion()) as fd:
        t = fd.define_tensor(2)
        fd.add_output(fd.ops.neg(t))
        fd.schedule()
        with pytest.raises(DefinitionError, match="definition part is over"):
            fd.ops.neg(t)
    with pytest.raises(ScheduleError, match="schedule inside"):
        t.merge(0)


def test_highest_rank_output_and_pointwise_only():
    with pytest.raises(ScheduleError, match="highest-rank output"):
        with FusionDefinition(Fusion()) as fd:
            a, b = fd.define_tensor(1), fd.define_tensor(2)
            fd.add_output(fd.ops.neg(a))
            fd.add_output(fd.ops.add(a, b))
            with fd.schedule():
                fd._outputs[0].split(0, 4)
    with pytest.raises(ScheduleError, match="pointwise fusions"):
        with FusionDefinition(Fusion()) as fd:
            a = fd.define_tensor(2)
            s = fd.ops.sum(a, [1])
            fd.add_output(s)
            with fd.schedule():
                s.split(0, 4)


def test_vectorizing_a_strided_input_is_rejected_at_execute():
    fs = _schedule(lambda fd, a, b, c: c.split(1, 4).parallelize(2, P.Vectorize))
    y = torch.randn(6, 8)
    torch.testing.assert_close(fs.execute([torch.ones(6, 8), y])[0], (1 + y).relu())
    with pytest.raises(ScheduleError, match="stride 6 in its innermost dim"):
        fs.execute([torch.ones(8, 6).t(), y])


# -- CUDA -------------------------------------------------------------------------------------------
def _cuda_group(fs: Fusion, inputs: list) -> compiled.CompiledGroup:
    """Render (no GPU needed) the CUDA kernels of ``fs`` for inputs of these types."""
    from graphfuser.frontend.fusion import _profile

    g = clone_graph(fs._record.graph)
    _profile(g, inputs, fs.id())
    cuda = torch.device("cuda", 0)
    for v in list(g.inputs) + [o for n in g.block.nodes for o in n.outputs]:
        if isinstance(v.type, TensorType):
            v.type = dataclasses.replace(v.type, device=cuda)
    return compiled.CompiledGroup(g, "cuda", cuda, "manual", fs._record.scheduler)


@pytest.mark.skipif(not nvrtc.available()[0], reason=f"NVRTC unavailable: {nvrtc.available()[1]}")
def test_manual_cuda_kernels_compile_with_nvrtc():
    fs = _schedule(lambda fd, a, b, c: (c.merge(0).split(0, 4).split(0, 128), c.parallelize(0, P.BIDx),
                                        c.parallelize(1, P.TIDx), c.parallelize(2, P.Vectorize)))
    cg = _cuda_group(fs, [torch.randn(8, 64), torch.randn(8, 64)])
    assert [v[0] for v in cg.variants] == ["manual_s_i32", "manual_v_i32", "manual_s_i64", "manual_v_i64"]
    assert [(p.block, p.vector) for _, _, p, _ in cg.variants] == [(128, 1), (128, 4)] * 2
    assert "threadIdx.x" in cg.source and "gf_load<4>" in cg.source
    assert nvrtc.compile_cubin(cg.source, cg.variants[0][0], 90).startswith(b"\x7fELF")
    seed = _cuda_group(seed_fusion(scale=3.5), [torch.randn(8, 64), torch.randn(8, 64)])
    assert [(p.block, p.unroll) for _, _, p, _ in seed.variants] == [(128, 4), (128, 4)]
    assert nvrtc.compile_cubin(seed.source, seed.variants[0][0], 90).startswith(b"\x7fELF")


@pytest.mark.parametrize("body, msg", [
    (lambda fd, a, b, c: c.parallelize(0, P.BIDx).parallelize(1, P.TIDx), "threads per block must be a constant"),
    (lambda fd, a, b, c: c.split(1, 32).parallelize(0, P.BIDx).parallelize(2, P.TIDy), "TIDy"),
    (lambda fd, a, b, c: c.split(1, 32).parallelize(2, P.TIDx), "BIDx"),
])
def test_cuda_launch_limits(body, msg):
    fs = _schedule(body)
    with pytest.raises(ScheduleError, match=msg):
        fs._record.scheduler.check_target("cuda")
    fs._record.scheduler.check_target("cpu")


@pytest.mark.cuda
def test_vectorized_manual_schedule_on_gpu():
    fs = _schedule(lambda fd, a, b, c: (c.merge(0).split(0, 4).split(0, 128), c.parallelize(0, P.BIDx),
                                        c.parallelize(1, P.TIDx), c.parallelize(2, P.Vectorize)))
    for shape in ((64, 1024), (37, 101)):                 # aligned: vectorized; ragged: the scalar variant
        x, y = torch.randn(*shape, device="cuda"), torch.randn(*shape, device="cuda")
        torch.testing.assert_close(fs.execute([x, y])[0], (x + y).relu())


def test_loop_nest_over_axes_keeps_roots():
    nest = LoopNest.over_axes(2, [1, None, 0])
    assert [str(d.extent) for d in nest.leaves] == ["n1", "1", "n0"]
    with pytest.raises(ScheduleError, match="must appear once"):
        LoopNest.over_axes(2, [0, None])
    dtype_check = DataType.Float
    assert dtype_check.torch == torch.float32
