import sys, torch
sys.path.insert(0, "tests/autodiff"); sys.path.insert(0, "tests")
import graphfuser
from grad_helpers import compile_as_cuda
def fn(x0: torch.Tensor):
    v0 = x0 * x0
    v1 = torch.amin(v0, [0], keepdim=True)
    return (v1, v0)
sf = graphfuser.script(fn)
x = torch.full((1,), 3, dtype=torch.uint8).expand(16)
for _ in range(4): sf(x)
from graphfuser.executor import fusion
subs = [g.subgraph for g in sf.live_groups()] if hasattr(sf, "live_groups") else None
print(sf.graph_for(x))
subs = [n.subgraph for n in sf._optimized.all_nodes() if n.kind.endswith("FusionGroup")] if hasattr(sf, "_optimized") else None
print([a for a in dir(sf) if "opt" in a or "graph" in a])
try:
    compile_as_cuda(subs, "amin")
    print("compiled OK")
except Exception as e:
    print(str(e)[:3000])
