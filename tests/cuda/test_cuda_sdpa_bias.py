"""Boolean attention masks converted once on CUDA (passes/sdpa_bias.py): the bias is bitwise the
one SDPA's chosen backend makes (cuDNN: -65504 in fp16 / bf16; memory-efficient: -inf in
float32), so outputs and gradients equal eager's exactly, rows of no key included; a steady call
runs none of eager's per-layer conversion kernels; a new sequence length keeps the results."""
import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.config import config

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


class Layers(torch.nn.Module):
    def __init__(self, d=256, heads=4, layers=3):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.ModuleList([torch.nn.Linear(d, 3 * d) for _ in range(layers)])

    def forward(self, x, keep):
        n, t, d = x.shape
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()[None, None] & keep[:, None, None, :]
        for qkv in self.qkv:
            q, k, v = qkv(x).view(n, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
            x = x + F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2).reshape(n, t, d)
        return x


def _inputs(n, t, dtype):
    torch.manual_seed(1)
    keep = torch.ones(n, t, dtype=torch.bool, device="cuda")
    keep[1, t // 3:] = False
    keep[-1] = False
    return torch.randn(n, t, 256, device="cuda", dtype=dtype), keep


def _same(a, b):
    return torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0))


def _kernels(fn):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as p:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in p.events() if e.device_type == torch.autograd.DeviceType.CUDA]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_outputs_are_eagers_exactly_and_the_conversion_runs_once(dtype):
    torch.manual_seed(0)
    m = Layers().cuda().to(dtype)
    sf = graphfuser.script(m)
    with torch.no_grad(), config.override(disable=["fallback", "cuda_graphs"]):
        for n, t in ((4, 128), (4, 128), (4, 128), (4, 128), (3, 96), (4, 128)):
            x, keep = _inputs(n, t, dtype)
            assert _same(sf(x, keep), m(x, keep)), (n, t)
        ours, eager = _kernels(lambda: sf(x, keep)), _kernels(lambda: m(x, keep))
    # (the model's own torch.ones of the causal mask is a bool fill in both)
    fills = [k for k in eager if "FillFunctor" in k and "FillFunctor<bool>" not in k]
    assert not [k for k in ours if "FillFunctor" in k and "FillFunctor<bool>" not in k], ours
    if dtype != torch.float32:      # cuDNN's conversion: two fills a layer in eager
        assert len(fills) >= 3, eager
    assert "graphfuser::sdpa_bias_check" in str(sf._optimized)


def test_gradients_are_eagers_exactly():
    torch.manual_seed(0)
    m, ref = Layers().cuda().bfloat16(), Layers().cuda().bfloat16()
    ref.load_state_dict(m.state_dict())
    sf = graphfuser.script(m)
    x, keep = _inputs(4, 128, torch.bfloat16)
    with config.override(disable=["fallback"]):
        for _ in range(4):
            xs = [x.clone().requires_grad_() for _ in range(2)]
            outs = [fn(xi, keep) for fn, xi in zip((sf, ref), xs)]
            for mod, o in zip((m, ref), outs):
                mod.zero_grad(set_to_none=True)
                o.float().square().sum().backward()
            assert _same(outs[0], outs[1])
            assert _same(xs[0].grad, xs[1].grad)
            for (name, p), q in zip(m.named_parameters(), ref.parameters()):
                assert _same(p.grad, q.grad), name


def test_through_the_torch_compile_backend_under_autocast():
    from graphfuser.frontend.dynamo import graphfuser_backend

    torch.manual_seed(0)
    m = Layers().cuda()
    torch._dynamo.reset()
    f = torch.compile(m, backend=graphfuser_backend)
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16), config.override(disable=["fallback"]):
        for _ in range(5):
            x, keep = _inputs(4, 128, torch.float32)
            got, want = f(x, keep), m(x, keep)
            torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2, equal_nan=True)
    assert "graphfuser::sdpa_bias_check" in str(graphfuser.last_executed_optimized_graph())
