"""The CUDA prelude's exp and sigmoid: the hardware's approximations by default, expf and IEEE
division under PYTORCH_NVFUSER_DISABLE=fast_math, and the knob is part of the kernel cache key.
The GPU values are checked in tests/cuda/test_cuda_fast_math.py."""
import pytest

from graphfuser.codegen.dialects import CPP, CUDA
from graphfuser.config import config
from graphfuser.runtime import nvrtc
from helpers import cuda_compiles


def test_cuda_prelude_fast_by_default_precise_under_the_knob():
    fast = CUDA.prelude()
    assert "GF_FN float gf_sigmoid(float x) { return gf_rcp(1.0f + gf_ex2(x * -1.4426950408889634f)); }" in fast
    assert "GF_FN float gf_exp(float x) { return gf_ex2(x * 1.4426950408889634f); }" in fast
    with config.override(disable=["fast_math"]):
        precise = CUDA.prelude()
        key = config.codegen_key()
    assert "GF_FN float gf_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }" in precise
    assert "GF_FN float gf_exp(float x) { return expf(x); }" in precise
    # double keeps exp() either way; the CPU dialect is not affected by the knob
    assert "GF_FN double gf_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }" in fast
    cpp = CPP.prelude()
    with config.override(disable=["fast_math"]):
        assert CPP.prelude() == cpp
    assert "fast_math" in key and "fast_math" not in config.codegen_key()


@pytest.mark.parametrize("precise", [False, True])
def test_cuda_prelude_compiles(precise):
    ok, why = nvrtc.available()
    if not ok:
        pytest.skip(f"NVRTC unavailable: {why}")
    with config.override(disable=["fast_math"] if precise else []):
        src = CUDA.prelude() + '\nextern "C" __global__ void k(float* y, const float* x) ' \
            '{ y[threadIdx.x] = gf_sigmoid(x[threadIdx.x]) + gf_exp(x[threadIdx.x]); }\n'
        assert cuda_compiles(src, "k", 90)
