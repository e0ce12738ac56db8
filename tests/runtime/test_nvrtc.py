"""NVRTC compiles to CUBIN without a GPU: these run in CI."""
from __future__ import annotations

import pytest

from graphfuser.config import config
from graphfuser.runtime import nvrtc
from graphfuser.runtime.errors import CompileError

_OK, _WHY = nvrtc.available()
pytestmark = pytest.mark.skipif(not _OK, reason=f"NVRTC unavailable: {_WHY}")

ELF_MAGIC = b"\x7fELF"
ARCH = 90

ADD_ONE = r"""
extern "C" __global__ void add_one(const float* __restrict__ x, float* __restrict__ out, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = x[i] + 1.0f;
  }
}
"""

AXPY_FMA = r"""
extern "C" __global__ void axpy(const float* x, const float* y, float* out, float a, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a * x[i] + y[i];
}
"""

HALF_BF16 = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void scale_half(const __half* x, __nv_bfloat16* out, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float v = __half2float(x[i]) * s;   // compute in fp32
    out[i] = __float2bfloat16(v);
  }
}
"""


def _compiles() -> int:
    from graphfuser.runtime import cache

    return cache.STATS["compiles"]


def test_version_and_archs():
    major, minor = nvrtc.version()
    assert major >= 11 and minor >= 0
    archs = nvrtc.supported_archs()
    assert archs == tuple(sorted(archs)) and len(archs) > 0


def test_compile_fp32_is_cubin():
    cubin = nvrtc.compile_cubin(ADD_ONE, "add_one", ARCH)
    assert isinstance(cubin, bytes)
    assert cubin[:4] == ELF_MAGIC
    assert b"add_one" in cubin


@pytest.mark.skipif(not nvrtc.has_fp16_headers(), reason="cuda_fp16.h / cuda_bf16.h not found")
def test_compile_fp16_bf16():
    assert nvrtc.include_dirs(), "has_fp16_headers() implies an include directory"
    cubin = nvrtc.compile_cubin(HALF_BF16, "scale_half", ARCH)
    assert cubin[:4] == ELF_MAGIC


def test_syntax_error_raises_with_log():
    bad = "extern \"C\" __global__ void broken(float* x) { x[0] = ; }\n"
    with pytest.raises(CompileError) as info:
        nvrtc.compile_cubin(bad, "broken", ARCH)
    err = info.value
    assert "broken" in str(err)
    assert err.log and "error" in err.log.lower()
    assert err.log in str(err)
    assert err.source == bad
    assert any(f.startswith("--gpu-architecture=sm_") for f in err.command)


def test_missing_extern_c_is_reported():
    src = "__global__ void mangled(float* x) { x[0] = 1.0f; }\n"
    with pytest.raises(CompileError, match="extern"):
        nvrtc.compile_cubin(src, "not_there", ARCH)


def test_compile_ptx_checks_without_the_assembler():
    """``compile_ptx``: the virtual architecture's PTX, its entries named; the same errors."""
    ptx = nvrtc.compile_ptx(ADD_ONE, "add_one", ARCH)
    assert b".entry add_one(" in ptx and b".target sm_" in ptx and ptx[:4] != ELF_MAGIC
    with pytest.raises(CompileError, match="extern"):
        nvrtc.compile_ptx("__global__ void mangled(float* x) { x[0] = 1.0f; }\n", "mangled", ARCH)
    with pytest.raises(CompileError) as info:
        nvrtc.compile_ptx("extern \"C\" __global__ void broken(float* x) { x[0] = ; }\n", "broken", ARCH)
    assert any(f.startswith("--gpu-architecture=compute_") for f in info.value.command)


def test_fma_knob_adds_fmad_false():
    assert "--fmad=false" not in nvrtc.build_options(ARCH)
    with config.override(disable=["fma"]):
        flags = nvrtc.build_options(ARCH)
        assert "--fmad=false" in flags
        before = _compiles()
        no_fma = nvrtc.compile_cubin(AXPY_FMA, "axpy", ARCH)
        assert _compiles() == before + 1  # a different key from the fma build
    with_fma = nvrtc.compile_cubin(AXPY_FMA, "axpy", ARCH)
    assert no_fma[:4] == with_fma[:4] == ELF_MAGIC
    assert no_fma != with_fma


def test_default_options():
    flags = nvrtc.build_options(ARCH, ["-DFOO=1"])
    assert flags[0] == f"--gpu-architecture=sm_{ARCH}"
    for f in ("-default-device", "--std=c++17"):
        assert f in flags
    assert "-lineinfo" not in flags                 # opt-in: PYTORCH_NVFUSER_ENABLE=lineinfo
    with config.override(enable=["lineinfo"]):
        assert "-lineinfo" in nvrtc.build_options(ARCH)
    assert flags[-1] == "-DFOO=1"
    assert all(f"-I{d}" in flags for d in nvrtc.include_dirs())


def test_second_compile_is_cache_hit():
    src = ADD_ONE.replace("1.0f", "2.0f")  # unique to this test
    before = _compiles()
    first = nvrtc.compile_cubin(src, "add_one", ARCH)
    assert _compiles() == before + 1
    second = nvrtc.compile_cubin(src, "add_one", ARCH)
    assert _compiles() == before + 1, "second compile of the same source must not run NVRTC"
    assert first == second


def test_arch_is_clamped_to_supported():
    archs = nvrtc.supported_archs()
    assert nvrtc.clamp_arch(archs[-1]) == archs[-1]
    assert nvrtc.clamp_arch(archs[-1] + 50) == archs[-1]
    assert nvrtc.clamp_arch(89) == max(a for a in archs if a <= 89)
    cubin = nvrtc.compile_cubin(ADD_ONE, "add_one", archs[-1] + 50)
    assert cubin[:4] == ELF_MAGIC
    with pytest.raises(CompileError, match="cannot target"):
        nvrtc.clamp_arch(archs[0] - 1)


def test_column_sum_finalizing_kernels_compile():
    """``runtime/column_sums.py``: the kernel that adds a row kernel's column partials, for every
    partials / output dtype pair it takes."""
    import torch

    from graphfuser.runtime import column_sums

    pairs = [(a, o) for a in (torch.float32, torch.float64, torch.int64)
             for o in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32)
             if column_sums.supported(a, o)]
    assert len(pairs) == 18
    for a, o in pairs:
        name = column_sums.kernel_name(a, o)
        cubin = nvrtc.compile_cubin(column_sums.source(a, o), name, ARCH)
        assert cubin.startswith(ELF_MAGIC) and f".text.{name}\0".encode() in cubin
    # launch shapes: every column covered, a power-of-two count of slot lanes, at most 1024 threads
    for nr, n, slots, sms in [(384, 3, 2112, 132), (4096, 2, 1056, 132), (1, 1, 1, 132), (77, 4, 20, 8)]:
        (gx, gy, _), (bx, by, _) = column_sums.launch_shape(nr, n, slots, sms)
        assert gx * bx >= nr > (gx - 1) * bx and gy == n and bx * by <= 1024 and by & (by - 1) == 0
    assert column_sums.launch_shape(384, 3, 2112, 132)[1][0] == 8        # 36 blocks of 32 on 132 SMs
    assert column_sums.launch_shape(4096, 2, 1056, 132)[1][0] == 32
    # one dtype per output (float32 norm gradients beside a bf16 bias gradient)
    for outs in [(torch.float32, torch.float32, torch.bfloat16), (torch.bfloat16, torch.float16, torch.float32, torch.int32)]:
        name = column_sums.kernel_name(torch.float32, outs)
        assert name.endswith("_".join(str(o).split(".")[-1] for o in outs))
        cubin = nvrtc.compile_cubin(column_sums.source(torch.float32, outs), name, ARCH)
        assert cubin.startswith(ELF_MAGIC) and f".text.{name}\0".encode() in cubin
