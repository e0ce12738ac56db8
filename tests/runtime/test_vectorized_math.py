"""The default C++ flags vectorize loops over the prelude's exp, tanh and sigmoid (runtime/cpu.py,
``cpu.cxxflags``): under g++'s default ``-ftrapping-math`` their clamps and NaN checks stayed
branches and every such loop was scalar (softmax f32 [512, 65536] took 281 ms on 2 cores, 82 ms
vectorized); ``-fno-trapping-math`` makes them blends. The values are the same either way."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import torch

from graphfuser.codegen.dialects import CPP
from graphfuser.config import config
from graphfuser.runtime import cpu

pytestmark = pytest.mark.skipif(
    shutil.which("objdump") is None or not config.cpu["cxx"].split()[0].endswith("g++")
    or "-march=native" not in config.cpu["cxxflags"] or "avx2" not in open("/proc/cpuinfo").read(),
    reason="reads x86 AVX2 machine code that g++ with -march=native made")

LOOP = '''
extern "C" void k(const float* __restrict__ a, float* __restrict__ o, long long n) {
  #pragma omp simd
  for (long long i = 0; i < n; ++i) o[i] = gf_%s(a[i]);
}
'''


def _packed(so: str) -> int:
    """Packed single-precision instructions on 256-bit registers in ``k``."""
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", so], capture_output=True, text=True).stdout
    body = out.split("<k>:", 1)[1].split("\n\n", 1)[0]
    return len(re.findall(r"\bv\w+ps\b.*%ymm", body))


def _run(so: str) -> torch.Tensor:
    k = cpu.CpuKernel(so, "k", ["ptr", "ptr", "i64"])
    a = torch.cat([torch.linspace(-120, 100, 1021), torch.tensor([float("nan"), float("inf"), -float("inf")])])
    o = torch.empty_like(a)
    k(a.data_ptr(), o.data_ptr(), a.numel())
    return o


@pytest.mark.parametrize("fn", ["exp", "tanh", "sigmoid"])
def test_the_loop_is_vectorized_with_the_default_flags(tmp_path, fn):
    with config.override(cache_dir=str(tmp_path)):
        fast = cpu.compile_cpp(CPP.prelude() + LOOP % fn)
        shutil.copy(fast, tmp_path / "fast.so")
        flags = [f for f in config.cpu["cxxflags"] if f != "-fno-trapping-math"]
        with config.override(cpu=dict(config.cpu, cxxflags=flags)):
            slow = cpu.compile_cpp(CPP.prelude() + LOOP % fn)
    # (g++ 12 keeps the loop scalar without the flag: 0 such instructions; a later g++ may not)
    assert _packed(str(tmp_path / "fast.so")) > 0
    torch.testing.assert_close(_run(str(tmp_path / "fast.so")), _run(slow), rtol=0, atol=0, equal_nan=True)
