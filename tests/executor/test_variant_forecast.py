"""The variant forecast (``executor/compiled_reduction._compile_expected_variant``): building a
CUDA reduction launcher compiles the variant its first call at the profiled sizes will take, so
that call compiles nothing. Runs without a GPU: the CUDA launchers are built over fake driver
objects and their first call runs on CPU tensors of the profiled types."""
import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.ir import parse_graph, print_graph
from graphfuser.ops.axes import needs_axes


class _Kernel:
    made: list = []

    def __init__(self, cubin, name, idx, kinds, cooperative=False):
        self.name, self.cooperative, self.launches = name, cooperative, 0
        _Kernel.made.append(name)

    def set_max_dynamic_shared(self, n):
        pass

    def resident_blocks(self, threads, shared):
        return 4

    def launch(self, *a, **k):
        self.launches += 1


class _Scratch:
    def get(self, *a):
        return 0, 0, None

    def columns(self, *a):
        return 0, None


class _Columns:
    def launch(self, *a, **k):
        pass


@pytest.fixture
def fake_driver(monkeypatch):
    from graphfuser.runtime import column_sums, cuda_driver, nvrtc, scratch

    _Kernel.made = []
    monkeypatch.setattr(cuda_driver, "device_arch", lambda i: 90)
    monkeypatch.setattr(cuda_driver, "sm_count", lambda i: 132)
    monkeypatch.setattr(cuda_driver, "CudaKernel", _Kernel)
    monkeypatch.setattr(cuda_driver, "RAW_STREAM", lambda i: 0)
    monkeypatch.setattr(nvrtc, "compile_cubin", lambda *a, **k: b"")
    monkeypatch.setattr(scratch, "split_scratch", lambda device: _Scratch())
    monkeypatch.setattr(column_sums, "column_sum_kernel", lambda *a: _Columns())
    monkeypatch.setattr(column_sums, "launch_shape", lambda *a: ((1, 1, 1), (1, 1, 1)))
    return _Kernel


def _groups(fn, *args):
    sf = graphfuser.script(fn)
    for _ in range(3):
        sf(*args)
    g = graphfuser.last_executed_optimized_graph()
    return [n.subgraph for n in g.all_nodes() if n.kind.endswith("FusionGroup")]


def _backward_groups(fn, *args):
    """The fused groups of ``fn``'s backward (its inputs require grad; single-node mode, so that a
    lone normalization's backward is fused too)."""
    from graphfuser.autodiff.function import DifferentiableGroup
    from graphfuser.config import config

    sf = graphfuser.script(fn)
    with config.override(single_node_mode=True):
        for _ in range(4):
            sf(*args).sum().backward()
    return [n.subgraph for r in sf._runners.values() if isinstance(r, DifferentiableGroup)
            for n in r.backward._optimized.all_nodes() if n.kind.endswith("FusionGroup")]


def _softmax(x):
    return torch.softmax(x * 2.0, -1)


def _layer_norm(x, w, b):
    return F.layer_norm(x + 1.0, [x.shape[-1]], w, b).relu()


def _column_mean(x):
    return (x * x).mean(0)


def _batch_norm(x, w, b):
    return F.batch_norm(x, None, None, w, b, True, 0.1, 1e-5).relu()


def _cpu(meta: torch.Tensor) -> torch.Tensor:
    """Random CPU values laid out as ``meta`` (expanded layouts too: a sum's incoming gradient)."""
    span = 1 + sum((n - 1) * st for n, st in zip(meta.shape, meta.stride()))
    return torch.randn(span).to(meta.dtype).as_strided(meta.shape, meta.stride())


CASES = {
    "softmax [64, 1000]": (_softmax, lambda: (torch.randn(64, 1000),)),
    "softmax [8, 40000]": (_softmax, lambda: (torch.randn(8, 40000),)),
    "layer_norm [300, 384]": (_layer_norm, lambda: (torch.randn(300, 384), torch.randn(384), torch.randn(384))),
    # rows of a few threads: the several-rows twin; rows that fill their threads exactly: the even twin
    "layer_norm [300, 96]": (_layer_norm, lambda: (torch.randn(300, 96), torch.randn(96), torch.randn(96))),
    "softmax [1024, 4096]": (_softmax, lambda: (torch.randn(1024, 4096),)),
    "column mean [20000, 48]": (_column_mean, lambda: (torch.randn(20000, 48),)),
    "batch_norm channels-last [16, 64, 14, 14]": (
        _batch_norm, lambda: (torch.randn(16, 64, 14, 14).contiguous(memory_format=torch.channels_last),
                              torch.randn(64), torch.randn(64))),
    "layer_norm backward [300, 384]": (
        _layer_norm, lambda: (torch.randn(300, 384, requires_grad=True), torch.randn(384, requires_grad=True),
                              torch.randn(384, requires_grad=True))),
    "batch_norm backward channels-last [16, 64, 14, 14]": (
        _batch_norm, lambda: (torch.randn(16, 64, 14, 14).contiguous(memory_format=torch.channels_last).requires_grad_(),
                              torch.randn(64, requires_grad=True), torch.randn(64, requires_grad=True))),
}


@pytest.mark.parametrize("case", list(CASES))
def test_forecast_compiles_what_the_first_call_takes(case, fake_driver):
    from graphfuser.executor.compiled_reduction import ReductionGroup, _profiled_arguments, build_reduction_launcher
    from graphfuser.ops.axes import needs_axes

    fn, make = CASES[case]
    args = make()
    grouped = _backward_groups if any(a.requires_grad for a in args) else _groups
    subs = [s for s in grouped(fn, *args) if needs_axes(s.block.nodes)]
    assert subs, "no reduction group"
    for sub in subs:
        cuda_sub = parse_graph(print_graph(sub).replace("device=cpu", "device=cuda:0"))
        cg = ReductionGroup(cuda_sub, "cuda", torch.device("cuda:0"), "k")
        fake_driver.made = []
        run = build_reduction_launcher(cg)
        forecast = list(fake_driver.made)
        # the variant the first call takes and nothing else: not the plain variant a twin replaces
        assert len(forecast) == 1, (case, forecast)
        run.namespace["_dev"] = torch.device("cpu")
        # the profiled types as CPU tensors (numbers as the forecast fills them: an int the kernel
        # checks against an axis holds that axis' size)
        args = [_cpu(a) if isinstance(a, torch.Tensor) else a for a in _profiled_arguments(cg)]
        run(*args)
        assert fake_driver.made == forecast, (case, fake_driver.made)   # the first call compiled nothing
        assert run.namespace["_broken"] is False


def test_a_size_the_profile_left_open_builds_without_a_forecast(fake_driver):
    """Profiled at two shapes, a group's sizes are symbolic (-1): no meta tensor can stand for
    them, so nothing is forecast and the build still succeeds; the first call compiles its variant."""
    from graphfuser.executor.compiled_reduction import ReductionGroup, _profiled_arguments, build_reduction_launcher

    sf = graphfuser.script(_softmax)
    for shape in [(64, 1000), (8, 1000), (64, 1000), (8, 1000)]:
        sf(torch.randn(shape))
    g = graphfuser.last_executed_optimized_graph()
    subs = [n.subgraph for n in g.all_nodes() if n.kind.endswith("FusionGroup")]
    assert subs and "*" in print_graph(subs[0]), print_graph(subs[0])
    cg = ReductionGroup(parse_graph(print_graph(subs[0]).replace("device=cpu", "device=cuda:0")), "cuda",
                        torch.device("cuda:0"), "k")
    assert _profiled_arguments(cg) is None
    fake_driver.made = []
    run = build_reduction_launcher(cg)
    assert fake_driver.made == []
    run.namespace["_dev"] = torch.device("cpu")
    x = torch.randn(8, 1000)
    run(x)
    assert len(fake_driver.made) >= 1 and run.namespace["_broken"] is False


@pytest.mark.parametrize("case", ["layer_norm [300, 384]", "softmax [8, 40000]", "column mean [20000, 48]"])
def test_64_bit_variants_render_on_first_use_with_their_twins_launch_facts(case, fake_driver):
    """A CUDA reduction group renders its 32-bit variants when built; the 64-bit ones (offsets past
    2^31) on first use, checked against the launch facts the launcher took from their 32-bit
    twins. The group's source (dumps, repros) still holds every variant."""
    from graphfuser.executor.compiled_reduction import ReductionGroup

    fn, make = CASES[case]
    for sub in [s for s in _groups(fn, *make()) if needs_axes(s.block.nodes)]:
        cg = ReductionGroup(parse_graph(print_graph(sub).replace("device=cpu", "device=cuda:0")), "cuda",
                            torch.device("cuda:0"), "k")
        wide = [i for i, v in enumerate(cg.variants) if v[3] == "long long"]
        assert wide and all(not isinstance(cg.variant_sources._fns[i], str) for i in wide)
        assert all(isinstance(cg.variant_sources._fns[i], str) for i, v in enumerate(cg.variants)
                   if v[3] == "int" and not (cg.multirow[i] or cg.even[i]))
        texts = list(cg.variant_sources)                     # every variant renders, checked
        assert all(f" {v[0]}(" in t for t, v in zip(texts, cg.variants))
        assert all(f" {cg.variants[i][0]}(" in cg.source for i in wide if not (cg.multirow[i] or cg.even[i]))


def test_a_64_bit_variant_with_other_launch_facts_raises(fake_driver):
    from graphfuser.codegen.lower import LoweringError
    from graphfuser.executor.compiled_reduction import ReductionGroup

    fn, make = CASES["layer_norm [300, 384]"]
    sub = next(s for s in _groups(fn, *make()) if needs_axes(s.block.nodes))
    cg = ReductionGroup(parse_graph(print_graph(sub).replace("device=cpu", "device=cuda:0")), "cuda",
                        torch.device("cuda:0"), "k")
    i = next(i for i, v in enumerate(cg.variants) if v[3] == "long long")
    deferred = cg.variant_sources._fns[i]
    deferred.args[0]["shared_per_thread"] = 12345             # what the launcher would have used
    with pytest.raises(LoweringError, match="shared_per_thread"):
        cg.variant_sources[i]
