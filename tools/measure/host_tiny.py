"""Host µs per call of a tiny fusion on CUDA: eager, jit, graphfuser (default, no CUDA graphs), and a profile."""
import cProfile, pstats, io, time, sys, torch, graphfuser
from graphfuser.config import config

def relu_add(x):
    return (x + 1.0).relu()

def us(f, x, calls=5000):
    for _ in range(50): f(x)
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(calls): f(x)
    torch.cuda.synchronize(); return (time.perf_counter() - t) / calls * 1e6

x = torch.randn(1024, device="cuda")
jit = torch.jit.script(relu_add)
gf = graphfuser.script(relu_add)
with config.override(disable=["cuda_graphs"]):
    gf_nograph = graphfuser.script(relu_add)
    for _ in range(5): gf_nograph(x)
res = {}
for r in range(3):
    for name, f in (("eager", relu_add), ("jit", jit), ("graphfuser", gf)):
        res.setdefault(name, []).append(us(f, x))
    with config.override(disable=["cuda_graphs"]):
        res.setdefault("graphfuser_no_cuda_graphs", []).append(us(gf_nograph, x))
print({k: [round(v, 2) for v in vs] for k, vs in res.items()})
print("replay:", gf._replay, "fast:", gf._fast)
print(gf.code[:3000])
for label, f in (("default", gf),):
    pr = cProfile.Profile(); pr.enable()
    for _ in range(3000): f(x)
    pr.disable(); s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(18); print(label, s.getvalue()[:4000])
with config.override(disable=["cuda_graphs"]):
    pr = cProfile.Profile(); pr.enable()
    for _ in range(3000): gf_nograph(x)
    pr.disable(); s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(18); print("nograph", s.getvalue()[:4000])
