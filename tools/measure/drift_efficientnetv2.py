"""efficientnetv2_rw_t fp32 eval: distance from float64 of eager / graphfuser at batch 2 then 3, and variants."""
import copy, json, sys, torch, timm, graphfuser
from graphfuser.config import config
torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
torch.manual_seed(0)
m = timm.create_model("efficientnetv2_rw_t", pretrained=False).eval().cuda()
m64 = copy.deepcopy(m).double()
g = torch.Generator().manual_seed(1)
xs = {b: torch.randn(b, 3, 224, 224, generator=g).cuda() for b in (2, 3)}
ref = {}
with torch.no_grad():
    for b, x in xs.items():
        ref[b] = m64(x.double())
def err(o, b):
    r = ref[b]; return {"rel": float((o.double() - r).norm() / r.norm()), "max_abs": float((o.double() - r).abs().max())}
out = {}
with torch.no_grad():
    for b, x in xs.items():
        out[f"eager_b{b}"] = err(m(x), b)
        mcl = copy.deepcopy(m).to(memory_format=torch.channels_last)
        out[f"eager_cl_b{b}"] = err(mcl(x.to(memory_format=torch.channels_last)), b)
    def run(tag, knobs, order):
        with config.override(**knobs):
            sf = graphfuser.script(copy.deepcopy(m))
            for b in order:
                for _ in range(4):
                    o = sf(xs[b])
                out[f"{tag}_b{b}"] = err(o, b)
    run("gf", {}, (2, 3))
    run("gf_fresh3", {}, (3,))
    run("gf_noconvlayout", {"disable": ["conv_layout"]}, (2, 3))
    run("gf_nobias", {"disable": ["bias_decomposition"]}, (2, 3))
    run("gf_off", {"enabled": False}, (2, 3))
for k, v in out.items():
    print(f"{k:28s} rel {v['rel']:.3e}  max_abs {v['max_abs']:.3e}")
