"""The batch-norm backward group of a ResNet block as a function: its kernels and its accuracy."""
import sys
import torch
import graphfuser


def bwd(x, s0, s1, s2, g, w):
    xh = ((x - s0) - s1) * s2
    gw = g * w
    m1 = gw.mean([0, 2, 3], True)
    m2 = (gw * xh).mean([0, 2, 3], True)
    dx = s2 * ((gw - m1) - xh * m2)
    return dx, (g * xh).sum([0, 2, 3]), g.sum([0, 2, 3])


n, c, s = (int(a) for a in (sys.argv[1:] or [8, 64, 28]))
torch.manual_seed(0)
x = torch.randn(n, c, s, s) * 2 + 1
mean = x.mean([0, 2, 3], True)
args = (x, x[:1, :, :1, :1].clone(), mean - x[:1, :, :1, :1], x.var([0, 2, 3], keepdim=True).rsqrt(),
        torch.randn(n, c, s, s) + 0.3, torch.rand(c, 1, 1) + 0.5)
sf = graphfuser.script(bwd)
for _ in range(4):
    out = sf(*args)
ref = bwd(*[a.double() for a in args])
eag = bwd(*args)
for k, (o, r, e) in enumerate(zip(out, ref, eag)):
    de, df = float((e.double() - r).abs().max()), float((o.double() - r).abs().max())
    print(f"out{k}: eager {de:.3e} fused {df:.3e} ratio {df / max(de, 1e-30):.2f}")
