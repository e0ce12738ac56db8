import sys, torch
sys.path[:0] = ["tests", "tests/autodiff"]
import test_norm_grads as T
from grad_helpers import check_grads, make_function
dev = sys.argv[1] if len(sys.argv) > 1 else "cpu"
for dtype in (torch.float16, torch.bfloat16):
    fn = make_function(["x", "y", "w", "b"], T.ROW_CASES["prod"])
    inputs = [t.detach().to(dev).requires_grad_() for t in T._inputs(dtype, "dense", 64, 257)]
    inputs[0] = (inputs[0].detach() * 0.01 + 1.0).requires_grad_(); inputs[1] = (inputs[1].detach() * 0.01 + 1.0).requires_grad_()
    with torch.no_grad():
        p = torch.prod(inputs[0] * inputs[1], 1)
    print(dtype, "prod out: inf", p.isinf().sum().item(), "zero", (p == 0).sum().item(), "nan", p.isnan().sum().item())
    try:
        check_grads(fn, inputs, T._tol(dtype)); print("ok")
    except Exception as e:
        print("FAIL", str(e)[:400])
import graphfuser
from grad_helpers import grads_of
dtype = torch.float16
inputs = [t.detach().requires_grad_() for t in T._inputs(dtype, "dense", 64, 257)]
inputs[0] = (inputs[0].detach() * 0.1 + 1.0).requires_grad_()
outs = fn(*inputs); g = [torch.randn_like(o) for o in outs]
ref = grads_of(fn, inputs, g)
sf = graphfuser.script(fn)
for _ in range(4): got = grads_of(sf, inputs, g)
with torch.no_grad(): p = torch.prod(inputs[0] * inputs[1], 1); pf = torch.prod((inputs[0] * inputs[1]).float(), 1)
bad = ((ref[0] - got[0]).abs() > 0.03) | (ref[0].isnan() != got[0].isnan())
rows = bad.any(1).nonzero().flatten().tolist()
for r in rows[:4]:
    c = bad[r].nonzero().flatten()[:3].tolist()
    print("row", r, "prod16", p[r].item(), "prod32", pf[r].item(), "cols", c, "eager", ref[0][r, c].tolist(), "gf", got[0][r, c].tolist(), "x", (inputs[0]*inputs[1])[r,c].tolist(), "gout", g[0][r].item())
