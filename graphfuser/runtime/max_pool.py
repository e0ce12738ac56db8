"""``max_pool2d`` of a channels-last CUDA tensor: one vector of channels a thread, forward and backward.

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

Under grad (a training step's stem pool) the forward also stores the chosen element's position
in its window, one byte per output element (eager keeps an int64 index), and the backward
(``_MaxPool2dTrain``) gathers: a thread takes a vector of channels of one input pixel and adds,
in float, the gradients of the windows that chose it, in eager's window order, so the gradient
is eager's bit for bit too; one store per pixel, no atomics. Dilation 1 and windows of at most
255 elements there (else eager's kernels).

``max_pool2d(...)`` takes ``torch.max_pool2d``'s arguments and runs the kernels where they apply:
a 4-d CUDA tensor of float32, float16 or bfloat16, dense channels-last and not also contiguous
(eager's output layout is then channels-last too), positive kernel, stride and dilation, padding
at most half the kernel, a non-empty output, no functorch transform or forward-mode AD level
active (eager's op has their rules; the kernels would drop a tangent). Anything else, or a failed
compile, goes to ``torch.max_pool2d`` (which also raises eager's errors for bad arguments).
Channel counts that are not a multiple of the vector width, or an input that does not start
16-byte aligned, take the one-channel variant. ``PYTORCH_NVFUSER_DISABLE=max_pool_kernel`` keeps eager's kernel.
"""
from __future__ import annotations

import functools
from typing import Any, Optional, Sequence, Union

import torch
import torch.autograd.forward_ad as _forward_ad

THREADS = 256
_DTYPES = {torch.float32: ("f32", "unsigned int", "__int_as_float((int)({0}))", "0xff800000u"),
           torch.float16: ("f16", "unsigned short", "gf_mp_h2f({0})", "(unsigned short)0xfc00u"),
           torch.bfloat16: ("bf16", "unsigned short", "__int_as_float(((int)({0})) << 16)", "(unsigned short)0xff80u")}

_TEMPLATE = r"""
__device__ __forceinline__ float gf_mp_h2f(unsigned short h) {{
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
}}
struct __align__({align}) gf_mp_vec {{ {w} e[{v}]; }};
struct __align__({v}) gf_mp_pos {{ unsigned char e[{v}]; }};
extern "C" __global__ void __launch_bounds__({threads}) {name}(const {w}* __restrict__ x,
    {w}* __restrict__ y, {idx} n, int cv, int H, int W, int OH, int OW, int kh, int kw,
    int sh, int sw, int ph, int pw, int dh, int dw{pos_param}) {{
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
    const int h0 = oh * sh - ph, w0 = ow * sw - pw;{pos_init}
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
          if (f > m[k] || f != f) {{ m[k] = f; r[k] = t.e[k];{pos_take} }}
        }}
      }}
    }}
    gf_mp_vec o;
    #pragma unroll
    for (int k = 0; k < {v}; ++k) o.e[k] = r[k];
    *reinterpret_cast<gf_mp_vec*>(y + i * {v}) = o;{pos_store}
  }}
}}
"""

# Training (``_MaxPool2dTrain``): the forward also stores, per output element, the position of
# the chosen element in its window (a * kw + e, one byte: windows of at most 255 elements). A
# window of -inf alone keeps eager's channels-last index, 0: the plane's pixel (0, 0), whose
# position where the window holds it, else 255 (no pixel: eager's backward drops that gradient,
# max_pool_forward_nhwc starting every index at 0). Dilation 1 only.
_POS = dict(pos_param=", unsigned char* __restrict__ pos",
            pos_init="""
    unsigned char q[{v}];
    const unsigned char q0 = h0 <= 0 && w0 <= 0 ? (unsigned char)(-h0 * kw - w0) : (unsigned char)255;
    #pragma unroll
    for (int k = 0; k < {v}; ++k) q[k] = q0;""",
            pos_take=" q[k] = (unsigned char)(a * kw + e);",
            pos_store="""
    gf_mp_pos qv;
    #pragma unroll
    for (int k = 0; k < {v}; ++k) qv.e[k] = q[k];
    *reinterpret_cast<gf_mp_pos*>(pos + i * {v}) = qv;""")
_NO_POS = dict(pos_param="", pos_init="", pos_take="", pos_store="")

# The backward gathers: a thread takes a vector of channels of one input pixel and adds, in
# float, the output gradients of the windows holding it whose chosen position is this pixel,
# windows in eager's order (rows, then columns, ascending: max_pool_backward_nhwc's), so the
# sums are eager's; one store of the pixel's gradient, no atomics.
_BACKWARD = r"""
{prelude}
extern "C" __global__ void __launch_bounds__({threads}) {name}(const {w}* __restrict__ gy,
    const unsigned char* __restrict__ pos, {w}* __restrict__ gx, {idx} n, int cv, int H, int W,
    int OH, int OW, int kh, int kw, int sh, int sw, int ph, int pw) {{
  const int C = cv * {v};
  for ({idx} i = ({idx})blockIdx.x * blockDim.x + threadIdx.x; i < n; i += ({idx})gridDim.x * blockDim.x) {{
    {idx} p = i / cv;
    const int c = (int)(i - p * cv) * {v};
    const int w = (int)(p % W);
    p /= W;
    const int h = (int)(p % H);
    const {idx} b = p / H;
    float g[{v}];
    #pragma unroll
    for (int k = 0; k < {v}; ++k) g[k] = 0.0f;
    const int oh0 = h + ph < kh ? 0 : (h + ph - kh) / sh + 1;
    const int oh1 = min((h + ph) / sh + 1, OH);
    const int ow0 = w + pw < kw ? 0 : (w + pw - kw) / sw + 1;
    const int ow1 = min((w + pw) / sw + 1, OW);
    for (int oh = oh0; oh < oh1; ++oh) {{
      for (int ow = ow0; ow < ow1; ++ow) {{
        const int me = (h - (oh * sh - ph)) * kw + (w - (ow * sw - pw));
        const {idx} o = ((b * OH + oh) * ({idx})OW + ow) * C + c;
        const gf_mp_vec t = *reinterpret_cast<const gf_mp_vec*>(gy + o);
        const gf_mp_pos q = *reinterpret_cast<const gf_mp_pos*>(pos + o);
        #pragma unroll
        for (int k = 0; k < {v}; ++k) if (q.e[k] == me) g[k] += {to_float};
      }}
    }}
    gf_mp_vec r;
    #pragma unroll
    for (int k = 0; k < {v}; ++k) r.e[k] = {from_float};
    *reinterpret_cast<gf_mp_vec*>(gx + i * {v}) = r;
  }}
}}
"""


# float -> the dtype's bits, rounded to nearest even (the backward's stores)
_FROM_FLOAT = {torch.float32: "(unsigned int)__float_as_int({0})",
               torch.float16: "gf_mp_f2h({0})", torch.bfloat16: "gf_mp_f2bf({0})"}
_CONVERT = r"""
__device__ __forceinline__ float gf_mp_h2f(unsigned short h) {
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
}
__device__ __forceinline__ unsigned short gf_mp_f2h(float f) {
  unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
}
__device__ __forceinline__ unsigned short gf_mp_f2bf(float f) {
  unsigned short h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
}
"""


def kernel_name(dtype: torch.dtype, v: int, wide: bool, kind: str = "") -> str:
    """``kind``: "" (inference), "fwd" (training forward, window positions too), "bwd"."""
    return f"gf_max_pool2d{'_' + kind if kind else ''}_nhwc_{_DTYPES[dtype][0]}_v{v}_{'i64' if wide else 'i32'}"


def source(dtype: torch.dtype, v: int, wide: bool, kind: str = "") -> str:
    """The kernel's CUDA source for ``dtype``, ``v`` channels a thread, 64-bit indices or not."""
    _, word, to_float, neg_inf = _DTYPES[dtype]
    item = torch.empty((), dtype=dtype).element_size()
    common = dict(threads=THREADS, name=kernel_name(dtype, v, wide, kind), w=word, v=v,
                  idx="long long" if wide else "int", to_float=to_float.format("t.e[k]"))
    if kind == "bwd":
        prelude = _CONVERT + f"struct __align__({item * v}) gf_mp_vec {{ {word} e[{v}]; }};\n" \
            f"struct __align__({v}) gf_mp_pos {{ unsigned char e[{v}]; }};"
        return _BACKWARD.format(prelude=prelude, from_float=_FROM_FLOAT[dtype].format("g[k]"), **common)
    pos = {k: t.format(v=v) for k, t in _POS.items()} if kind == "fwd" else _NO_POS
    return _TEMPLATE.format(align=item * v, neg_inf=neg_inf, **pos, **common)


@functools.lru_cache(maxsize=None)
def _kernel(dtype: torch.dtype, v: int, wide: bool, device_index: int, kind: str = "") -> Any:
    from . import cuda_driver, nvrtc

    name = kernel_name(dtype, v, wide, kind)
    cubin = nvrtc.compile_cubin(source(dtype, v, wide, kind), name, cuda_driver.device_arch(device_index))
    n = "i64" if wide else "i32"
    args = {"": ["ptr", "ptr", n] + ["i32"] * 13, "fwd": ["ptr", "ptr", n] + ["i32"] * 13 + ["ptr"],
            "bwd": ["ptr", "ptr", "ptr", n] + ["i32"] * 11}[kind]
    return cuda_driver.CudaKernel(cubin, name, device_index, args)


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

    # (functorch's transforms and forward-mode AD: eager's op, which has their rules)
    if (not isinstance(x, torch.Tensor) or not x.is_cuda or x.dim() != 4 or x.dtype not in _DTYPES
            or config.is_disabled("max_pool_kernel")
            or not x.is_contiguous(memory_format=torch.channels_last) or x.is_contiguous()
            or torch._C._are_functorch_transforms_active() or _forward_ad._current_level >= 0):
        return None
    train = x.requires_grad and torch.is_grad_enabled()
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
    if train:
        # one byte a window position; dilation 1: every window holds an element of the input
        if d != (1, 1) or k[0] * k[1] > 255:
            return None
        try:
            for kind in ("fwd", "bwd"):
                _kernel(x.dtype, _vector(x), x.numel() >= 2 ** 31 - 1, x.device.index or 0, kind)
        except Exception:  # noqa: BLE001 - no NVRTC / driver here: eager's kernels
            return None
        return _MaxPool2dTrain.apply(x, (k, s, p, oh, ow))
    return _forward(x, k, s, p, d, oh, ow, None)


def _vector(x: torch.Tensor) -> int:
    """Channels a thread: a 16-byte vector where the channels and the pointer allow, else 1."""
    v = 16 // x.element_size()
    return 1 if x.shape[1] % v or x.data_ptr() % 16 else v


def _forward(x: torch.Tensor, k, s, p, d, oh: int, ow: int, pos: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """The output (and, into ``pos``, the chosen window positions), or None where no kernel
    compiles here."""
    n, c, h, w = x.shape
    v = _vector(x)
    y = torch.empty((n, c, oh, ow), dtype=x.dtype, device=x.device, memory_format=torch.channels_last)
    vectors = n * oh * ow * (c // v)
    wide = max(vectors * v, x.numel()) >= 2 ** 31 - 1
    try:
        kernel = _kernel(x.dtype, v, wide, x.device.index or 0, "" if pos is None else "fwd")
    except Exception:  # noqa: BLE001 - no NVRTC / driver here: eager's kernel
        return None
    grid = (max(1, min((vectors + THREADS - 1) // THREADS, 1 << 20)), 1, 1)
    args = [x.data_ptr(), y.data_ptr(), vectors, c // v, h, w, oh, ow, k[0], k[1], s[0], s[1], p[0], p[1], d[0], d[1]]
    if pos is not None:
        args.append(pos.data_ptr())
    kernel.launch(grid, (THREADS, 1, 1), torch.cuda.current_stream(x.device).cuda_stream, *args)
    return y


class _MaxPool2dTrain(torch.autograd.Function):
    """``max_pool2d`` under grad: the forward kernel with window positions (a byte per output
    element where eager keeps an int64 index), and a gather backward. Eager's kernels for
    resnet50's stem pool at batch 32, bf16 (H200): 114 us forward with indices, 237 us backward
    (``logs/prof-race-row-cuda-H200-r50train-s66.txt``)."""

    @staticmethod
    def forward(ctx, x, geometry):
        k, s, p, oh, ow = geometry
        pos = torch.empty((x.shape[0], oh, ow, x.shape[1]), dtype=torch.uint8, device=x.device)
        y = _forward(x, k, s, p, (1, 1), oh, ow, pos)
        assert y is not None, "max_pool2d_train: the forward kernel was loaded before"
        ctx.save_for_backward(pos)
        ctx.geometry, ctx.x_shape, ctx.x_dtype = geometry, x.shape, x.dtype
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, gy):
        (pos,) = ctx.saved_tensors
        k, s, p, oh, ow = ctx.geometry
        gy = gy.to(ctx.x_dtype).contiguous(memory_format=torch.channels_last)
        n, c, h, w = ctx.x_shape
        gx = torch.empty(ctx.x_shape, dtype=ctx.x_dtype, device=gy.device, memory_format=torch.channels_last)
        v = min(_vector(gy), _vector(gx))
        vectors = n * h * w * (c // v)
        wide = max(vectors * v, gy.numel()) >= 2 ** 31 - 1
        kernel = _kernel(ctx.x_dtype, v, wide, gy.device.index or 0, "bwd")
        grid = (max(1, min((vectors + THREADS - 1) // THREADS, 1 << 20)), 1, 1)
        kernel.launch(grid, (THREADS, 1, 1), torch.cuda.current_stream(gy.device).cuda_stream,
                      gy.data_ptr(), pos.data_ptr(), gx.data_ptr(), vectors, c // v, h, w, oh, ow,
                      k[0], k[1], s[0], s[1], p[0], p[1])
        return gx, None
