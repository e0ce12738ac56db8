"""Cases of the column-sum kernel form (a norm backward whose weight / bias gradients are
accumulated per block of rows by the row kernel), shared by the CPU tests
(``test_column_sums.py``) and the GPU ones (``tests/cuda/test_cuda_column_sums.py``)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.codegen.reduction.lower import ReductionKernel
from graphfuser.config import config
from graphfuser.tools import bench_train as bt


class LayerNormFn(torch.nn.Module):
    """``F.layer_norm`` with a weight and a bias (decomposed: a row kernel plus two column sums)."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(d))
        self.bias = torch.nn.Parameter(torch.randn(d))

    def forward(self, x):
        return F.layer_norm(x, [x.size(-1)], self.weight, self.bias, 1e-5)


class RMSNormFn(torch.nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(d))

    def forward(self, x):
        return F.rms_norm(x, [x.size(-1)], self.weight, 1e-6)


class LayerNormFullPrecision(LayerNormFn):
    """Layer norm in fp32 of reduced-precision tensors, as CUDA autocast writes it
    (``_autocast_to_full_precision`` of the input and parameters): the backward's column sums
    feed casts back to the parameters' dtype inside the group."""

    def forward(self, x):
        y = F.layer_norm(x._autocast_to_full_precision(True, True), [x.size(-1)],
                         self.weight._autocast_to_full_precision(True, True),
                         self.bias._autocast_to_full_precision(True, True), 1e-5)
        return y.type_as(x) * 2.0


MODULES = {
    "rmsnorm_bench": lambda d: bt.RMSNorm(d),          # x.float() ... .to(x.dtype) * weight (fp32)
    "rms_norm": RMSNormFn,
    "layer_norm": LayerNormFn,
    "nn.LayerNorm": lambda d: torch.nn.LayerNorm(d),
    "layer_norm_full_precision": LayerNormFullPrecision,
}

# a lone layer norm under grad runs eagerly (passes/lone_groups.py: lone_under_grad); these cases test its
# fused backward kernel, so they fuse it as single-node mode does
LONE = {"layer_norm", "nn.LayerNorm"}

TOL = {
    torch.float64: dict(rtol=1e-7, atol=1e-9),
    torch.float32: dict(rtol=1e-4, atol=1e-4),
    # bf16 / fp16 gradients are rounded once by eager and once by the kernel: a few ulps of a
    # sum of many terms
    torch.float16: dict(rtol=2e-2, atol=2e-2),
    torch.bfloat16: dict(rtol=8e-2, atol=8e-2),
}


def assert_grads_close(got, ref, dtype) -> None:
    """Each gradient against eager's. In fp16 / bf16 the parameter gradients are sums of many
    rounded terms (eager rounds its own way, as graphfuser did before this kernel form): the
    absolute tolerance scales with the gradient's largest magnitude."""
    for a, b in zip(got, ref):
        tol = dict(TOL[dtype])
        if dtype in (torch.float16, torch.bfloat16):
            tol["atol"] = max(tol["atol"], 2e-2 * b.abs().max().item())
        torch.testing.assert_close(a, b, **tol)


def make_input(shape, dtype, device, kind: str = "randn") -> torch.Tensor:
    if kind == "constant_rows":     # every row constant: zero variance (layer norm), one rms value
        x = torch.arange(shape[0], dtype=torch.float64).reshape(-1, 1).expand(shape) * 0.5 - 3.0
    else:
        x = torch.randn(shape, dtype=torch.float64) * 2.0 + 0.5
    return x.to(device=device, dtype=dtype).contiguous().requires_grad_(True)


def train_grads(name: str, shape, dtype, device, kind: str = "randn", calls: int = 4):
    """(graphfuser's gradients of the input and parameters, eager's, the scripted module): the
    module in ``dtype`` (the bench's RMSNorm keeps an fp32 weight), the fallback raising."""
    torch.manual_seed(0)
    m = MODULES[name](shape[-1]).to(device)
    if name != "rmsnorm_bench":
        m = m.to(dtype)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn_like(p))
    x = make_input(shape, dtype, device, kind)
    g = torch.randn(shape, dtype=torch.float64).to(device=device, dtype=m(x).dtype)
    sf = graphfuser.script(m)
    with config.override(disable=["fallback"], single_node_mode=name in LONE):
        for _ in range(calls):
            m.zero_grad()
            x.grad = None
            sf(x).backward(g)
    got = [x.grad.clone()] + [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    x.grad = None
    m(x).backward(g)
    ref = [x.grad.clone()] + [p.grad.clone() for p in m.parameters()]
    return got, ref, sf


def column_kernels(sf) -> list[ReductionKernel]:
    """The lowered kernels of every backward group of ``sf`` that hold column sums."""
    from graphfuser.autodiff.function import DifferentiableGroup
    from graphfuser.codegen.reduction.lower import lower_reduction_group
    from graphfuser.ops.axes import needs_axes

    out = []
    for r in sf._runners.values():
        if not isinstance(r, DifferentiableGroup):
            continue
        for n in r.backward._optimized.all_nodes():
            if n.kind.endswith("FusionGroup") and needs_axes(n.subgraph.block.nodes):
                k, _ = lower_reduction_group(n.subgraph)
                if k.has_columns():
                    out.append(k)
    return out


def backward_groups(sf) -> int:
    from graphfuser.autodiff.function import DifferentiableGroup

    return sum(1 for r in sf._runners.values() if isinstance(r, DifferentiableGroup)
               for n in r.backward._optimized.all_nodes() if n.kind.endswith("FusionGroup"))
