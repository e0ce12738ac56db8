import sys, re, collections, logging, torch, io
import graphfuser
from graphfuser.zoo import build
name = sys.argv[1]
m, size = build(name)
x = torch.randn(1, *size)
import os
with torch.no_grad():
    sm = graphfuser.script(m)
    for _ in range(3): sm(x)
g = sm.graph_for(x) if hasattr(sm, "graph_for") else None
txt = str(g)
kinds = collections.Counter(re.findall(r"= (aten::\w+|prim::\w+)", txt.split("with prim::")[0]))
print("top-level (outside groups) node kinds:", kinds.most_common(25))
print("groups:", txt.count("FusionGroup_"))
