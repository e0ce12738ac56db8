"""efficientnetv2_rw_t fp32 eval: what differs between the batch-3 re-specialization and a fresh batch-3 one."""
import copy, sys, torch, timm, graphfuser
torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
torch.manual_seed(0)
m = timm.create_model("efficientnetv2_rw_t", pretrained=False).eval().cuda()
m64 = copy.deepcopy(m).double()
g = torch.Generator().manual_seed(1)
xs = {b: torch.randn(b, 3, 224, 224, generator=g).cuda() for b in (2, 3)}
out_dir = sys.argv[1]
def err(o, b):
    with torch.no_grad():
        r = m64(xs[b].double())
    return float((o.double() - r).norm() / r.norm())
with torch.no_grad():
    a = graphfuser.script(copy.deepcopy(m))
    for b in (2, 3):
        for _ in range(4):
            oa = a(xs[b])
    f = graphfuser.script(copy.deepcopy(m))
    for _ in range(4):
        of = f(xs[3])
    print("respecialized b3", err(oa, 3), "fresh b3", err(of, 3), "a vs f max", float((oa - of).abs().max()))
    open(f"{out_dir}/respec_b3.txt", "w").write(str(a.graph_for(xs[3])))
    open(f"{out_dir}/fresh_b3.txt", "w").write(str(f.graph_for(xs[3])))
    # intermediate outputs: hook every module in the eager copies run through... compare block outputs
    def block_outs(model_call, x):
        outs = []
        return outs
