"""``max_pool2d`` of a channels-last CUDA tensor without indices: one vector of channels a thread.

A max pool is not fused (no group takes it), so the host program calls it between the group
that makes its input and the one that reads its output. Eager's kernel for a channels-last
input (``max_pool_forward_nhwc``) reads one channel per thread and took 229 us of resnet50's
float32 inference at batch 64 on an H200: its stem pool, [64, 64, 112, 112] -> [64, 64, 56, 56],
256 MB of traffic, about a quarter of copy bandwidth (``logs/prof-race-row-cuda-H200-resnet50-infer-s65.txt``).

Here a thread takes ``16 / itemsize`` adjacent channels of one output pixel: each window element
is one 16-byte load, compared lane by lane in float, and the chosen element's own bits are
stored, so the result is bit for bit eager's:

- the window runs rows, then columns, ascending, from ``-inf``; an element replaces the maximum
  where it is greater or a NaN (a NaN, once taken, stays: eager's ``val > max || isnan(val)``);
  of equal values (``-0.0`` and ``0.0``) the first stays;
- window elements outside the input (padding, a ``ceil_mode`` window past the end) are skipped;
- the output is channels-last, as eager's for a channels-last input; its size is eager's
  ``pooling_output_shape``.

``max_pool2d(...)`` takes ``torch.max_pool2d``'s arguments and runs the kernel where it applies:
a 4-d CUDA tensor of float32, float16 or bfloat16, dense channels-last and not also contiguous
(eager's output layout is then channels-last too),
nothing to differentiate (no grad mode or no ``requires_grad``), positive kernel, stride and
dilation, padding at most half the kernel, a non-empty output. Anything else, or a failed
compile, goes to ``torch.max_pool2d`` (which also raises eager's errors for bad arguments).
Channel counts that are not a multiple of the vector width, or an input that does not start
16-byte aligned, take the one-channel variant. ``PYTORCH_NVFUSER_DISABLE=max_pool_kernel`` keeps eager's kernel.
"""
from __future__ import annotations

import functools
from typing import Any, Optional, Sequence, Union

import torch

THREADS = 256
_DTYPES = {torch.float32: ("f32", "unsigned int", "__int_as_float((int)({0}))", "0xff800000u"),
           torch.float16: ("f16", "unsigned short", "gf_mp_h2f({0})", "(unsigned short)0xfc00u"),
           torch.bfloat16: ("bf16", "unsigned short", "__int_as_float(((int)({0})) << 16)", "(unsigned short)0xff80u")}

_TEMPLATE = r"""
__device__ __forceinline__ float gf_mp_h2f(unsigned short h) {{
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
}}
struct __align__({align}) gf_mp_vec {{ {w} e[{v}]; }};
extern "C" __global__ void __launch_bounds__({threads}) {name}(const {w}* __restrict__ x,
    {w}* __restrict__ y, {idx} n, int cv, int H, int W, int OH, int OW, int kh, int kw,
    int sh, int sw, int ph, int pw, int dh, int dw) {{
  const int C = cv * {v};
  for ({idx} i = ({idx})blockIdx.x * blockDim.x + threadIdx.x; i < n; i += ({idx})gridDim.x * blockDim.x) {{
    {idx} p = i / cv;
    const int c = (int)(i - p * cv) * {v};
    const int ow = (int)(p % OW);
    p /= OW;
    const int oh = (int)(p % OH);
    const {idx} b = p / OH;
    float m[{v}];
    {w} r[{v}];
    #pragma unroll
    for (int k = 0; k < {v}; ++k) {{ m[k] = -__int_as_float(0x7f800000); r[k] = {neg_inf}; }}
    const int h0 = oh * sh - ph, w0 = ow * sw - pw;
    for (int a = 0; a < kh; ++a) {{
      const int h = h0 + a * dh;
      if (h < 0 || h >= H) continue;
      for (int e = 0; e < kw; ++e) {{
        const int w = w0 + e * dw;
        if (w < 0 || w >= W) continue;
        const gf_mp_vec t = *reinterpret_cast<const gf_mp_vec*>(x + ((b * H + h) * ({idx})W + w) * C + c);
        #pragma unroll
        for (int k = 0; k < {v}; ++k) {{
          const float f = {to_float};
          if (f > m[k] || f != f) {{ m[k] = f; r[k] = t.e[k]; }}
        }}
      }}
    }}
    gf_mp_vec o;
    #pragma unroll
    for (int k = 0; k < {v}; ++k) o.e[k] = r[k];
    *reinterpret_cast<gf_mp_vec*>(y + i * {v}) = o;
  }}
}}
"""


def kernel_name(dtype: torch.dtype, v: int, wide: bool) -> str:
    return f"gf_max_pool2d_nhwc_{_DTYPES[dtype][0]}_v{v}_{'i64' if wide else 'i32'}"


def source(dtype: torch.dtype, v: int, wide: bool) -> str:
    """The kernel's CUDA source for ``dtype``, ``v`` channels a thread, 64-bit indices or not."""
    _, word, to_float, neg_inf = _DTYPES[dtype]
    item = torch.empty((), dtype=dtype).element_size()
    return _TEMPLATE.format(threads=THREADS, name=kernel_name(dtype, v, wide), w=word, v=v,
                            align=item * v, idx="long long" if wide else "int", neg_inf=neg_inf,
                            to_float=to_float.format("t.e[k]"))


@functools.lru_cache(maxsize=None)
def _kernel(dtype: torch.dtype, v: int, wide: bool, device_index: int) -> Any:
    from . import cuda_driver, nvrtc

    name = kernel_name(dtype, v, wide)
    cubin = nvrtc.compile_cubin(source(dtype, v, wide), name, cuda_driver.device_arch(device_index))
    return cuda_driver.CudaKernel(cubin, name, device_index, ["ptr", "ptr", "i64" if wide else "i32"]
                                  + ["i32"] * 13)


def _pair(v: Union[int, Sequence[int]], default: Sequence[int]) -> Optional[tuple[int, int]]:
    """An int-or-list pool argument as (height, width); ``default`` for an empty list; None for
    anything else (eager then decides)."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v, v
    if not isinstance(v, (list, tuple)) or not all(isinstance(i, int) and not isinstance(i, bool) for i in v):
        return None
    v = list(v) or list(default)
    if len(v) == 1:
        return v[0], v[0]
    return (v[0], v[1]) if len(v) == 2 else None


def output_size(size: int, k: int, pad: int, stride: int, dilation: int, ceil_mode: bool) -> int:
    """Eager's ``pooling_output_shape``: windows that start inside the input or its left padding."""
    out = (size + 2 * pad - dilation * (k - 1) - 1 + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def max_pool2d(input: Any, kernel_size: Any, stride: Any = (), padding: Any = 0, dilation: Any = 1,
               ceil_mode: bool = False) -> Any:
    """``torch.max_pool2d`` (see module doc): the channel-vector kernel where it applies."""
    out = _pooled(input, kernel_size, stride, padding, dilation, ceil_mode)
    if out is None:
        return torch.max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode)
    return out


def _pooled(x: Any, kernel_size: Any, stride: Any, padding: Any, dilation: Any, ceil_mode: bool) -> Any:
    from ..config import config

    if (not isinstance(x, torch.Tensor) or not x.is_cuda or x.dim() != 4 or x.dtype not in _DTYPES
            or (x.requires_grad and torch.is_grad_enabled()) or config.is_disabled("max_pool_kernel")
            or not x.is_contiguous(memory_format=torch.channels_last) or x.is_contiguous()):
        return None
    k = _pair(kernel_size, ())
    if k is None:
        return None
    s, p, d = _pair(stride, k), _pair(padding, ()), _pair(dilation, ())     # (stride=[]: the kernel size)
    if None in (s, p, d) or min(*k, *s, *d) <= 0 or min(p) < 0 or p[0] > k[0] // 2 or p[1] > k[1] // 2:
        return None
    n, c, h, w = x.shape
    oh = output_size(h, k[0], p[0], s[0], d[0], bool(ceil_mode))
    ow = output_size(w, k[1], p[1], s[1], d[1], bool(ceil_mode))
    if min(n, c, h, w, oh, ow) <= 0:
        return None
    v = 16 // x.element_size()
    if c % v or x.data_ptr() % 16:
        v = 1
    y = torch.empty((n, c, oh, ow), dtype=x.dtype, device=x.device, memory_format=torch.channels_last)
    vectors = n * oh * ow * (c // v)
    wide = max(vectors * v, x.numel()) >= 2 ** 31 - 1
    try:
        kernel = _kernel(x.dtype, v, wide, x.device.index or 0)
    except Exception:  # noqa: BLE001 - no NVRTC / driver here: eager's kernel
        return None
    grid = (max(1, min((vectors + THREADS - 1) // THREADS, 1 << 20)), 1, 1)
    kernel.launch(grid, (THREADS, 1, 1), torch.cuda.current_stream(x.device).cuda_stream,
                  x.data_ptr(), y.data_ptr(), vectors, c // v, h, w, oh, ow, k[0], k[1], s[0], s[1],
                  p[0], p[1], d[0], d[1])
    return y
