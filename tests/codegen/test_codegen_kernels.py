"""Generated CPU kernels through the executor: run-time sizes, layouts, several outputs, aliases,
the failure path (warning + repro, or FusionFailure) and the kernel cache (memory and disk)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import graphfuser
from graphfuser.config import config
from graphfuser.executor import compiled
from graphfuser.executor.fusion import FusionFailure
from graphfuser.runtime import cache, cpu
from graphfuser.runtime.errors import CompileError
from helpers import cuda_compiles, check, fallback_counter, fusion_groups


def run3(fn, *inputs):
    sf = graphfuser.script(fn)
    for _ in range(3):
        out = sf(*inputs)
    return sf, out


# -- sizes are kernel arguments -------------------------------------------------------------------
def scale_shift(x, y):
    return (x * y + 0.25).relu()


def test_new_batch_size_reuses_the_kernel():
    sf = check(scale_shift, torch.randn(4, 8), torch.randn(4, 8))
    counts = fallback_counter(sf)
    builds = compiled.STATS["builds"]
    for shape in ((16, 8), (3, 33), (1000, 7)):
        x, y = torch.randn(shape), torch.randn(shape)
        torch.testing.assert_close(sf(x, y), scale_shift(x, y))
    assert compiled.STATS["builds"] == builds, "a new size must not build a new kernel"
    assert counts["fallback"] == 0, "same dtype / rank / layout: the guard passes for any size"


def test_new_size_with_broadcast_and_strides_reuses_the_kernel():
    def bias(x, b):
        return torch.sigmoid(x.t() + b)

    sf = check(bias, torch.randn(8, 4), torch.randn(8))
    builds = compiled.STATS["builds"]
    for n, m in ((40, 9), (5, 64)):
        x, b = torch.randn(m, n), torch.randn(m)
        torch.testing.assert_close(sf(x, b), bias(x, b))
    assert compiled.STATS["builds"] == builds


# -- layouts --------------------------------------------------------------------------------------
def cl_block(x, b):
    return torch.tanh(x * 2.0 + b).relu()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_channels_last_in_channels_last_out(dtype):
    x = torch.randn(2, 5, 7, 3, dtype=dtype).contiguous(memory_format=torch.channels_last)
    b = torch.randn(1, 5, 1, 1, dtype=dtype)
    sf, out = run3(cl_block, x, b)
    want = cl_block(x, b)
    assert fusion_groups(sf._optimized)
    torch.testing.assert_close(out, want, **({"rtol": 5e-3, "atol": 5e-3} if dtype == torch.float16 else {}))
    assert out.stride() == want.stride()
    assert out.is_contiguous(memory_format=torch.channels_last)


def test_transposed_input_gives_eager_strides():
    def f(x):
        return torch.exp(x) - 1.0

    x = torch.randn(6, 9).t()
    sf, out = run3(f, x)
    assert out.stride() == f(x).stride()
    torch.testing.assert_close(out, f(x))


# -- outputs --------------------------------------------------------------------------------------
def several(x, y):
    a = x + y
    b = a * 2.0
    return a, b, b > 0.5, (b - a).to(torch.float16)


def test_multiple_outputs_of_one_kernel():
    x, y = torch.randn(5, 7), torch.randn(5, 7)
    sf = check(several, x, y)
    groups = fusion_groups(sf._optimized)
    assert len(groups) == 1 and len(groups[0].outputs) == 4, sf._optimized
    out = sf(x, y)
    assert [o.dtype for o in out] == [torch.float32, torch.float32, torch.bool, torch.float16]


def identities(x, y):
    return x + y, torch.dropout(x, 0.5, False), x.to(torch.float32), x.type_as(y)


def test_output_that_is_an_input_is_the_callers_tensor():
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    want = identities(x, y)
    assert want[1] is x and want[2] is x and want[3] is x     # eager returns the input itself
    sf = check(identities, x, y)
    out = sf(x, y)
    assert out[1] is x and out[2] is x and out[3] is x
    group = fusion_groups(sf._optimized)[0]
    # (the eval-mode dropout is its input before fusion: passes/random.py)
    assert len(group.outputs) == 3


def identity_math(x):
    return torch.floor(x), torch.abs(x) * 1, torch.nan_to_num(x)


def test_identity_math_on_integers_still_allocates():
    """floor / nan_to_num of an int tensor compute the identity, but eager returns a new tensor:
    so must the kernel (writing to the result must not change the input)."""
    x = torch.arange(-6, 6, dtype=torch.int64).reshape(3, 4)
    sf = check(identity_math, x)
    out = sf(x)
    for o in out:
        assert o is not x and o.data_ptr() != x.data_ptr()
    out[0].add_(100)
    assert x.max() < 100


# -- failure path ---------------------------------------------------------------------------------
def fails_to_compile(x):
    return torch.sigmoid(x) * 3.141592 + 0.5


@pytest.fixture
def broken_compiler(monkeypatch, tmp_path):
    calls = {"n": 0}

    def boom(source: str) -> str:
        calls["n"] += 1
        raise CompileError("generated kernel failed: error: expected ';' (injected)", source=source,
                           log="kernel.cpp:3:7: error: expected ';' before '}' token", command=["g++"])

    monkeypatch.setattr(cpu, "compile_cpp", boom)
    monkeypatch.setattr(compiled, "_MEMORY", {})          # no kernel from another test
    config.set(repro_dir=str(tmp_path / "repro"))
    return calls


def test_compile_failure_warns_once_writes_repro_and_falls_back(broken_compiler, tmp_path):
    x = torch.randn(4, 8)
    sf = graphfuser.script(fails_to_compile)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outs = [sf(x) for _ in range(5)]
    for o in outs:
        torch.testing.assert_close(o, fails_to_compile(x))
    msgs = [str(w.message) for w in caught if "could not be compiled" in str(w.message)]
    assert len(msgs) == 1, msgs
    msg = msgs[0]
    assert "CpuFusionGroup" in msg and "cpu_fusion_" in msg, msg
    repros = list((tmp_path / "repro").glob("*.txt"))
    assert len(repros) == 1 and str(repros[0]) in msg
    text = repros[0].read_text()
    for part in ("## fusion IR", "aten::sigmoid", "## input types", "Float(4, 8", "## generated source",
                 'extern "C" void', "## compiler log", "expected ';' before '}' token"):
        assert part in text, part
    assert broken_compiler["n"] == 1, "the failure is not retried on every call"


def test_compile_failure_raises_with_fallback_disabled(broken_compiler, tmp_path):
    x = torch.randn(4, 8)
    sf = graphfuser.script(fails_to_compile)
    with config.override(disable=["fallback"]):
        with pytest.raises(FusionFailure) as info:
            for _ in range(3):
                sf(x)
    msg = str(info.value)
    assert "CpuFusionGroup" in msg and "cpu_fusion_" in msg and "injected" in msg
    repros = list((tmp_path / "repro").glob("*.txt"))
    assert len(repros) == 1 and str(repros[0]) in msg
    assert isinstance(info.value.__cause__, CompileError)


# -- kernel cache ---------------------------------------------------------------------------------
def cached_twice(x, y):
    return torch.erf(x * 1.7182818) - y


def test_same_function_scripted_twice_compiles_once():
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    before_builds, before_hits = compiled.STATS["builds"], compiled.STATS["memory_hits"]
    before_compiles = cache.STATS["compiles"]
    check(cached_twice, x, y)
    assert compiled.STATS["builds"] == before_builds + 1
    compiles = cache.STATS["compiles"]
    check(cached_twice, x, torch.randn(4, 8))
    assert compiled.STATS["builds"] == before_builds + 1, "the second script reuses the kernel"
    assert compiled.STATS["memory_hits"] == before_hits + 1
    assert cache.STATS["compiles"] == compiles and compiles <= before_compiles + 1


CHILD = textwrap.dedent('''
    import json, sys
    import torch
    import graphfuser
    from graphfuser.runtime import cache

    def warm_disk(x, y):
        return torch.tanh(x * 0.123456789 + y).relu()

    def main():
        x = torch.linspace(-2, 2, 96).reshape(12, 8)
        y = torch.ones(12, 8)
        sf = graphfuser.script(warm_disk)
        for _ in range(3):
            out = sf(x, y)
        torch.testing.assert_close(out, warm_disk(x, y))
        fused = "CpuFusionGroup" in str(graphfuser.last_executed_optimized_graph())
        return {"compiles": cache.STATS["compiles"], "disk_hits": cache.STATS["disk_hits"], "fused": fused}

    if __name__ == "__main__":
        print(json.dumps(main()))
''')


def test_fresh_process_with_warm_disk_cache_runs_no_compiler(tmp_path, monkeypatch):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    cache_dir = tmp_path / "cache"
    # warm the disk cache in this process with the very same code
    import importlib.util

    spec = importlib.util.spec_from_file_location("graphfuser_cache_child", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(compiled, "_MEMORY", {})
    config.set(cache_dir=str(cache_dir))
    before = cache.STATS["compiles"]
    warm = mod.main()
    assert warm["fused"] and warm["compiles"] > before
    env = dict(os.environ, GRAPHFUSER_CACHE_DIR=str(cache_dir))
    env.pop("PYTORCH_NVFUSER_DISABLE", None)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    child = json.loads(proc.stdout.strip().splitlines()[-1])
    assert child["fused"], child
    assert child["compiles"] == 0, f"a warm disk cache must not run the compiler: {child}"
    assert child["disk_hits"] >= 1


def small_output_next_to_a_big_one(x0, x1):
    v0 = x1 * x0.size(-1)
    return torch.where(v0 > 0, torch.where(x0 > 0, v0, 2.0), 2), v0


def test_output_broadcast_along_the_vectorized_dim_is_stored_as_one_element():
    """The [B, 1, 1] output of a [B, 33, 16] loop is written once per row by the vectorized CUDA
    kernel (a vector store at its row offset faulted with a misaligned address); the CPU kernel
    gives eager's values and the CUDA source compiles."""
    import re

    from graphfuser.ir import parse_graph, print_graph
    from graphfuser.runtime import nvrtc

    x0 = (torch.arange(16 * 33 * 16) % 5 - 2).to(torch.int8).view(16, 33, 16)
    x1 = (torch.arange(16) % 3).to(torch.int8).view(16, 1, 1)
    sf, out = run3(small_output_next_to_a_big_one, x0, x1)
    for got, want in zip(out, small_output_next_to_a_big_one(x0, x1)):
        assert torch.equal(got, want)
    (g,) = fusion_groups(sf._optimized)
    cg = compiled.CompiledGroup(parse_graph(print_graph(g.subgraph).replace("device=cpu", "device=cuda:0")),
                                "cuda", torch.device("cuda", 0), "bcast_out")
    small = [t.name for t in cg.kernel.tensors if t.dim_kinds and t.dim_kinds[-1] == "bcast"]
    stored = set(re.findall(r"gf_store<\d+>\((\w+) \+", cg.source))
    assert small and stored and not stored & set(small), cg.source
    ok, _ = nvrtc.available()
    if ok:
        for name, *_ in cg.variants:
            cuda_compiles(cg.source, name, 90)
