"""Long reductions with a large mean: graphfuser's and eager's distance from float64."""
import sys
import torch
import torch.nn.functional as F
import graphfuser


def s_all(x): return (x * 1.0).sum()
def s_rows(x): return (x * 1.0).sum(-1)
def s_cols(x): return (x * 1.0).sum(0)
def m_rows(x): return (x * 1.0).mean(-1)
def v_rows(x): return (x * 1.0).var(-1)
def ln(x): return F.layer_norm(x * 1.0, [x.shape[-1]])
def sm(x): return torch.softmax(x * 1.0, -1)
def bn_sums(x): return (x * 1.0).sum([0, 2, 3])

CASES = [(s_all, (1_000_000,)), (s_rows, (4, 250_000)), (s_cols, (250_000, 4)), (m_rows, (4, 250_000)),
         (v_rows, (4, 250_000)), (ln, (4, 250_000)), (sm, (4, 250_000)), (bn_sums, (16, 4, 125, 125))]
for fn, shape in CASES:
    g = torch.Generator().manual_seed(0)
    x = torch.rand(shape, generator=g) * 2 + 1000
    if fn is sm:
        x = x - 1000
    f = graphfuser.script(fn)
    for _ in range(3):
        out = f(x)
    ref = fn(x.double())
    e = float((fn(x).double() - ref).abs().max())
    o = float((out.double() - ref).abs().max())
    print(f"{fn.__name__:8s} {str(shape):20s} eager {e:.3e} fused {o:.3e} ratio {o / max(e, 1e-300):.2f}  |ref| {float(ref.abs().max()):.3e}")
