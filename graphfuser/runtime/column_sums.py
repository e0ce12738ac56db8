"""The last step of a CUDA row kernel with column sums: each column's slots added up.

A row kernel that also sums columns over its rows (``passes/column_sums.py``: a layer norm
backward's weight and bias gradients) leaves one slot of partials per block, ``[slots, nr]``
for each column sum, in a workspace kept per stream (``scratch.py``). This kernel adds every
column's slots in a fixed order (deterministic: the same values every run) and writes the
outputs in their own dtypes (one each: a ViT block's layer norm gradients in float32 beside its
projection's bias gradient rounded to bf16), for up to ``MAX_OUTPUTS`` column sums at once.

A launch has ``ceil(nr / 32)`` blocks of 32 columns per output, 24-32 for a transformer's
width; each lane keeps four slots' loads in flight (four accumulators, added in a fixed order),
not one. The kernel took 8.5 us per call in Llama's bf16 training step on an H200 with one load
in flight (17 calls; logs/prof-cuda-H200-train-gpt2-llama-bf16.txt). Where that leaves SMs idle
(vit_small's three 384-wide sums: 36 blocks on 132 SMs, 6.5 us a call over 2112 slots), blocks
take 8 columns and 128 slot lanes (``launch_shape``): a 32-byte sector a slot row, four times the
blocks.

It replaces what the launcher did with torch ops after the row kernel: ``torch.zeros`` for the
partials, a ``sum`` over the slots, a ``view`` per output and a cast: four to six calls into
torch against one launch. Blocks of ``blockDim.x`` columns x ``blockDim.y`` slot lanes (a power
of two); each lane adds every ``blockDim.y``-th slot, then the lanes are added pairwise in a
fixed tree: the same sums every run of a shape.
"""
from __future__ import annotations

import functools
from typing import Sequence, Union

import torch

from ..codegen.dialects import CUDA, STORAGE_TYPES, STORE_CONVERT

MAX_OUTPUTS = 4      # column sums one launch finalizes (more: the launcher's torch ops)

_TEMPLATE = r"""
extern "C" __global__ void __launch_bounds__(1024) {name}(const {acc}* __restrict__ w, long long span,
    long long slots, long long nr, {params}) {{
  __shared__ {acc} lanes[1024];
  const unsigned int bx = blockDim.x, x = threadIdx.x, y = threadIdx.y;
  const long long c = (long long)blockIdx.x * bx + x;
  const {acc}* p = w + blockIdx.y * span;
  {acc} v0 = ({acc})0, v1 = ({acc})0, v2 = ({acc})0, v3 = ({acc})0;
  if (c < nr) {{
    const long long step = blockDim.y;
    long long s = y;
    for (; s + 3 * step < slots; s += 4 * step) {{      // four loads in flight per thread
      v0 += p[s * nr + c];
      v1 += p[(s + step) * nr + c];
      v2 += p[(s + 2 * step) * nr + c];
      v3 += p[(s + 3 * step) * nr + c];
    }}
    for (; s < slots; s += step) v0 += p[s * nr + c];
  }}
  lanes[y * bx + x] = (v0 + v1) + (v2 + v3);
  __syncthreads();
  for (unsigned int h = blockDim.y >> 1; h > 0; h >>= 1) {{     // blockDim.y: a power of two
    if (y < h) lanes[y * bx + x] += lanes[(y + h) * bx + x];
    __syncthreads();
  }}
  if (y == 0 && c < nr) {{
    const {acc} t = lanes[x];
{stores}
  }}
}}
"""


def launch_shape(nr: int, outputs: int, slots: int, sms: int) -> tuple[tuple, tuple]:
    """Grid and block of a finalizing launch: 32 columns a block, or 8 where blocks of 32 would
    leave SMs idle; 8 slot lanes for fewer than 32 slots, else a block of 1024 threads."""
    cw = 32 if (nr + 31) // 32 * outputs >= sms else 8
    return ((nr + cw - 1) // cw, outputs, 1), (cw, 1024 // cw if slots >= 32 else 8, 1)


def supported(acc: torch.dtype, out: torch.dtype) -> bool:
    """Whether partials of dtype ``acc`` can be finalized into outputs of dtype ``out``."""
    return acc in (torch.float32, torch.float64, torch.int64) and out in STORAGE_TYPES and out is not torch.bool


def _outs(out: Union[torch.dtype, Sequence[torch.dtype]]) -> tuple[torch.dtype, ...]:
    """The outputs' dtypes, one per launch row (a single dtype: every output's)."""
    outs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
    if not 1 <= len(outs) <= MAX_OUTPUTS:
        raise ValueError(f"column sums finalize 1 to {MAX_OUTPUTS} outputs, not {len(outs)}")
    return outs


def _short(dtype: torch.dtype) -> str:
    return str(dtype).split(".")[-1]


def kernel_name(acc: torch.dtype, out: Union[torch.dtype, Sequence[torch.dtype]]) -> str:
    outs = _outs(out)
    kinds = outs[:1] if len(set(outs)) == 1 else outs
    return f"gf_column_sums_{_short(acc)}_{'_'.join(_short(o) for o in kinds)}"


def _store(out: torch.dtype) -> str:
    if out in STORE_CONVERT:        # fp16 / bf16 outputs: rounded from float, as the cast rounds
        return STORE_CONVERT[out].format("(float)t")
    return f"({STORAGE_TYPES[out]})t"


def source(acc: torch.dtype, out: Union[torch.dtype, Sequence[torch.dtype]]) -> str:
    """The CUDA source of the finalizing kernel for partials ``acc`` and outputs ``out`` (a
    dtype for every output, or one per output)."""
    outs = _outs(out)
    types = [outs[min(i, len(outs) - 1)] for i in range(MAX_OUTPUTS)]
    params = ", ".join(f"{STORAGE_TYPES[t]}* o{i}" for i, t in enumerate(types))
    if len(set(outs)) == 1:
        stores = (f"    {STORAGE_TYPES[outs[0]]}* o = blockIdx.y == 0 ? o0 : blockIdx.y == 1 ? o1 : "
                  f"blockIdx.y == 2 ? o2 : o3;\n    o[c] = {_store(outs[0])};")
    else:
        stores = "\n".join(f"    {'if' if i == 0 else 'else if'} (blockIdx.y == {i}) o{i}[c] = {_store(t)};"
                           for i, t in enumerate(outs))
    body = _TEMPLATE.format(name=kernel_name(acc, outs), acc=STORAGE_TYPES[acc], params=params, stores=stores)
    return CUDA.prelude() + "\n" + body


@functools.lru_cache(maxsize=None)
def column_sum_kernel(acc: torch.dtype, out: Union[torch.dtype, tuple[torch.dtype, ...]], device_index: int):
    """The compiled finalizing kernel on ``device_index`` (compiled once, cached on disk)."""
    from . import cuda_driver, nvrtc

    name = kernel_name(acc, out)
    cubin = nvrtc.compile_cubin(source(acc, out), name, cuda_driver.device_arch(device_index))
    return cuda_driver.CudaKernel(cubin, name, device_index, ["ptr", "i64", "i64", "i64"] + ["ptr"] * MAX_OUTPUTS)
