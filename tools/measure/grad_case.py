"""Per-parameter distance from float64 of one case of tests/autodiff/test_grad_accuracy.py."""
import sys
sys.path.insert(0, "tests"); sys.path.insert(0, "tests/autodiff")
import copy
import torch
import graphfuser
import test_grad_accuracy as t

name = sys.argv[1]
make, shape, out_shape = t.CASES[name]
torch.manual_seed(0)
model = make().train()
t._spread_bn(model)
fp, eager, exact = copy.deepcopy(model), copy.deepcopy(model), copy.deepcopy(model).double()
for m in (eager, exact):
    t.philox_dropouts(m)
sm = graphfuser.script(fp)
g = torch.Generator().manual_seed(2)
for step in range(t.STEPS):
    x = torch.randn(shape, generator=g) * 2 + 1
    gy = torch.randn(out_shape, generator=g)
    got = t._grads(sm, fp, x, gy, step)
    ref = t._grads(eager, eager, x, gy, step)
    want = t._grads(exact, exact, x.double(), gy.double(), step)
for n, w in want.items():
    de = float((ref[n].double() - w).abs().max()); df = float((got[n].double() - w).abs().max())
    print(f"{n:20s} eager {de:.3e} fused {df:.3e} ratio {df / max(de, 1e-30):.2f}")
