"""The precompiled prelude (runtime/cpu.py): a generated C++ source includes its prelude from a
header g++ precompiled once per compiler, flags and prelude; the machine code is the one the
whole source gives, a leading ``#pragma`` included; the knob turns it off."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import torch

import graphfuser
from graphfuser.codegen.dialects import CPP, PRELUDE_END
from graphfuser.config import config
from graphfuser.runtime import cache, cpu

pytestmark = pytest.mark.skipif(shutil.which(config.cpu["cxx"].split()[0]) is None or
                                not config.cpu["cxx"].split()[0].endswith("g++"),
                                reason="precompiled headers are g++'s (.gch)")

BODY = '\nextern "C" void k(const float* a, float* o, long long n) { for (long long i = 0; i < n; ++i) o[i] = gf_%s(a[i]); }\n'


def _run(so: str) -> torch.Tensor:
    k = cpu.CpuKernel(so, "k", ["ptr", "ptr", "i64"])
    a = torch.linspace(-3, 3, 37)
    o = torch.empty_like(a)
    k(a.data_ptr(), o.data_ptr(), a.numel())
    return o


def _text(so: str) -> str:
    """The disassembly without addresses (the machine code, wherever it was linked)."""
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", so], capture_output=True, text=True).stdout
    return "\n".join(line.split(":", 1)[-1] for line in out.splitlines() if "file format" not in line)


@pytest.fixture
def fresh_cache(tmp_path):
    cpu._PRELUDES.clear()
    with config.override(cache_dir=str(tmp_path)):
        yield tmp_path
    cpu._PRELUDES.clear()


@pytest.mark.parametrize("head", ["", CPP.no_contract_pragma + "\n"])
def test_same_machine_code_with_and_without_the_precompiled_prelude(fresh_cache, head):
    src = head + CPP.prelude() + BODY % "vexpf"
    assert src[len(head):].startswith("#include") and PRELUDE_END in src
    # (one source, one cache key: each build is copied out before the next replaces it)
    with_pch = str(fresh_cache / "with_pch.so")
    shutil.copy(cpu.compile_cpp(src), with_pch)
    folders = list((fresh_cache / "pch").iterdir())
    assert len(folders) == 1 and (folders[0] / (cpu.PRELUDE_HEADER + ".gch")).is_file()
    assert (folders[0] / cpu.PRELUDE_HEADER).read_text().startswith(head + "#include")
    cache.clear()
    plain = str(fresh_cache / "plain.so")
    with config.override(disable=["precompiled_prelude"]):
        shutil.copy(cpu.compile_cpp(src), plain)
    torch.testing.assert_close(_run(with_pch), torch.exp(torch.linspace(-3, 3, 37)), rtol=1e-6, atol=0)
    torch.testing.assert_close(_run(with_pch), _run(plain), rtol=0, atol=0)
    if shutil.which("objdump"):
        assert _text(with_pch) == _text(plain)


def test_knob_off_builds_no_header(fresh_cache):
    with config.override(disable=["precompiled_prelude"]):
        cpu.compile_cpp(CPP.prelude() + BODY % "vexpf")
    assert not (fresh_cache / "pch").exists()


def test_no_cache_writes_no_header_into_the_cache(fresh_cache):
    """PYTORCH_NVFUSER_DISABLE=compile_cache: the header goes to a folder of the process's own,
    removed at exit, and still serves its kernels."""
    with config.override(disable=["compile_cache"]):
        so = cpu.compile_cpp(CPP.prelude() + BODY % "vexpf")
        torch.testing.assert_close(_run(so), torch.exp(torch.linspace(-3, 3, 37)), rtol=1e-6, atol=0)
    assert not (fresh_cache / "pch").exists()
    (folder,) = [f for f in cpu._PRELUDES.values() if f]
    assert str(Path(folder).parent) in cache._TEMP_DIRS and (Path(folder) / (cpu.PRELUDE_HEADER + ".gch")).is_file()


def test_sources_without_the_prelude_compile_as_they_are(fresh_cache):
    so = cpu.compile_cpp('extern "C" void k(const float* a, float* o, long long n) '
                         '{ for (long long i = 0; i < n; ++i) o[i] = a[i] * 2; }')
    torch.testing.assert_close(_run(so), torch.linspace(-3, 3, 37) * 2)
    assert not (fresh_cache / "pch").exists()


def test_one_header_per_prelude_and_a_broken_kernel_still_reports_its_own_error(fresh_cache):
    """Kernels of one prelude share its header; a kernel that does not compile raises the
    compiler's error for the whole source, as without the header."""
    for name in ("vexpf", "vtanhf"):
        cpu.compile_cpp(CPP.prelude() + BODY % name)
    assert len(list((fresh_cache / "pch").iterdir())) == 1
    with pytest.raises(cpu.CompileError, match="no_such_function"):
        cpu.compile_cpp(CPP.prelude() + BODY % "no_such_function")


def test_fused_functions_match_eager_through_the_header(fresh_cache):
    def f(x, w, b):
        return torch.nn.functional.layer_norm(x * 2, (x.shape[-1],), w, b).softmax(-1)

    args = (torch.randn(6, 33), torch.randn(33), torch.randn(33))
    s = graphfuser.script(f)
    for _ in range(3):
        out = s(*args)
    torch.testing.assert_close(out, f(*args))
    assert (fresh_cache / "pch").is_dir()
