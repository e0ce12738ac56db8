"""Render (and NVRTC-compile) the CUDA variants of a row sum, a one-row sum and a BN-sums group."""
import sys
import torch
import graphfuser
from graphfuser.codegen import dialects
from graphfuser.executor.compiled_reduction import ReductionGroup
from graphfuser.runtime import nvrtc
sys.path.insert(0, "tests")
from helpers import fusion_groups

dialects.CUDA.sum_block = int(sys.argv[1])
show = sys.argv[2] if len(sys.argv) > 2 else ""


def rows(x): return (x * 2.0).sum(-1)
def allsum(x): return (x * 2.0).sum()
def bn(x): return (x * 2.0).sum([0, 2, 3])


for fn, x in ((rows, torch.randn(64, 5000)), (allsum, torch.randn(100000)), (bn, torch.randn(8, 16, 30, 30))):
    sf = graphfuser.script(fn)
    for _ in range(3):
        sf(x)
    for g in fusion_groups(sf._optimized):
        cg = ReductionGroup(g.subgraph, "cuda", torch.device("cuda", 0), "k")
        for i, v in enumerate(cg.variants):
            nvrtc.compile_cubin(cg.variant_sources[i], v[0], 90)
            if show and show in v[0] and fn.__name__ == sys.argv[3]:
                src = cg.variant_sources[i]
                print(src[src.index('extern "C"'):])
        print(fn.__name__, [v[0] for v in cg.variants])
