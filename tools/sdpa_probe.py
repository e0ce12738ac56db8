"""SDPA's conversion of a boolean mask, probed on a GPU: the backend it chooses for a boolean mask
and for candidate additive biases, which bias gives a bitwise equal result (the fill eager's
backend writes for a masked-out position), the kernels each call runs and its time
(``logs/sdpa-bias-probe-cuda-H200.log``; ``graphfuser/passes/sdpa_bias.py`` relies on it).

    PYTHONPATH=. python3 tools/sdpa_probe.py
"""
import torch, time
import torch.nn.functional as F
from torch.profiler import profile, ProfilerActivity
print(torch.__version__, torch.backends.cudnn.version())
dev = "cuda"
torch.manual_seed(0)
for (B, H, S, D, dt) in [(8, 12, 512, 64, torch.bfloat16), (8, 32, 512, 64, torch.bfloat16), (8, 12, 512, 64, torch.float16), (8, 12, 512, 64, torch.float32)]:
    q = torch.randn(B, H, S, D, device=dev, dtype=dt)
    k = torch.randn_like(q); v = torch.randn_like(q)
    causal = torch.ones(S, S, device=dev, dtype=torch.bool).tril()
    pad = torch.ones(B, S, device=dev, dtype=torch.bool); pad[0, 400:] = False; pad[1, :] = False
    mask = causal[None, None] & pad[:, None, None, :]
    cands = {
        "where_-inf": torch.where(mask, 0.0, float("-inf")).to(dt),
        "zeros_masked_fill_-inf": torch.zeros(mask.shape, device=dev, dtype=dt).masked_fill(~mask, float("-inf")),
        "finfo_min": torch.where(mask, 0.0, torch.finfo(dt).min).to(dt),
        "-65504": torch.where(mask, 0.0, -65504.0).to(dt),
    }
    print(f"== {B}x{H}x{S}x{D} {dt}")
    print("choice bool", torch._fused_sdp_choice(q, k, v, mask), {n: torch._fused_sdp_choice(q, k, v, m) for n, m in cands.items()})
    ref = F.scaled_dot_product_attention(q, k, v, mask)
    for n, m in cands.items():
        o = F.scaled_dot_product_attention(q, k, v, m)
        same = torch.equal(torch.nan_to_num(o, 7.0), torch.nan_to_num(ref, 7.0))
        print(f"  {n:24s} bitwise={same} maxdiff={(o.float()-ref.float()).nan_to_num(0).abs().max().item():.3g} nan_ref={ref.isnan().sum().item()} nan={o.isnan().sum().item()}")
    def run(m, n=50):
        for _ in range(5): F.scaled_dot_product_attention(q, k, v, m)
        torch.cuda.synchronize(); t = time.perf_counter()
        for _ in range(n): F.scaled_dot_product_attention(q, k, v, m)
        torch.cuda.synchronize(); return (time.perf_counter() - t) / n * 1e6
    for n, m in [("bool", mask), ("where_-inf", cands["where_-inf"]), ("-65504", cands["-65504"])]:
        print(f"  time {n}: {run(m):.1f} us")
        with profile(activities=[ProfilerActivity.CUDA]) as p:
            F.scaled_dot_product_attention(q, k, v, m); torch.cuda.synchronize()
        print("    kernels:", [e.name[:90] for e in p.events() if e.device_type == torch.autograd.DeviceType.CUDA])
    # backward too for bf16
    if dt == torch.bfloat16 and H == 12:
        for n, m in [("bool", mask), ("where_-inf", cands["where_-inf"])]:
            qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
            o = F.scaled_dot_product_attention(qq, kk, vv, m); g = torch.randn_like(o)
            with profile(activities=[ProfilerActivity.CUDA]) as p:
                o.backward(g); torch.cuda.synchronize()
            print(f"  bwd {n} kernels:", [e.name[:70] for e in p.events() if e.device_type == torch.autograd.DeviceType.CUDA])
            if n == "bool": gb = (qq.grad, kk.grad, vv.grad)
            else: print("  bwd grads bitwise:", [torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0)) for a, b in zip(gb, (qq.grad, kk.grad, vv.grad))])
