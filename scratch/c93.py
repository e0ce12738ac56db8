import sys, torch
from graphfuser.fuzz.campaign import generate
from graphfuser.fuzz.oracle import make_args
c = generate(200, 20261122)[93]
print(c["calls"], c["seed"])
for call in range(len(c["calls"])):
    args = make_args(c, call, "cpu")
    print(call, [(tuple(a.shape), a.stride(), a.storage_offset(), a.dtype) for a in args if isinstance(a, torch.Tensor)])
import graphfuser, re
from graphfuser.ir import parse_graph, print_graph
from graphfuser.executor import compiled
open("/tmp/c93fn.py","w").write(c["source"]); sys.path.insert(0,"/tmp"); import c93fn
sf = graphfuser.script(c93fn.fn)
for call in range(4):
    sf(*make_args(c, call, "cpu"))
subs = [n.subgraph for n in sf._optimized.all_nodes() if n.kind.endswith("FusionGroup")]
for sub in subs:
    print(print_graph(sub))
    cuda_sub = parse_graph(print_graph(sub).replace("device=cpu", "device=cuda:0"))
    cg = compiled.CompiledGroup(cuda_sub, "cuda", torch.device("cuda:0"), "g93")
    print(cg.source[-3500:])
    print([a for a in dir(cg) if not a.startswith("__")])
