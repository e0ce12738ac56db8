"""The inputs of a fuzz case, built from its specs: values by fill, dtype, layout (dense,
transposed, stepped slice, stride-0 expansion, channels-last), deterministic in the case's seed;
the case's source loaded as a module; the ``torch.autocast`` context its calls run in."""
from __future__ import annotations

import contextlib
import importlib.util
import math
import os
import sys
from typing import Any

import torch

DTYPE = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
         "float64": torch.float64, "int64": torch.int64, "int32": torch.int32, "int8": torch.int8,
         "uint8": torch.uint8, "bool": torch.bool}
# signed zeros, infinities, NaN, huge and tiny values: the "edge" fill mixes them with ordinary ones
EDGE_VALUES = (0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0, 0.5, 1e4, -1e4, 1e-30, 65504.0, 3e38)


def load(source: str, path: str) -> Any:
    """Write ``source`` to ``path`` and import its ``fn`` (TorchScript needs a real file)."""
    with open(path, "w") as f:
        f.write(source)
    name = "gfcase_" + os.path.basename(path)[:-3].replace("-", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod.fn


def _values(shape: list, fill: str, g: torch.Generator) -> torch.Tensor:
    if fill == "positive":
        return torch.rand(shape, generator=g, dtype=torch.float64) + 0.1
    if fill == "constant_rows":
        base = torch.randint(1, 4, shape[:-1] + [1] if shape else [], generator=g).double() / 3.0
        return base.expand(shape).clone()
    if fill == "huge_mean":
        return 1e4 + torch.randn(shape, generator=g, dtype=torch.float64) * 1e-2
    if fill == "ints":
        return torch.randint(-5, 6, shape, generator=g).double()
    if fill == "zeros":
        return torch.zeros(shape, dtype=torch.float64)
    t = torch.randn(shape, generator=g, dtype=torch.float64)
    if fill == "edge" and t.numel():
        # signed zeros, infinities, NaN, huge and tiny values among ordinary ones
        edges = torch.tensor(EDGE_VALUES, dtype=torch.float64)
        pick = torch.randint(0, 2 * len(EDGE_VALUES), shape, generator=g)
        t = torch.where(pick < len(EDGE_VALUES), edges[pick.clamp(max=len(EDGE_VALUES) - 1)], t)
    if fill == "nan_inf" and t.numel():
        u = torch.rand(shape, generator=g, dtype=torch.float64)
        t = torch.where(u < 0.1, float("nan"), torch.where(u > 0.95, float("inf") * t.sign(), t))
    return t


def _convert(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if dtype.is_floating_point:
        return t.to(dtype)
    if dtype == torch.bool:
        return t > 0
    t = torch.nan_to_num(t * 3, nan=0.0, posinf=100.0, neginf=-100.0).round()
    if dtype == torch.uint8:
        t = t.abs()
    lim = {torch.int8: 127, torch.uint8: 255}.get(dtype, 10 ** 6)
    return t.clamp(-lim, lim).to(dtype)


def make_tensor(spec: dict, batch: int, flip: bool, seed: int, device: str, ref: bool = False) -> torch.Tensor:
    """The input tensor of ``spec`` for one call (deterministic in ``seed``)."""
    shape = [batch if s == "B" else s for s in spec["shape"]]
    layout = spec["layout"]
    if flip:
        layout = "transposed" if layout == "dense" else "dense"
    r = len(shape)
    g = torch.Generator().manual_seed(seed)
    dtype = DTYPE[spec["dtype"]]
    def base(shape: list) -> torch.Tensor:   # values drawn on the CPU, laid out on the device
        return _convert(_values(shape, spec["fill"], g), dtype).to(device)

    if layout == "transposed" and r >= 2:
        t = base(shape[:-2] + [shape[-1], shape[-2]]).transpose(-1, -2)
    elif layout == "sliced" and r >= 1:
        t = base(shape[:-1] + [2 * shape[-1]])[..., ::2]
    elif layout == "expanded" and r >= 1:
        t = base([1] + shape[1:]).expand(shape)
    elif layout == "channels_last" and r == 4:
        t = base(shape).contiguous(memory_format=torch.channels_last)
    else:
        t = base(shape)
    if ref and t.is_floating_point():
        t = t.to(torch.float64)
    elif spec.get("requires_grad") and not ref:
        t.requires_grad_(True)
    return t


def make_args(case: dict, call: int, device: str, ref: bool = False) -> list:
    batch, flip = case["calls"][call]
    args = []
    for k, spec in enumerate(case["inputs"]):
        if spec["kind"] == "tensor":
            args.append(make_tensor(spec, batch, flip, case["seed"] * 1000 + call * 37 + k, device, ref))
        else:
            args.append(spec["values"][0 if call < 4 else 1])
    return args


def _flat(out: Any) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def autocast_of(case: dict, device: str) -> Any:
    """The ``torch.autocast`` context a case's calls run in (its ``autocast`` dtype), or a no-op."""
    dt = case.get("autocast")
    if not dt:
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=DTYPE[dt])
