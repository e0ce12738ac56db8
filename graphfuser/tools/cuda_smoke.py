"""Smoke test of the CUDA runtime on a GPU machine: NVRTC -> CUBIN -> driver-API launch.

Checks an ``add_one`` kernel against torch (default stream, a side stream, CUDA graph replay,
a refused launch), then times NVRTC compiles and 5,000 launches (wall clock, after a
synchronize) and prints a summary. Without a GPU it still times NVRTC and says what it skipped.

    PYTHONPATH=. python3 tools/cuda_smoke.py [--launches 5000]
    python -m graphfuser cuda_smoke [--launches 5000]      # the same
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import Optional

import torch

from graphfuser.config import config
from graphfuser.runtime import nvrtc
from graphfuser.runtime.errors import LaunchError

ADD_ONE = r"""
extern "C" __global__ void add_one(const float* __restrict__ x, float* __restrict__ out, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] + 1.0f;
}
"""

# A ~30-line pointwise kernel of the kind the fuser generates: bias + GELU over a 2-D broadcast.
BIAS_GELU = r"""
extern "C" __global__ void bias_gelu(
    const float* __restrict__ x, const float* __restrict__ bias, float* __restrict__ out,
    long long rows, long long cols, long long x_stride0, long long x_stride1) {
  const long long n = rows * cols;
  const long long stride = (long long)gridDim.x * blockDim.x * 4;
  for (long long base = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * 4; base < n;
       base += stride) {
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      long long i = base + u;
      if (i < n) {
        long long r = i / cols;
        long long c = i - r * cols;
        float v = x[r * x_stride0 + c * x_stride1] + bias[c];
        float inner = 0.7978845608028654f * (v + 0.044715f * v * v * v);
        float t = tanhf(inner);
        float g = 0.5f * v * (1.0f + t);
        out[i] = g;
      }
    }
  }
}
"""


def time_compiles(arch: int, repeats: int = 5) -> dict[str, float]:
    """Median ms of an uncached NVRTC run (bypasses the cache) for the two kernels."""
    from graphfuser.runtime.nvrtc import _run_nvrtc, build_options, clamp_arch

    flags = build_options(clamp_arch(arch))
    out = {}
    for name, src in (("add_one", ADD_ONE), ("bias_gelu", BIAS_GELU)):
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            _run_nvrtc(src, name, flags)
            times.append((time.perf_counter() - t0) * 1e3)
        out[name] = sorted(times)[len(times) // 2]
    return out


def check(name: str, fn, results: list) -> None:
    try:
        fn()
        results.append((name, "ok", ""))
    except Exception as exc:  # report every check, do not stop at the first
        results.append((name, "FAIL", f"{type(exc).__name__}: {exc}"))


def run_gpu_checks(n_launches: int, results: list, timings: dict) -> None:
    from graphfuser.runtime import cuda_driver
    from graphfuser.runtime.cuda_driver import CudaKernel, raw_stream

    dev = 0
    arch = cuda_driver.device_arch(dev)
    t0 = time.perf_counter()
    cubin = nvrtc.compile_cubin(ADD_ONE, "add_one", arch)
    timings["first compile_cubin add_one (ms)"] = (time.perf_counter() - t0) * 1e3
    t0 = time.perf_counter()
    k = CudaKernel(cubin, "add_one", dev, ["ptr", "ptr", "i64"])
    timings["first CudaKernel load, creates the context (ms)"] = (time.perf_counter() - t0) * 1e3
    block = (128, 1, 1)

    def add_one(x, out):
        n = x.numel()
        k.launch(((n + 127) // 128, 1, 1), block, raw_stream(dev), x.data_ptr(), out.data_ptr(), n)

    def default_stream():
        for n in (1, 1000, 1 << 20):
            x = torch.randn(n, device="cuda")
            out = torch.empty_like(x)
            add_one(x, out)
            torch.testing.assert_close(out, x + 1)

    def side_stream():
        s = torch.cuda.Stream()
        x = torch.randn(1 << 16, device="cuda")
        out = torch.zeros_like(x)
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            assert raw_stream(dev) == s.cuda_stream
            add_one(x, out)
        torch.cuda.current_stream().wait_stream(s)
        torch.testing.assert_close(out, x + 1)

    def graph():
        x = torch.randn(4096, device="cuda")
        out = torch.empty_like(x)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            add_one(x, out)
        x.fill_(41.0)
        g.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out, torch.full_like(x, 42.0))

    def bad_launch():
        x = torch.randn(16, device="cuda")
        try:
            k.launch((1, 1, 1), (4096, 1, 1), raw_stream(dev), x.data_ptr(), x.data_ptr(), 16)
        except LaunchError as exc:
            assert "add_one" in str(exc), exc
            return
        raise AssertionError("block of 4096 threads did not raise LaunchError")

    def cuda1():
        if torch.cuda.device_count() < 2:
            results.append(("cuda:1", "skip", "one GPU"))
            return
        k1 = CudaKernel(nvrtc.compile_cubin(ADD_ONE, "add_one", cuda_driver.device_arch(1)),
                        "add_one", 1, ["ptr", "ptr", "i64"])
        x = torch.randn(1000, device="cuda:1")
        out = torch.empty_like(x)
        k1.launch((8, 1, 1), block, raw_stream(1), x.data_ptr(), out.data_ptr(), 1000)
        torch.testing.assert_close(out, x + 1)

    for name, fn in (("default stream", default_stream), ("side stream", side_stream),
                     ("CUDA graph replay", graph), ("bad launch -> LaunchError", bad_launch),
                     ("cuda:1", cuda1)):
        check(name, fn, results)

    # -- timings: µs per call, wall clock over n_launches calls, after a synchronize ---------
    x = torch.randn(1024, device="cuda")
    out = torch.empty_like(x)
    xp, op, n = x.data_ptr(), out.data_ptr(), x.numel()
    grid = (8, 1, 1)
    stream = raw_stream(dev)
    launch = k.launch

    def per_call(fn) -> float:
        """Median over 3 rounds of n_launches calls, wall clock after a synchronize."""
        for _ in range(200):
            fn()
        rounds = []
        for _ in range(3):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(n_launches):
                fn()
            torch.cuda.synchronize()
            rounds.append((time.perf_counter() - t0) / n_launches * 1e6)
        return sorted(rounds)[1]

    timings["launch, args prebound (us)"] = per_call(lambda: launch(grid, block, stream, xp, op, n))
    timings["launch + raw_stream + data_ptr (us)"] = per_call(
        lambda: launch(grid, block, raw_stream(dev), x.data_ptr(), out.data_ptr(), x.numel()))

    def fused_call():
        o = torch.empty_like(x)
        launch(grid, block, raw_stream(dev), x.data_ptr(), o.data_ptr(), n)
        return o

    timings["empty_like + launch (us)"] = per_call(fused_call)
    timings["eager x + 1 (us)"] = per_call(lambda: x + 1)
    drv = cuda_driver._driver()
    timings["raw cuLaunchKernel only (us)"] = per_call(
        lambda: drv.cuLaunchKernel(k.func, 8, 1, 1, 128, 1, 1, 0, stream, k.params_address, 0))
    timings["raw_stream(0) (us)"] = per_call(lambda: raw_stream(dev))
    get_device = torch._C._cuda_getDevice
    timings["torch._C._cuda_getDevice() (us)"] = per_call(get_device)
    timings["launch, args prebound, again (us)"] = per_call(
        lambda: launch(grid, block, stream, xp, op, n))
    t0 = time.perf_counter()
    CudaKernel(cubin, "add_one", dev, ["ptr", "ptr", "i64"])
    timings["CudaKernel load, context already up (ms)"] = (time.perf_counter() - t0) * 1e3


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="cuda_smoke", description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=5000)
    args = ap.parse_args(argv)
    # compile into a fresh cache of its own, unless GRAPHFUSER_CACHE_DIR names one
    cache_dir = os.environ.get("GRAPHFUSER_CACHE_DIR") or tempfile.mkdtemp(prefix="graphfuser-smoke-")
    with config.override(cache_dir=cache_dir):
        return _smoke(args)


def _smoke(args: argparse.Namespace) -> int:
    ok, why = nvrtc.available()
    print(f"torch {torch.__version__}, cuda available: {torch.cuda.is_available()}")
    if not ok:
        print(f"NVRTC unavailable: {why}")
        return 1
    print(f"NVRTC {nvrtc.version()}, archs {nvrtc.supported_archs()}, "
          f"include dirs {nvrtc.include_dirs()}, fp16 headers: {nvrtc.has_fp16_headers()}")
    results: list = []
    timings: dict[str, float] = {}
    arch = 90
    if torch.cuda.is_available():
        from graphfuser.runtime.cuda_driver import device_arch, sm_count

        arch = device_arch(0)
        print(f"device: {torch.cuda.get_device_name(0)} sm_{arch}, {sm_count(0)} SMs, "
              f"{torch.cuda.device_count()} GPU(s)")
    for name, ms in time_compiles(arch).items():
        timings[f"NVRTC uncached compile {name} (ms, median of 5)"] = ms
    if torch.cuda.is_available():
        run_gpu_checks(args.launches, results, timings)
    else:
        results.append(("GPU checks", "skip", "no CUDA device"))

    print("\n== checks ==")
    for name, status, detail in results:
        print(f"  {status:5s} {name}" + (f": {detail}" if detail else ""))
    print(f"\n== timings (us: median of 3 rounds of {args.launches} calls) ==")
    for name, value in timings.items():
        print(f"  {value:9.2f}  {name}")
    failed = [r for r in results if r[1] == "FAIL"]
    print(f"\n{'FAILED' if failed else 'OK'}: {len(failed)} failed, "
          f"{sum(r[1] == 'ok' for r in results)} passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
