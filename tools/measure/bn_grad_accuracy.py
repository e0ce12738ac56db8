"""Per-parameter gradient distance from float64 of eager and graphfuser, ResNet bottleneck in training."""
import copy
import sys
import os
import torch
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "models"))
import graphfuser
from corpus import Bottleneck

torch.manual_seed(0)
c, mid, b, s = (int(a) for a in (sys.argv[1:] or [256, 64, 8, 28]))
m = Bottleneck(c, mid).train()
for mod in m.modules():
    if isinstance(mod, torch.nn.BatchNorm2d):
        mod.weight.data.uniform_(0.5, 1.5); mod.bias.data.normal_()
m64 = copy.deepcopy(m).double()
mf = copy.deepcopy(m)
sm = graphfuser.script(mf)
xs = [torch.randn(b, c, s, s) * 2 + 1 for _ in range(8)]
gys = [torch.randn(b, c, s, s) for _ in range(8)]

def grads(model, x, gy, params=None):
    params = params or model
    params.zero_grad()
    out = model(x)
    out.backward(gy)
    return {n: p.grad.clone() for n, p in params.named_parameters()}

for i in range(7):
    grads(sm, xs[i], gys[i], mf); grads(m, xs[i], gys[i]); grads(m64, xs[i].double(), gys[i].double())
x, gy = xs[7], gys[7]
ge, gf, g64 = grads(m, x, gy), grads(sm, x, gy, mf), grads(m64, x.double(), gy.double())
print(f"{'param':16s} {'eager':>10s} {'fused':>10s} ratio")
worst = 0
for n in g64:
    de = float((ge[n].double() - g64[n]).abs().max())
    df = float((gf[n].double() - g64[n]).abs().max())
    worst = max(worst, df / max(de, 1e-12))
    print(f"{n:16s} {de:10.3e} {df:10.3e} {df / max(de, 1e-12):.2f}")
print("worst ratio", worst)
print(graphfuser.last_executed_optimized_graph() is not None)
if os.environ.get("SHOW_BWD"):
    for r in sm._runners.values():
        bw = getattr(r, "backward", None)
        if bw is not None and getattr(bw, "_optimized", None) is not None:
            print(bw._optimized)
