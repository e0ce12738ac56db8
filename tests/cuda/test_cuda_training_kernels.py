"""On the GPU, the training cases whose kernels changed shape: RMSNorm's backward (one row kernel
writing dx and accumulating the weight gradient's column sums per block of rows), group_norm
with num_groups > 1 (an instance norm of the grouped view), softmax + mask + dropout in one kernel
each way; gradients against eager in the dtypes the training benchmark uses, and kernel counts."""

import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.config import config
from graphfuser.tools import bench_train as bt
from graphfuser.tools.zoo_train import fused_groups

pytestmark = pytest.mark.cuda

TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.bfloat16: dict(rtol=5e-2, atol=5e-2),
       torch.float16: dict(rtol=1e-2, atol=1e-2)}


def _train(fn, module, args, grad):
    """Gradients of ``args`` (and of ``module``'s parameters) through ``fn`` after profiling,
    with the fallback raising."""
    with config.override(disable=["fallback"]):
        for _ in range(4):
            for t in list(args) + (list(module.parameters()) if module is not None else []):
                t.grad = None
            fn(*args).backward(grad)
    out = [a.grad.clone() for a in args]
    if module is not None:
        out += [p.grad.clone() for p in module.parameters()]
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows, cols", [(64, 128), (1000, 4096), (3, 5000), (4097, 257)])
def test_rmsnorm_training(dtype, rows, cols):
    torch.manual_seed(0)
    mod = bt.RMSNorm(cols).cuda()
    with torch.no_grad():
        mod.weight.uniform_(0.5, 1.5)
    x = torch.randn(rows, cols, device="cuda").to(dtype).requires_grad_()
    grad = torch.randn(rows, cols, device="cuda")
    ref = _train(mod, mod, [x], grad)
    sf = graphfuser.script(mod)
    got = _train(sf, mod, [x], grad)
    for g, r in zip(got, ref):
        torch.testing.assert_close(g.float(), r.float(), **TOL[dtype])
    assert fused_groups(sf) == (1, 1)      # dx and the weight's column sum in one kernel


class GroupNormSiLU(torch.nn.Module):
    def __init__(self, groups: int, channels: int) -> None:
        super().__init__()
        self.gn = torch.nn.GroupNorm(groups, channels)

    def forward(self, x):
        return F.silu(self.gn(x * 1.5))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape, groups", [((8, 32, 14, 14), 8), ((2, 64, 7, 9), 4), ((4, 6, 3, 5), 3)])
@pytest.mark.parametrize("channels_last", [False, True])
def test_group_norm_groups_training(dtype, shape, groups, channels_last):
    torch.manual_seed(0)
    fn = GroupNormSiLU(groups, shape[1]).cuda().to(dtype)   # a module: a closure over one is a PythonOp
    mod = fn.gn
    x = torch.randn(*shape, device="cuda").to(dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    x.requires_grad_()
    grad = torch.randn(*shape, device="cuda").to(dtype)
    ref = _train(fn, mod, [x], grad)
    sf = graphfuser.script(fn)
    got = _train(sf, mod, [x], grad)
    for k, (g, r) in enumerate(zip(got, ref)):
        tol = dict(TOL[dtype])
        if k > 0 and dtype == torch.bfloat16:   # weight / bias: per-channel sums of N*H*W terms,
            tol["atol"] = max(tol["atol"], 2 * 2.0 ** -7 * float(r.abs().max()))   # 2 bf16 ulps
        torch.testing.assert_close(g.float(), r.float(), **tol)
    fwd, bwd = fused_groups(sf)
    assert fwd >= 1 and bwd >= 1


def test_softmax_mask_dropout_benchmark_case_kernel_counts():
    """The benchmark's softmax + mask + dropout: one kernel each way, no Philox draw on the host."""
    x = torch.randn(8, 64, 512, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    m = torch.rand(64, 512, device="cuda") > 0.9
    sf = graphfuser.script(bt.softmax_mask_dropout)
    with config.override(disable=["fallback"]):
        for _ in range(4):
            sf(x, m).float().sum().backward()
    assert fused_groups(sf) == (1, 1)
    out = sf(x, m)
    keep = (out != 0)[:, ~m].float().mean().item()       # masked entries are 0 before the dropout
    assert abs(keep - 0.9) < 0.01
