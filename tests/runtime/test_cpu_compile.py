"""Compiling and loading generated C++ kernels: the system compiler, the disk cache, ctypes."""
from __future__ import annotations

import ctypes
import json
import os
import pathlib
import shutil
import stat
import struct
import subprocess
import sys
import textwrap
import time
import uuid

import pytest
import torch

from graphfuser.config import Config, config
from graphfuser.runtime import cache, cpu
from graphfuser.runtime.cpu import CpuKernel, compile_cpp, compiler_id, cxx_flags
from graphfuser.runtime.errors import CompileError

REPO = pathlib.Path(__file__).resolve().parents[2]
KERNEL = textwrap.dedent("""\
    // {tag}
    extern "C" void k(const float* a, float* out, long long n) {{
        for (long long i = 0; i < n; ++i) out[i] = a[i] + 1;
    }}
""")

pytestmark = pytest.mark.skipif(shutil.which(config.cpu["cxx"].split()[0]) is None,
                                reason=f"no C++ compiler ({config.cpu['cxx']}) on this machine")


def kernel_source() -> str:
    """The ``a + 1`` kernel with a unique comment: a source no cache has seen."""
    return KERNEL.format(tag=uuid.uuid4().hex)


def run_k(so: str, n: int = 1000) -> None:
    k = CpuKernel(so, "k", ["ptr", "ptr", "i64"])
    a = torch.rand(n)
    out = torch.full_like(a, -1.0)
    k(a.data_ptr(), out.data_ptr(), a.numel())
    torch.testing.assert_close(out, a + 1, rtol=0, atol=0)


def delta(before: dict[str, int]) -> dict[str, int]:
    return {k: cache.STATS[k] - before[k] for k in cache.STATS}


# A child process: compile (or find) the kernel, run it without torch, print what happened.
CHILD = textwrap.dedent("""\
    import ctypes, json, pathlib, sys, time
    from graphfuser.runtime import cache
    from graphfuser.runtime.cpu import CpuKernel, compile_cpp
    src, ready, go = sys.argv[1], sys.argv[2], sys.argv[3]
    if ready:
        pathlib.Path(ready).touch()
        while not pathlib.Path(go).exists():
            time.sleep(0.002)
    so = compile_cpp(src)
    k = CpuKernel(so, "k", ["ptr", "ptr", "i64"])
    a = (ctypes.c_float * 4)(1, 2, 3, 4)
    out = (ctypes.c_float * 4)()
    k(ctypes.addressof(a), ctypes.addressof(out), 4)
    print(json.dumps({"out": list(out), "so": so, "stats": cache.STATS}))
""")


def child(src: str, cache_dir: str, ready: str = "", go: str = "") -> subprocess.Popen:
    env = dict(os.environ, GRAPHFUSER_CACHE_DIR=cache_dir,
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env.pop("PYTORCH_NVFUSER_DISABLE", None)
    return subprocess.Popen([sys.executable, "-c", CHILD, src, ready, go], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def child_result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert result["out"] == [2.0, 3.0, 4.0, 5.0]
    return result


# -- compile, load, run --------------------------------------------------------------------------
def test_compile_load_run_and_sizes_are_arguments():
    src = kernel_source()
    before = dict(cache.STATS)
    so = compile_cpp(src)
    assert delta(before) == {"compiles": 1, "disk_hits": 0, "disk_misses": 1, "corrupt": 0}
    assert so.endswith(".so") and pathlib.Path(so).is_relative_to(cache.cache_root())
    for n in (1, 7, 1000, 4097):  # one kernel for every size
        run_k(so, n)
    assert compile_cpp(src) == so
    assert delta(before) == {"compiles": 1, "disk_hits": 1, "disk_misses": 1, "corrupt": 0}
    assert pathlib.Path(so).with_suffix(".src").read_text() == src


def test_fresh_process_with_warm_disk_cache_compiles_nothing():
    src = kernel_source()
    so = compile_cpp(src)
    result = child_result(child(src, str(cache.cache_root())))
    assert result["stats"]["compiles"] == 0
    assert result["stats"]["disk_hits"] == 1
    assert result["so"] == so


def test_concurrent_processes_compile_the_same_kernel(tmp_path):
    src = kernel_source()
    ready = [str(tmp_path / f"ready{i}") for i in range(2)]
    go = tmp_path / "go"
    procs = [child(src, str(tmp_path / "cache"), r, str(go)) for r in ready]
    deadline = time.monotonic() + 30
    while not all(os.path.exists(r) for r in ready):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
        time.sleep(0.005)
    go.touch()  # release both at once
    results = [child_result(p) for p in procs]
    assert results[0]["so"] == results[1]["so"]
    # The flock makes the second wait and reuse the first one's build.
    assert sum(r["stats"]["compiles"] for r in results) == 1
    assert sum(r["stats"]["disk_hits"] for r in results) == 1

    def must_not_build(out: str) -> None:
        raise AssertionError("the entry should verify")

    with config.override(cache_dir=str(tmp_path / "cache")):
        before = dict(cache.STATS)
        path = cache.get_or_build_file("cpp", src, cxx_flags(), compiler_id(), "so", must_not_build)
        assert path == results[0]["so"]
        assert delta(before)["disk_hits"] == 1 and delta(before)["corrupt"] == 0
    assert not list((tmp_path / "cache").rglob("*.tmp-*"))
    run_k(path)


def test_corrupt_shared_object_is_rebuilt(tmp_path):
    src = kernel_source()
    with config.override(cache_dir=str(tmp_path)):
        so = compile_cpp(src)
        size = os.path.getsize(so)
        with open(so, "r+b") as f:  # truncated, as a crash or a full disk would leave it
            f.truncate(size // 2)
        before = dict(cache.STATS)
        assert compile_cpp(src) == so
        assert delta(before) == {"compiles": 1, "disk_hits": 0, "disk_misses": 1, "corrupt": 1}
        assert os.path.getsize(so) == size
        run_k(so)


def test_compile_cache_disabled_bypasses_disk(tmp_path):
    src = kernel_source()
    with config.override(cache_dir=str(tmp_path / "cache"), disable=["compile_cache"]):
        before = dict(cache.STATS)
        first, second = compile_cpp(src), compile_cpp(src)
        assert delta(before) == {"compiles": 2, "disk_hits": 0, "disk_misses": 0, "corrupt": 0}
    assert first != second
    assert not (tmp_path / "cache").exists()
    run_k(first)


# -- errors, flags, compilers --------------------------------------------------------------------
def test_compile_error_carries_the_compiler_log():
    src = 'extern "C" void k(float* out) { out[0] = undeclared_name_xyz; }\n'
    with pytest.raises(CompileError) as info:
        compile_cpp(src)
    err = info.value
    assert isinstance(err, RuntimeError)
    assert "undeclared_name_xyz" in str(err) and "error" in str(err)
    assert err.source == src and "undeclared_name_xyz" in err.log
    assert err.command[0] == config.cpu["cxx"].split()[0]
    with pytest.raises(CompileError):  # failures are not cached
        compile_cpp(src)


def test_fma_knob_sets_fp_contract():
    assert cxx_flags()[-1] == "-ffp-contract=fast" and "-ffp-contract=off" not in cxx_flags()
    assert cxx_flags()[:-1] == list(config.cpu["cxxflags"])
    src = kernel_source()
    default_so = compile_cpp(src)
    with config.override(disable=["fma"]):
        assert "-ffp-contract=off" in cxx_flags() and "-ffp-contract=fast" not in cxx_flags()
        no_fma_so = compile_cpp(src)
    assert no_fma_so != default_so  # the flags are part of the key
    run_k(no_fma_so)


def fake_cxx(tmp_path: pathlib.Path, body: str = "") -> pathlib.Path:
    """A compiler wrapper around g++ that names itself ``fakecxx`` and logs its arguments."""
    real = shutil.which("g++") or shutil.which("c++")
    script = tmp_path / "fakecxx"
    script.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        if [ "$1" = "--version" ]; then echo "fakecxx 9.9 (wraps g++)"; exit 0; fi
        echo "$@" >> "{tmp_path}/calls.log"
        {body}
        exec "{real}" "$@"
    """))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None, reason="needs g++")
def test_cxx_is_honoured(tmp_path):
    assert Config(env={"CXX": "clang++"}).cpu["cxx"] == "clang++"
    script = fake_cxx(tmp_path)
    src = kernel_source()
    with config.override(cpu={"cxx": str(script)}):
        assert compiler_id() == "fakecxx 9.9 (wraps g++)"
        so = compile_cpp(src)
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert len(calls) == 1 and pathlib.Path(so).stem in calls[0]
    meta = json.loads(pathlib.Path(so).with_suffix(".json").read_text())
    assert meta["compiler"] == "fakecxx 9.9 (wraps g++)"
    assert compile_cpp(src) != so  # another compiler, another entry
    run_k(so)


def test_missing_compiler_raises_compile_error():
    with config.override(cpu={"cxx": "/nonexistent/graphfuser-cxx"}), pytest.raises(CompileError,
                                                                                    match="not found"):
        compile_cpp(kernel_source())


@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None, reason="needs g++")
def test_rejected_optional_flag_is_dropped(tmp_path):
    reject = ('for a in "$@"; do if [ "$a" = "-fopenmp" ]; then '
              'echo "fakecxx: error: unsupported option \'-fopenmp\'" >&2; exit 1; fi; done')
    script = fake_cxx(tmp_path, reject)
    with config.override(cpu={"cxx": str(script)}):
        before = dict(cache.STATS)
        so = compile_cpp(kernel_source())
        assert delta(before)["compiles"] == 2  # the refused run, then the retry
        run_k(so)
        calls = (tmp_path / "calls.log").read_text().splitlines()
        assert "-fopenmp" in calls[0].split() and "-fopenmp" not in calls[1].split()
        before = dict(cache.STATS)
        compile_cpp(kernel_source())  # remembered: no second refusal
        assert delta(before)["compiles"] == 1


# -- CpuKernel -----------------------------------------------------------------------------------
def test_cpu_kernel_argument_kinds():
    so = compile_cpp(textwrap.dedent("""\
        extern "C" void kinds(double* out, long long a, int b, double c, float d, bool e) {
            out[0] = (double)(a - 1099511627776LL); out[1] = b; out[2] = c; out[3] = d; out[4] = e;
        }
    """))
    k = CpuKernel(so, "kinds", ["ptr", "i64", "i32", "f64", "f32", "bool"])
    out = torch.zeros(5, dtype=torch.float64)
    k(out.data_ptr(), 2**40 + 3, -7, 0.1, 0.5, True)
    assert out.tolist() == [3.0, -7.0, 0.1, 0.5, 1.0]
    assert "kinds(ptr, i64" in repr(k)


def test_cpu_kernel_shares_the_library_not_the_signature():
    so = compile_cpp(kernel_source())
    k1 = CpuKernel(so, "k", ["ptr", "ptr", "i64"])
    k2 = CpuKernel(so, "k", ["ptr", "ptr", "i32"])
    assert cpu.load_library(so) is cpu.load_library(so)
    assert k1.fn.argtypes != k2.fn.argtypes
    run_k(so)
    with pytest.raises(ValueError, match="unknown arg kinds"):
        CpuKernel(so, "k", ["ptr", "tensor"])
    with pytest.raises(AttributeError, match="no function"):
        CpuKernel(so, "missing", [])


def test_packed_entry_passes_every_argument_kind():
    """The packed entry hands each kind to the kernel as the plain call does: pointers of any
    type, 64-bit values past 32 bits, negative ints, doubles, floats and bools."""
    kinds = ["ptr", "ptr", "i64", "i32", "f64", "f32", "bool"]
    so = compile_cpp(textwrap.dedent("""\
        extern "C" void kinds2(const float* __restrict__ x, double* __restrict__ out, long long a, int b,
                               double c, float d, bool e) {
            out[0] = (double)(a - 1099511627776LL); out[1] = b; out[2] = c; out[3] = d; out[4] = e; out[5] = x[1];
        }
    """) + cpu.packed_entries(["kinds2"], kinds))
    plain, packed = CpuKernel(so, "kinds2", kinds), CpuKernel(so, "kinds2", kinds, packed=True)
    x = torch.tensor([0.0, 2.5])
    for k in (plain, packed):
        out = torch.zeros(6, dtype=torch.float64)
        k(x.data_ptr(), out.data_ptr(), 2**40 + 3, -7, 0.1, 0.5, True)
        assert out.tolist() == [3.0, -7.0, 0.1, 0.5, 1.0, 2.5]
    assert packed.fn.argtypes == [ctypes.c_char_p] and packed.fn.__name__ == "kinds2_packed"
    out = torch.zeros(6, dtype=torch.float64)
    packed(x.data_ptr(), out.data_ptr(), 2**40, 0, 0.0, 0.0, False)
    assert out.tolist() == [0.0] * 5 + [2.5]
    with pytest.raises(struct.error):       # a float for an integer slot, as ctypes would refuse it
        packed(x.data_ptr(), out.data_ptr(), 1.5, 0, 0.0, 0.0, False)


def test_packed_calls_from_threads_share_no_buffer():
    """Each packed call passes its own bytes object: launches of one kernel from several threads
    at once (the GIL is released during the call) never see another call's arguments."""
    import threading

    so = compile_cpp(kernel_source() + cpu.packed_entries(["k"], ["ptr", "ptr", "i64"]))
    k = CpuKernel(so, "k", ["ptr", "ptr", "i64"], packed=True)
    errors = []

    def work(seed: int) -> None:
        x = torch.full((4096,), float(seed))
        for _ in range(200):
            out = torch.empty_like(x)
            k(x.data_ptr(), out.data_ptr(), x.numel())
            if not torch.equal(out, x + 1):
                errors.append(seed)
                return

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
