import sys, torch
sys.path[:0] = ["tests", "tests/autodiff"]
import test_norm_grads as T
from grad_helpers import grads_of, make_function
import graphfuser
from graphfuser.config import config
fn = make_function(["x", "w", "b", "rm", "rv"], [T.CHANNEL_CASES["batch_norm_eval"]])
inputs = [t.detach().cuda() for t in T._channel_inputs(torch.bfloat16, "dense", (8, 16, 9, 7))]
for t in inputs[:3]: t.requires_grad_()
outs = fn(*inputs); outs = outs if isinstance(outs, tuple) else (outs,)
torch.manual_seed(5)
g = [torch.randn_like(o) for o in outs]
ref = grads_of(fn, inputs, g)
i64 = [t.detach().double().requires_grad_(t.requires_grad) for t in inputs]
r64 = grads_of(fn, i64, [x.double() for x in g])
sf = graphfuser.script(fn)
with config.override(disable=["fallback"]):
    for _ in range(4): got = grads_of(sf, inputs, g)
for k, nm in enumerate("xwb"):
    d_e = (ref[k].double() - r64[k]).abs().max().item(); d_g = (got[k].double() - r64[k]).abs().max().item()
    print(nm, "max|eager-fp64|", d_e, "max|gf-fp64|", d_g)
print("w eager", ref[1][:4].tolist(), "gf", got[1][:4].tolist(), "fp64", r64[1][:4].tolist())
print("b eager", ref[2][:4].tolist(), "gf", got[2][:4].tolist(), "fp64", r64[2][:4].tolist())
