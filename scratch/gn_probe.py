import torch, torch.nn.functional as F, graphfuser
import sys; sys.path.insert(0,"tests/cuda"); from test_cuda_training_kernels import GroupNormSiLU; mod = GroupNormSiLU(8, 32).cuda()
def _unused(x):
    return F.silu(mod(x * 1.5))
x = torch.randn(8, 32, 14, 14, device="cuda", requires_grad=True)
sf = graphfuser.script(mod)
for _ in range(4):
    sf(x).sum().backward()
with torch.no_grad():
    for _ in range(4): sf(x)
    print(sf.graph_for(x))
