"""The column-sum kernel form on the CPU: RMSNorm / LayerNorm backwards are one kernel whose
row workers accumulate the weight / bias gradients over their rows (``passes/column_sums.py``,
``TensorParam.partials``); gradients against eager across dtypes, odd sizes, one row, zero rows
and constant rows; the CUDA rendering of every variant compiles with NVRTC."""
from __future__ import annotations

import pytest
import torch

from column_cases import MODULES, TOL, assert_grads_close, backward_groups, column_kernels, train_grads
from graphfuser.codegen.reduction.render import render_reduction
from graphfuser.codegen.dialects import CPP, CUDA
from graphfuser.codegen.reduction.schedule import reduction_variants, schedule_reduction
from graphfuser.runtime import nvrtc

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
SHAPES = [(64, 128), (33, 77), (1, 5), (5, 300), (129, 3)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(MODULES))
def test_grads_match_eager_in_one_kernel(name, dtype):
    got, ref, sf = train_grads(name, (64, 128), dtype, "cpu")
    assert_grads_close(got, ref, dtype)
    assert backward_groups(sf) == 1
    (k,) = column_kernels(sf)
    n_params = sum(1 for _ in MODULES[name](4).parameters())
    assert sum(t.partials for t in k.tensors) == n_params


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", ["rmsnorm_bench", "layer_norm"])
def test_odd_sizes(name, shape):
    for dtype in (torch.float32, torch.bfloat16):
        got, ref, sf = train_grads(name, shape, dtype, "cpu")
        assert_grads_close(got, ref, dtype)
        # one row: the column sums are over a size-1 dim, identities of the row kernel
        assert bool(column_kernels(sf)) == (shape[0] > 1)


@pytest.mark.parametrize("name", ["rmsnorm_bench", "nn.LayerNorm", "rms_norm"])
def test_constant_rows(name):
    """Zero variance (layer norm: rstd = 1 / sqrt(eps)) and rows of one value."""
    for dtype in (torch.float32, torch.float64):
        got, ref, _ = train_grads(name, (17, 40), dtype, "cpu", "constant_rows")
        assert_grads_close(got, ref, dtype)


def test_zero_rows_match_eager():
    """An empty batch runs eager's program for that call: zero weight and bias gradients."""
    got, ref, _ = train_grads("layer_norm", (0, 16), torch.float32, "cpu", calls=1)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b)
    assert not got[1].any() and not got[2].any()


def test_zero_rows_after_profiling_with_rows():
    """A profiled kernel meeting an empty batch later: the launcher defers that call to eager."""
    from column_cases import MODULES as M

    import graphfuser
    from graphfuser.config import config

    torch.manual_seed(0)
    m = M["layer_norm"](16)
    sf = graphfuser.script(m)
    with config.override(disable=["fallback"]):
        for n in (8, 8, 8, 0, 8):
            x = torch.randn(n, 16, requires_grad=True)
            m.zero_grad()
            sf(x).backward(torch.ones(n, 16))
            w, b = m.weight.grad.clone(), m.bias.grad.clone()
            m.zero_grad()
            m(x).backward(torch.ones(n, 16))
            torch.testing.assert_close(w, m.weight.grad)
            torch.testing.assert_close(b, m.bias.grad)


def test_kernel_renders_slots_for_both_dialects():
    """One lowering, two renderings: the slot loop is each dialect's grid loop over gf_slots, the
    partials are accumulated in registers (persistent CUDA variants) or in the slot (CPU)."""
    _, _, sf = train_grads("rmsnorm_bench", (64, 128), torch.bfloat16, "cpu")
    (k,) = column_kernels(sf)
    for dialect, target in ((CPP, "cpu"), (CUDA, "cuda")):
        for p in reduction_variants(k, target):
            assert not p.split
            src = render_reduction(k, schedule_reduction(k, p), dialect, "f", max_threads=p.max_threads,
                                   online=p.online, scratch=p.scratch)
            assert "gf_slots" in src and "i0 = gf_slot; i0 < n0; i0 += gf_slots" in src, src
            if target == "cuda" and p.persistent:
                assert "ca_t" in src and "+= " in src
            else:
                assert "[((gf_slot * n1)" in src or "[(x" in src


NVRTC_OK, NVRTC_WHY = nvrtc.available()


@pytest.mark.skipif(not NVRTC_OK, reason=f"NVRTC is not available here: {NVRTC_WHY}")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64], ids=str)
def test_column_kernels_compile_with_nvrtc(dtype):
    from grad_helpers import compile_as_cuda
    from graphfuser.autodiff.function import DifferentiableGroup

    for name in ("rmsnorm_bench", "layer_norm"):
        _, _, sf = train_grads(name, (33, 77), dtype, "cpu")
        subs = [n.subgraph for r in sf._runners.values() if isinstance(r, DifferentiableGroup)
                for n in r.backward._optimized.all_nodes() if n.kind.endswith("FusionGroup")]
        assert len(subs) == 1
        compile_as_cuda(subs, f"col_{name.replace('.', '_')}")


def test_column_sum_read_inside_the_group_is_not_merged():
    """A column sum that another node of the group reads is no column sum: the analysis says
    why, and the partition keeps two groups."""
    from graphfuser.ir import parse_graph
    from graphfuser.ops.axes import analyze

    g = parse_graph("""graph(%x : Float(8, 16, strides=[16, 1], requires_grad=0, device=cpu)):
  %d : int[] = prim::Constant[value=[-1]]()
  %z : int[] = prim::Constant[value=[0]]()
  %t : bool = prim::Constant[value=1]()
  %n : NoneType = prim::Constant()
  %r : Float(8, 1, strides=[1, 1], requires_grad=0, device=cpu) = aten::sum(%x, %d, %t, %n)
  %y : Float(8, 16, strides=[16, 1], requires_grad=0, device=cpu) = aten::mul(%x, %r)
  %c : Float(1, 16, strides=[16, 1], requires_grad=0, device=cpu) = aten::sum(%y, %z, %t, %n)
  %w : Float(1, 16, strides=[16, 1], requires_grad=0, device=cpu) = aten::mul(%c, %c)
  return (%y, %w)""")
    nodes = [n for n in g.block.nodes if n.kind != "prim::Constant"]
    assert not isinstance(analyze(nodes[:3], columns=True), str)
    assert isinstance(analyze(nodes[:3]), str)
    why = analyze(nodes + [], columns=True)
    # %c feeds %w inside: neither set is a column sum... unless %w is outside the group
    assert isinstance(why, str) and "column" in why


@pytest.mark.parametrize("threads", [1, 2])
def test_shared_partials_workspace(monkeypatch, threads):
    """A layer norm's two column sums (weight, bias) share one zeroed workspace, summed over the
    slots by one call, or read as they are with one slot (one thread); the gradients match eager."""
    from graphfuser.executor import compiled

    monkeypatch.setattr(compiled, "_MEMORY", {})      # launchers built with this thread count
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for shape in [(64, 128), (33, 77), (2, 300)]:
            got, ref, sf = train_grads("layer_norm", shape, torch.float32, "cpu")
            assert_grads_close(got, ref, torch.float32)
            assert got[1].data_ptr() != got[2].data_ptr()
    finally:
        torch.set_num_threads(old)
    sources = [r.compiled.launcher_source for r in compiled._MEMORY.values() if hasattr(r, "compiled")]
    shared = [s for s in sources if "w.as_strided" in s]
    assert shared and all("_zeros(2 * span" in s and s.count("_zeros(") == 1 for s in shared)


@pytest.mark.parametrize("shape,dims,y", [
    ((33, 2, 1), [1, 2], (1,)),        # fuzz graph 5274 of seed 8787: a per-row gradient summed to [1]
    ((33, 2, 1), [2, 1], (1, 1)),      # the reduced dims listed out of order
    ((9, 1, 5), [1, 2], (1,)),
    ((9, 4, 5), [2], (4, 1)),          # the column sum walks a kept axis, not the reduced one
    ((9, 4, 5), [1, 2], (1, 1, 1)),
])
def test_column_sums_that_do_not_walk_the_reduced_axes_stay_apart(shape, dims, y):
    """A row reduction's input gradient next to a sum over its rows that is constant along the
    reduced axes: the partition keeps them apart (logged) instead of a group that cannot lower,
    and the gradients match eager's with the fallback disabled."""
    from grad_helpers import GRAD_TOL, check_grads, make_function

    fn = make_function(["x", "y"], [f"torch.mean(x, {dims}, keepdim=True, dtype=torch.float16) + y",
                                    f"torch.sum(x * 2.0, {dims}, keepdim=True) * y"])
    g = torch.Generator().manual_seed(0)
    x = torch.rand(shape, generator=g).requires_grad_()
    yv = torch.rand(y, generator=g, dtype=torch.float64).requires_grad_()
    check_grads(fn, [x, yv], dict(GRAD_TOL[torch.float16]))


def test_column_sums_are_not_merged_where_the_merge_makes_a_cycle(monkeypatch):
    """The cycle check still has the last word once the column outputs fit: a merge it refuses
    keeps the column sums in their own group, with the gradients unchanged."""
    import importlib

    cs = importlib.import_module("graphfuser.passes.column_sums")
    merge = cs.merge_column_sums

    def every_join_a_cycle(part):
        part.can_join = lambda a, b, limit: False
        return merge(part)
    monkeypatch.setattr(cs, "merge_column_sums", every_join_a_cycle)
    got, ref, sf = train_grads("layer_norm", (64, 128), torch.float32, "cpu")
    assert_grads_close(got, ref, torch.float32)
    assert not column_kernels(sf)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_cuda_launcher_finalizes_columns_in_one_launch(dtype):
    """The CUDA launcher of a layer norm backward (generated here without a GPU): the partials
    go to the stream's workspace, zeroed only for variants that add into it, and one launch of
    ``runtime/column_sums.py``'s kernel writes the weight and bias gradients in their dtype; no
    torch op sums the slots."""
    from graphfuser.autodiff.function import DifferentiableGroup
    from graphfuser.executor.compiled_reduction import ReductionGroup, launcher_source
    from graphfuser.ir import parse_graph, print_graph

    _, _, sf = train_grads("layer_norm", (33, 77), dtype, "cpu")
    (sub,) = [n.subgraph for r in sf._runners.values() if isinstance(r, DifferentiableGroup)
              for n in r.backward._optimized.all_nodes() if n.kind.endswith("FusionGroup")]
    cg = ReductionGroup(parse_graph(print_graph(sub).replace("device=cpu", "device=cuda:0")), "cuda",
                        torch.device("cuda:0"), "k")
    src = launcher_source(cg)
    compile(src, "<launcher>", "exec")
    assert "_colws(_stream(_devidx), 2 * span * 4, f.zero_columns)" in src
    assert src.count("_colsum.launch(") == 1 and ".sum(" not in src and "_zeros" not in src
    # registers (persistent variants) write their slots whole; the others add into them
    assert True in cg.column_registers and False in cg.column_registers
