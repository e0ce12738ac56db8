"""Layer-norm / RMSNorm backward on the CPU: weight and bias gradients (column sums over the rows)
against float64, beside eager's."""
import sys
import torch
import torch.nn.functional as F
import graphfuser


def ln(x, w, b):
    return F.layer_norm(x * 1.5, [x.shape[-1]], w, b, 1e-5) * 2.0


rows, h = (int(a) for a in (sys.argv[1:] or [32768, 256]))
torch.manual_seed(0)
x = (torch.randn(rows, h) * 2 + 3).requires_grad_()
w = (torch.rand(h) + 0.5).requires_grad_()
b = torch.randn(h).requires_grad_()
gy = torch.randn(rows, h) + 0.5
sf = graphfuser.script(ln)
for _ in range(6):
    gf = torch.autograd.grad(sf(x, w, b), [x, w, b], gy)
ge = torch.autograd.grad(ln(x, w, b), [x, w, b], gy)
x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, w, b))
g64 = torch.autograd.grad(ln(x64, w64, b64), [x64, w64, b64], gy.double())
for n, a, e, r in zip(("x", "w", "b"), gf, ge, g64):
    de, df = float((e.double() - r).abs().max()), float((a.double() - r).abs().max())
    print(f"grad {n}: eager {de:.3e} fused {df:.3e} ratio {df / max(de, 1e-30):.2f}")
for r in sf._runners.values():
    bw = getattr(r, "backward", None)
    if bw is not None and getattr(bw, "_optimized", None) is not None:
        print([n.kind for n in bw._optimized.all_nodes() if "Fusion" in n.kind or "aten" in n.kind])
print(type(sf), list(sf._runners.values()))
print(graphfuser.last_executed_optimized_graph())
