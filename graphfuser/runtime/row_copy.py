"""A copy of rows into rows of another pitch: a gradient into the padded layout a replayed
backward graph reads.

A padded GEMM's result (``passes/gemm_pad.py``) is a view ``base[..., :n]`` whose rows start
16 bytes apart or more; a replayed training step copies its incoming gradient into such a view
(``cuda_graphs_train.py``). Where the gradient is contiguous with odd rows, ``Tensor.copy_``
takes its generic strided kernel: an index division per element and one 2-byte store each.
GPT-2's logits gradient, bf16 [4096, 50257] into rows of 50264, took 474 us of its training
step on an H200 that way (logs/prof-race-row-cuda-H200-gpt2-train-k.txt).

Here each thread copies ``16 / itemsize`` adjacent elements of one row: as many scalar loads,
all in flight at once (the source row starts anywhere), then one 16-byte store into the
destination row (which starts 16-byte aligned); the row's last partial vector element by
element. Rows go to ``blockIdx.y``, so there is no index division at all.

``copy_rows(dst, src)`` takes that path where it applies and returns False otherwise (the
caller then copies with ``copy_``): both on one CUDA device, one dtype of 2 or 4 bytes, the same
shape, unit stride along the last dim, leading dims that flatten into rows of one pitch each,
the destination's pitch and pointer 16-byte aligned, the source's not (an aligned source is
``copy_``'s vectorized case already).
"""
from __future__ import annotations

import functools
from typing import Optional

import torch

THREADS = 256
_WORD = {2: "unsigned short", 4: "unsigned int"}

_TEMPLATE = r"""
extern "C" __global__ void __launch_bounds__({threads}) {name}(const {w}* __restrict__ s,
    {w}* __restrict__ d, long long n, long long sp, long long dp) {{
  const long long so = (long long)blockIdx.y * sp, dof = (long long)blockIdx.y * dp;
  for (long long c = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * {v}; c < n;
       c += (long long)gridDim.x * blockDim.x * {v}) {{
    if (c + {v} <= n) {{
      union {{ uint4 q; {w} e[{v}]; }} u;
      #pragma unroll
      for (int k = 0; k < {v}; ++k) u.e[k] = s[so + c + k];
      *reinterpret_cast<uint4*>(d + dof + c) = u.q;
    }} else {{
      for (long long k = c; k < n; ++k) d[dof + k] = s[so + k];
    }}
  }}
}}
"""


def kernel_name(itemsize: int) -> str:
    return f"gf_row_copy_{itemsize * 8}"


def source(itemsize: int) -> str:
    return _TEMPLATE.format(threads=THREADS, name=kernel_name(itemsize), w=_WORD[itemsize], v=16 // itemsize)


@functools.lru_cache(maxsize=None)
def _kernel(itemsize: int, device_index: int):
    from . import cuda_driver, nvrtc

    name = kernel_name(itemsize)
    cubin = nvrtc.compile_cubin(source(itemsize), name, cuda_driver.device_arch(device_index))
    return cuda_driver.CudaKernel(cubin, name, device_index, ["ptr", "ptr", "i64", "i64", "i64"])


def rows(t: torch.Tensor) -> Optional[tuple[int, int, int]]:
    """(rows, row length, pitch) of ``t`` viewed as rows of its last dim, or None where its
    leading dims do not flatten into rows of one pitch or its last dim is not unit-strided."""
    if t.dim() == 0 or t.stride(-1) != 1:
        return None
    n = t.shape[-1]
    if t.dim() == 1:
        return 1, n, n
    pitch = t.stride(-2)
    r = t.shape[-2]
    for i in range(t.dim() - 3, -1, -1):
        if t.shape[i] != 1 and t.stride(i) != t.stride(i + 1) * t.shape[i + 1]:
            return None
        r *= t.shape[i]
    return r, n, pitch


def copy_rows(dst: torch.Tensor, src: torch.Tensor) -> bool:
    """``dst.copy_(src)`` by the row kernel where it applies (see module doc); False otherwise."""
    item = dst.element_size()
    if (item not in _WORD or dst.dtype != src.dtype or dst.shape != src.shape or not dst.is_cuda
            or src.device != dst.device or dst.numel() == 0 or dst.is_complex()):
        return False
    d, s = rows(dst), rows(src)
    if d is None or s is None:
        return False
    r, n, dp = d
    sp = s[2]
    v = 16 // item
    if dp % v or dst.data_ptr() % 16 or (sp % v == 0 and src.data_ptr() % 16 == 0) or r >= 65536:
        return False
    kernel = _kernel(item, dst.device.index or 0)
    per_block = THREADS * v
    grid = (min((n + per_block - 1) // per_block, 65535), r, 1)
    kernel.launch(grid, (THREADS, 1, 1), torch.cuda.current_stream(dst.device).cuda_stream,
                  src.data_ptr(), dst.data_ptr(), n, sp, dp)
    return True
