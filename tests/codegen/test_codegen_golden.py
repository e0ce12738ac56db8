"""Kernel IR and rendered-source goldens, the codegen knobs, and NVRTC on every CUDA source.

Each group in ``GROUPS`` is graph text (profiled types, as the partition hands it over). It is
lowered (``lower_group``), scheduled by the pointwise scheduler with fixed parameters (so tuning
the config's defaults does not churn the goldens) and rendered by the one C-style walk in both
dialects. The golden file ``golden/<group>.txt`` holds the kernel IR (the ``kernel_ir`` dump),
the C++ function and the CUDA functions (scalar and vectorized, 64- and 32-bit index).

Regenerate after an intended codegen change with::

    GRAPHFUSER_UPDATE_GOLDENS=1 .venv/bin/python -m pytest -q tests/codegen/test_codegen_golden.py

and review the diff. No compiler is needed for the goldens; the NVRTC tests compile every CUDA
source this file renders (skipped, with the reason, where NVRTC is not available).
"""
from __future__ import annotations

import os
import pathlib
import re
from typing import Optional

import pytest
import torch

from graphfuser.codegen.cstyle import RenderOptions, render_function, render_source
from graphfuser.codegen.dialects import CPP, CUDA
from graphfuser.codegen.lower import lower_group
from graphfuser.codegen.pointwise import PointwiseParams, schedule_pointwise, vector_width
from graphfuser.config import config
from graphfuser.executor.compiled import CompiledGroup
from graphfuser.runtime import cpu, nvrtc
from helpers import FT, parse

GOLDEN_DIR = pathlib.Path(__file__).parent / "golden"
UPDATE = os.environ.get("GRAPHFUSER_UPDATE_GOLDENS", "") not in ("", "0")
ARCH = 90

# Sizes are primes no schedule uses as a literal, so a size baked into a kernel would show.
F48 = FT(7, 13)
F468 = FT(5, 7, 13)
H48 = FT(7, 13, dtype="Half")
CL = FT(3, 5, 7, 11, strides=[385, 1, 55, 5])   # channels-last N, C, H, W

GROUPS: dict[str, str] = {
    # dense: the two dims coalesce into one root, one flat index
    "add_relu": f"""
graph(%x : {F48}, %y : {F48}):
  %1 : int = prim::Constant[value=1]()
  %a : {F48} = aten::add(%x, %y, %1)
  %c : {F48} = aten::relu(%a)
  return (%c)
""",
    # broadcast inputs of lower rank (stride 0, no index), tanh-gelu decomposition
    "bias_gelu_broadcast": f"""
graph(%x : {F468}, %w : {FT(7, 1)}, %b : {FT(13)}):
  %1 : int = prim::Constant[value=1]()
  %tanh : str = prim::Constant[value="tanh"]()
  %m : {F468} = aten::mul(%x, %w)
  %a : {F468} = aten::add(%m, %b, %1)
  %g : {F468} = aten::gelu(%a, %tanh)
  return (%g)
""",
    # fp16 storage, fp32 compute; a cast to bf16 and back rounds once
    "half_io": f"""
graph(%x : {H48}, %y : {H48}):
  %1 : int = prim::Constant[value=1]()
  %two : float = prim::Constant[value=2.]()
  %bf : int = prim::Constant[value=15]()
  %f : int = prim::Constant[value=6]()
  %false : bool = prim::Constant[value=0]()
  %none : NoneType = prim::Constant()
  %s : {H48} = aten::sigmoid(%x)
  %m : {H48} = aten::mul(%s, %y)
  %o : {H48} = aten::add(%m, %two, %1)
  %c : {FT(7, 13, dtype="BFloat16")} = aten::to(%o, %bf, %false, %false, %none)
  %d : {F48} = aten::to(%c, %f, %false, %false, %none)
  return (%o, %d)
""",
    # a transposed input: no coalescing, a run-time stride per non-unit root
    "transposed": f"""
graph(%x : {FT(7, 13, strides=[1, 7])}, %y : {F48}):
  %1 : int = prim::Constant[value=1]()
  %a : {F48} = aten::sub(%x, %y, %1)
  %e : {F48} = aten::exp(%a)
  return (%e)
""",
    # several outputs of different dtypes; an output that is an input is not stored
    "multi_output": f"""
graph(%x : {F48}, %y : {F48}):
  %1 : int = prim::Constant[value=1]()
  %two : float = prim::Constant[value=2.]()
  %zero : int = prim::Constant[value=0]()
  %a : {F48} = aten::add(%x, %y, %1)
  %b : {F48} = aten::mul(%a, %two)
  %c : {FT(7, 13, dtype="Bool")} = aten::gt(%b, %zero)
  return (%a, %b, %c, %x)
""",
    # run-time scalars are kernel arguments, not constants
    "scalar_args": f"""
graph(%x : {F48}, %s : float, %i : int):
  %1 : int = prim::Constant[value=1]()
  %m : {F48} = aten::mul(%x, %s)
  %a : {F48} = aten::add(%m, %i, %1)
  %c : {F48} = aten::clamp(%a, %s, %i)
  return (%c)
""",
    # channels-last 4-D: iterate in memory order, output in the same stride order
    "channels_last": f"""
graph(%x : {CL}, %b : {FT(1, 5, 1, 1)}):
  %1 : int = prim::Constant[value=1]()
  %a : {CL} = aten::add(%x, %b, %1)
  %r : {CL} = aten::relu(%a)
  return (%r)
""",
    # integers, a sliced (strided innermost) input, bitwise and integer promotion
    "int_sliced": f"""
graph(%x : {FT(7, 13, strides=[26, 2], dtype="Int")}, %y : {FT(7, 13, dtype="Long")}):
  %three : int = prim::Constant[value=3]()
  %a : {FT(7, 13, dtype="Long")} = aten::bitwise_and(%x, %y)
  %m : {FT(7, 13, dtype="Long")} = aten::mul(%a, %three)
  return (%m)
""",
}


def cuda_text(text: str) -> str:
    return text.replace("device=cpu", "device=cuda:0")


def cuda_functions(sub, name: str, opts_kw: Optional[dict] = None) -> list[str]:
    """The CUDA functions of a group: scalar / vectorized x 64-bit / 32-bit (fast division) index."""
    kernel, _ = lower_group(sub, name)
    fns = []
    for itype, tag in (("long long", "i64"), ("int", "i32")):
        for vec in (False, True):
            v = vector_width(kernel) if vec else 1
            if vec and v == 1:
                continue
            nest = schedule_pointwise(kernel, PointwiseParams("cuda", vector=v, block=128, unroll=4))
            opts = RenderOptions(index_type=itype, fast_div=itype == "int", **(opts_kw or {}))
            fns.append(render_function(kernel, nest, CUDA, f"{name}_{'v' if vec else 's'}_{tag}", opts))
    return fns


def cpp_function(sub, name: str, opts_kw: Optional[dict] = None) -> str:
    kernel, _ = lower_group(sub, name)
    nest = schedule_pointwise(kernel, PointwiseParams("cpu"))
    return render_function(kernel, nest, CPP, name, RenderOptions(**(opts_kw or {})))


def golden_text(name: str) -> str:
    sub = parse(GROUPS[name])
    kir = CompiledGroup(sub, "cpu", torch.device("cpu"), name).kernel_ir_text()
    parts = [f"## kernel_ir\n{kir}", f"## cpp\n{cpp_function(parse(GROUPS[name]), name)}"]
    parts.append("## cuda\n" + "\n\n".join(cuda_functions(parse(cuda_text(GROUPS[name])), name)))
    return "\n\n".join(parts) + "\n"


@pytest.mark.parametrize("name", list(GROUPS))
def test_golden(name: str) -> None:
    text = golden_text(name)
    path = GOLDEN_DIR / f"{name}.txt"
    if UPDATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no golden {path}: run with GRAPHFUSER_UPDATE_GOLDENS=1 and review it"
    want = path.read_text()
    assert text == want, (f"generated code of {name} changed; if intended, regenerate with "
                          f"GRAPHFUSER_UPDATE_GOLDENS=1 and review the diff of {path}")


# -- what the goldens show, stated as properties ------------------------------------------------
def test_sizes_are_arguments_not_constants() -> None:
    for name in GROUPS:
        sub = parse(GROUPS[name])
        sizes = {n for v in sub.inputs if getattr(v.type, "sizes", None)
                 for n in list(v.type.sizes) + list(v.type.strides or ()) if n > 1}
        src = cpp_function(sub, name) + "\n".join(cuda_functions(parse(cuda_text(GROUPS[name])), name))
        literals = {int(t) for t in re.findall(r"(?<![\w.])(\d+)(?![\w.])", src)}
        assert not literals & sizes, f"{name}: sizes {sorted(literals & sizes)} are baked into the kernel:\n{src}"


def test_dense_group_has_one_index() -> None:
    kernel, plan = lower_group(parse(GROUPS["add_relu"]), "k")
    assert kernel.n_dims == 1 and all(t.dense for t in kernel.tensors)
    assert plan.root_dims == [[0, 1]]


def test_broadcast_dims_cost_nothing() -> None:
    kernel, _ = lower_group(parse(GROUPS["bias_gelu_broadcast"]), "k")
    kinds = {t.name: t.dim_kinds for t in kernel.tensors}
    assert kinds["t1"].count("bcast") >= 1 and kinds["t2"].count("bcast") >= 1
    signature = cpp_function(parse(GROUPS["bias_gelu_broadcast"]), "k").split("{")[0]
    assert "st1_" not in signature and "st2_" not in signature, "broadcast inputs need no stride argument"


def test_half_loaded_and_stored_as_half_computed_in_float() -> None:
    src = cpp_function(parse(GROUPS["half_io"]), "k")
    assert "const unsigned short* __restrict__ t0" in src
    assert "gf_h2f(t0[" in src and "gf_f2h(" in src
    assert "gf_round_bf16(" in src, "a cast to bf16 inside the kernel rounds the fp32 value once"
    assert "const float e" in src and "const unsigned short e" not in src


def test_identity_output_is_an_alias() -> None:
    kernel, plan = lower_group(parse(GROUPS["multi_output"]), "k")
    assert plan.aliases == {3: 0}, "the returned input is handed back, not copied"
    assert len(kernel.stores) == 3


def test_channels_last_output_keeps_stride_order() -> None:
    kernel, plan = lower_group(parse(GROUPS["channels_last"]), "k")
    dtype, sizes, order, _ = plan.outputs[0]
    assert order == (0, 2, 3, 1)
    assert kernel.n_dims == 2, "H*W*C coalesce (channels-last is dense in its own order); N stays for the bias"


# -- knobs --------------------------------------------------------------------------------------
def test_index_hoist_knob() -> None:
    sub = parse(GROUPS["transposed"])
    hoisted, plain = cpp_function(sub, "k"), cpp_function(parse(GROUPS["transposed"]), "k", {"index_hoist": False})
    assert re.search(r"const long long x\d+ = ", hoisted)
    assert not re.search(r"const long long x\d+ = ", plain)
    assert "st0_" in plain and hoisted != plain
    cu = cuda_functions(parse(cuda_text(GROUPS["transposed"])), "k")
    cu_plain = cuda_functions(parse(cuda_text(GROUPS["transposed"])), "k", {"index_hoist": False})
    assert re.search(r"const (long long|int) x\d+ = ", cu[0])
    assert not any(re.search(r"const (long long|int) x\d+ = ", f) for f in cu_plain)
    # the executor reads the knob from the config
    with config.override(disable=["index_hoist"]):
        src = CompiledGroup(parse(GROUPS["transposed"]), "cpu", torch.device("cpu"), "k").source
    assert not re.search(r"const long long x\d+ = ", src)


def test_predicate_elimination_knob() -> None:
    kept = cpp_function(parse(GROUPS["add_relu"]), "k", {"predicate_elimination": False})
    dropped = cpp_function(parse(GROUPS["add_relu"]), "k")
    def checks(src: str) -> int:
        return sum(line.strip().startswith("if (") for line in src.splitlines())

    assert checks(kept) > checks(dropped), "disabled: every bounds check stays"
    assert checks(dropped) == 0, "the split's check folds into the inner loop bound"
    assert "< n0" in kept
    cu = cuda_functions(parse(cuda_text(GROUPS["add_relu"])), "k")
    cu_kept = cuda_functions(parse(cuda_text(GROUPS["add_relu"])), "k", {"predicate_elimination": False})
    assert any("gf_load<" in f for f in cu), "vectorized variant loads 16 bytes at a time"
    assert not any("gf_load<" in f for f in cu_kept), "per-lane bounds checks: no vector loads"
    with config.override(disable=["predicate_elimination"]):
        src = CompiledGroup(parse(cuda_text(GROUPS["add_relu"])), "cuda", torch.device("cuda:0"), "k").source
    assert "gf_load<4>(b_" not in src


def test_fma_knob_changes_compiler_flags() -> None:
    assert "-ffp-contract=fast" in cpu.cxx_flags()
    assert "--fmad=false" not in nvrtc.build_options(ARCH)
    with config.override(disable=["fma"]):
        assert "-ffp-contract=off" in cpu.cxx_flags() and "-ffp-contract=fast" not in cpu.cxx_flags()
        assert "--fmad=false" in nvrtc.build_options(ARCH)
        assert "fma" in config.codegen_key(), "the knob is part of every kernel cache key"


def _has_fma() -> bool:
    try:
        return " fma " in pathlib.Path("/proc/cpuinfo").read_text().replace("\n", " ")
    except OSError:
        return False


def test_fma_knob_changes_results() -> None:
    """x*y+z with x*y inexact: contracted, the kernel keeps the product's low bits; with
    PYTORCH_NVFUSER_DISABLE=fma it rounds the product first, exactly as eager does."""
    import graphfuser

    def muladd(x, y, z):
        return x * y + z

    x = torch.full((64,), 1 + 2 ** -12)
    z = torch.full((64,), -(1 + 2 ** -11))
    want = muladd(x, x, z)
    assert want.eq(0).all()
    with config.override(disable=["fma"]):
        sf = graphfuser.script(muladd)
        for _ in range(3):
            got = sf(x, x, z)
        assert "CpuFusionGroup" in str(graphfuser.last_executed_optimized_graph())
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    if not _has_fma():
        pytest.skip("this CPU has no FMA instruction: contraction cannot change the result here")
    sf = graphfuser.script(muladd)
    for _ in range(3):
        got = sf(x, x, z)
    assert got.eq(2 ** -24).all(), f"contracted x*y+z keeps the product's low bits: {got[:4]}"


# -- NVRTC ----------------------------------------------------------------------------------------
NVRTC_OK, NVRTC_WHY = nvrtc.available()
needs_nvrtc = pytest.mark.skipif(not NVRTC_OK, reason=f"NVRTC is not available here: {NVRTC_WHY}")


@needs_nvrtc
def test_nvrtc_compiles_every_golden_cuda_source() -> None:
    """Every CUDA function this file renders (the goldens and the knob variants), in one program,
    and each group as the executor renders it (CompiledGroup, full prelude)."""
    fns = []
    for name in GROUPS:
        fns += cuda_functions(parse(cuda_text(GROUPS[name])), name)
    for name in ("transposed", "channels_last", "half_io"):      # the knob tests' variants
        for kw in ({"index_hoist": False}, {"predicate_elimination": False}):
            fns += cuda_functions(parse(cuda_text(GROUPS[name])), f"{name}_{next(iter(kw))}", kw)
    src = render_source(fns, CUDA)
    first = re.search(r"void (?:__launch_bounds__\(\d+\) )?(\w+)\(", fns[0]).group(1)
    cubin = nvrtc.compile_cubin(src, first, ARCH)
    for f in fns:
        fname = re.search(r"void (?:__launch_bounds__\(\d+\) )?(\w+)\(", f).group(1)
        assert f".text.{fname}\0".encode() in cubin, fname
    with config.override(disable=["fma"]):           # --fmad=false is an option NVRTC accepts
        nvrtc.compile_cubin(render_source(fns[:1], CUDA), first, ARCH)


@needs_nvrtc
@pytest.mark.parametrize("name", list(GROUPS))
def test_nvrtc_compiles_compiled_group(name: str) -> None:
    cg = CompiledGroup(parse(cuda_text(GROUPS[name])), "cuda", torch.device("cuda:0"), f"gf_{name}")
    cubin = nvrtc.compile_cubin(cg.source, cg.variants[0][0], ARCH)
    for fname, *_ in cg.variants:
        assert f".text.{fname}\0".encode() in cubin
