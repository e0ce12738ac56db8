"""Loading and launching CUBINs with the driver API (needs a GPU: skipped elsewhere)."""
from __future__ import annotations

import pytest
import torch

from graphfuser.runtime.errors import LaunchError

pytestmark = pytest.mark.cuda

ADD_ONE = r"""
extern "C" __global__ void add_one(const float* __restrict__ x, float* __restrict__ out, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] + 1.0f;
}
"""

SCALE_ADD = r"""
extern "C" __global__ void scale_add(const double* x, double* out, double a, float b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a * x[i] + (double)b;
}
"""

HALF_BF16 = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void scale_half(const __half* x, __nv_bfloat16* out, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16(__half2float(x[i]) * s);
}
"""

BLOCK = 128


def _kernel(device_index: int = 0, source: str = ADD_ONE, name: str = "add_one",
            kinds=("ptr", "ptr", "i64")):
    from graphfuser.runtime import cuda_driver, nvrtc

    cubin = nvrtc.compile_cubin(source, name, cuda_driver.device_arch(device_index))
    return cuda_driver.CudaKernel(cubin, name, device_index, list(kinds))


def _grid(n: int) -> tuple[int, int, int]:
    return ((n + BLOCK - 1) // BLOCK, 1, 1)


def _add_one(k, x: torch.Tensor, out: torch.Tensor) -> None:
    from graphfuser.runtime.cuda_driver import raw_stream

    n = x.numel()
    k.launch(_grid(n), (BLOCK, 1, 1), raw_stream(x.device.index), x.data_ptr(), out.data_ptr(), n)


def test_device_queries():
    from graphfuser.runtime import cuda_driver

    major, minor = torch.cuda.get_device_capability(0)
    assert cuda_driver.device_arch(0) == major * 10 + minor
    assert cuda_driver.sm_count(0) == torch.cuda.get_device_properties(0).multi_processor_count
    assert cuda_driver.raw_stream(0) == torch.cuda.current_stream(0).cuda_stream


def test_add_one_matches_torch():
    k = _kernel()
    for n in (1, 127, 128, 1000, 1 << 20):
        x = torch.randn(n, device="cuda")
        out = torch.empty_like(x)
        _add_one(k, x, out)
        torch.testing.assert_close(out, x + 1)


def test_scalar_arg_kinds():
    k = _kernel(source=SCALE_ADD, name="scale_add", kinds=("ptr", "ptr", "f64", "f32", "i32"))
    x = torch.randn(300, device="cuda", dtype=torch.float64)
    out = torch.empty_like(x)
    from graphfuser.runtime.cuda_driver import raw_stream

    k.launch(_grid(300), (BLOCK, 1, 1), raw_stream(0), x.data_ptr(), out.data_ptr(), 2.5, 0.5, 300)
    torch.testing.assert_close(out, 2.5 * x + 0.5)


def test_fp16_in_bf16_out():
    from graphfuser.runtime import nvrtc
    from graphfuser.runtime.cuda_driver import raw_stream

    if not nvrtc.has_fp16_headers():
        pytest.skip("cuda_fp16.h / cuda_bf16.h not found")
    k = _kernel(source=HALF_BF16, name="scale_half", kinds=("ptr", "ptr", "f32", "i32"))
    x = torch.randn(777, device="cuda", dtype=torch.float16)
    out = torch.empty(777, device="cuda", dtype=torch.bfloat16)
    k.launch(_grid(777), (BLOCK, 1, 1), raw_stream(0), x.data_ptr(), out.data_ptr(), 3.0, 777)
    torch.testing.assert_close(out, (x.float() * 3.0).to(torch.bfloat16))


def test_non_default_stream():
    k = _kernel()
    s = torch.cuda.Stream()
    x = torch.randn(1 << 16, device="cuda")
    out = torch.zeros_like(x)
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        from graphfuser.runtime.cuda_driver import raw_stream

        assert raw_stream(0) == s.cuda_stream != 0
        _add_one(k, x, out)
    torch.cuda.current_stream().wait_stream(s)
    torch.testing.assert_close(out, x + 1)


def test_cuda_graph_capture_and_replay():
    k = _kernel()
    x = torch.randn(4096, device="cuda")
    out = torch.empty_like(x)
    # Warm up on a side stream, as torch recommends before capture.
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        _add_one(k, x, out)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        _add_one(k, x, out)
    x.copy_(torch.arange(4096, device="cuda", dtype=torch.float32))
    out.zero_()
    g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, x + 1)
    x.fill_(-3.0)
    g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, torch.full_like(x, -2.0))


def test_bad_launch_raises():
    k = _kernel()
    x = torch.randn(16, device="cuda")
    out = torch.empty_like(x)
    from graphfuser.runtime.cuda_driver import raw_stream

    with pytest.raises(LaunchError, match="add_one"):
        k.launch((1, 1, 1), (4096, 1, 1), raw_stream(0), x.data_ptr(), out.data_ptr(), 16)
    with pytest.raises(TypeError):
        k.launch((1, 1, 1), (32, 1, 1), raw_stream(0), x.data_ptr())  # too few args
    # The kernel still works after a refused launch.
    _add_one(k, x, out)
    torch.testing.assert_close(out, x + 1)


def test_launch_from_other_current_device_and_cuda1():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs: cuda:1 not present")
    k1 = _kernel(device_index=1)
    x = torch.randn(1000, device="cuda:1")
    out = torch.empty_like(x)
    with torch.cuda.device(0):  # current device is not the kernel's: launch must still be right
        _add_one(k1, x, out)
    torch.testing.assert_close(out, x + 1)
    with torch.cuda.device(1):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            _add_one(k1, x, out)
        torch.cuda.current_stream().wait_stream(s)
    torch.testing.assert_close(out, x + 1)
    k0 = _kernel(device_index=0)
    y = torch.randn(1000, device="cuda:0")
    out0 = torch.empty_like(y)
    with torch.cuda.device(1):
        _add_one(k0, y, out0)
    torch.testing.assert_close(out0, y + 1)


def test_cooperative_launch_runs_and_refuses_grids_that_do_not_fit():
    """Kernels with grid barriers launch cooperatively: every block resident, or an error (never
    a hang)."""
    from graphfuser.runtime import cuda_driver, nvrtc

    cubin = nvrtc.compile_cubin(ADD_ONE, "add_one", cuda_driver.device_arch(0))
    k = cuda_driver.CudaKernel(cubin, "add_one", 0, ["ptr", "ptr", "i64"], cooperative=True)
    fit = k.resident_blocks(BLOCK)
    n = fit * BLOCK
    x = torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    k.launch((fit, 1, 1), (BLOCK, 1, 1), cuda_driver.raw_stream(0), x.data_ptr(), out.data_ptr(), n)
    torch.testing.assert_close(out, x + 1)
    with pytest.raises(LaunchError, match="cuLaunchCooperativeKernel"):
        k.launch((fit * 2 + 1, 1, 1), (BLOCK, 1, 1), cuda_driver.raw_stream(0), x.data_ptr(), out.data_ptr(), n)


@pytest.mark.parametrize("api", ["shim", "ctypes", "bindings"])
def test_both_launch_apis(api):
    """The launch shim, the driver library through ctypes and cuda-bindings launch the same
    kernels the same way: scalar kinds, a refused launch's error, cooperative launches, CUDA
    graph capture."""
    from graphfuser.runtime import cuda_driver, nvrtc

    if api == "ctypes" and cuda_driver.driver_launchers() is None:
        pytest.skip("the driver library cannot be opened through ctypes")
    if api == "shim" and cuda_driver.shim_launchers() is None:
        pytest.skip("no launch shim (no C compiler, or no driver library through ctypes)")

    def kernel(source, name, kinds, cooperative=False):
        cubin = nvrtc.compile_cubin(source, name, cuda_driver.device_arch(0))
        k = cuda_driver.CudaKernel(cubin, name, 0, list(kinds), cooperative=cooperative, api=api)
        assert k.launch_api == api
        return k

    stream = cuda_driver.raw_stream(0)
    k = kernel(SCALE_ADD, "scale_add", ("ptr", "ptr", "f64", "f32", "i32"))
    x = torch.randn(300, device="cuda", dtype=torch.float64)
    out = torch.empty_like(x)
    k.launch(_grid(300), (BLOCK, 1, 1), stream, x.data_ptr(), out.data_ptr(), -1.5, 0.25, 300)
    torch.testing.assert_close(out, -1.5 * x + 0.25)
    with pytest.raises(LaunchError, match="scale_add.*CUDA_ERROR_INVALID_VALUE"):
        k.launch((1, 1, 1), (4096, 1, 1), stream, x.data_ptr(), out.data_ptr(), 1.0, 1.0, 300)

    a = kernel(ADD_ONE, "add_one", ("ptr", "ptr", "i64"))
    y = torch.randn(4096, device="cuda")
    o = torch.empty_like(y)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        _add_one(a, y, o)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        _add_one(a, y, o)
    y.fill_(2.0)
    g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(o, torch.full_like(y, 3.0))

    c = kernel(ADD_ONE, "add_one", ("ptr", "ptr", "i64"), cooperative=True)
    fit = c.resident_blocks(BLOCK)
    z = torch.randn(fit * BLOCK, device="cuda")
    oz = torch.empty_like(z)
    c.launch((fit, 1, 1), (BLOCK, 1, 1), stream, z.data_ptr(), oz.data_ptr(), z.numel())
    torch.testing.assert_close(oz, z + 1)
    with pytest.raises(LaunchError, match="cuLaunchCooperativeKernel"):
        c.launch((fit * 2 + 1, 1, 1), (BLOCK, 1, 1), stream, z.data_ptr(), oz.data_ptr(), z.numel())
