"""Profile a zoo model: wall ms per call, GPU kernel ms, kernel counts (fused vs other), host overhead."""
import sys, time, torch, collections
import graphfuser
from graphfuser.zoo import build
names = sys.argv[1].split(",")
batch = int(sys.argv[2]) if len(sys.argv) > 2 else 64
for name in names:
    model, size = build(name); model = model.cuda(); x = torch.randn(batch, *size, device="cuda")
    with torch.no_grad():
        sm = graphfuser.script(model)
        for _ in range(4): sm(x)
        torch.cuda.synchronize()
        def wall(f, n=20):
            for _ in range(3): f(x)
            torch.cuda.synchronize(); t = time.perf_counter()
            for _ in range(n): f(x)
            torch.cuda.synchronize(); return (time.perf_counter() - t) / n * 1e3
        jm = torch.jit.script(model)
        for _ in range(4): jm(x)
        print(f"== {name} batch {batch}: eager {wall(model):.2f} jit {wall(jm):.2f} gf {wall(sm):.2f} ms")
        for label, f in (("eager", model), ("gf", sm)):
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]) as p:
                f(x); torch.cuda.synchronize()
            ks = [e for e in p.events() if e.device_type == torch.autograd.DeviceType.CUDA]
            c = collections.Counter(); t = collections.Counter()
            for e in ks:
                k = "fusion" if e.name.startswith("cuda_fusion") else e.name[:60]
                c[k] += 1; t[k] += e.device_time_total
            tot = sum(t.values()) / 1e3
            print(f"  {label}: {len(ks)} kernels, gpu {tot:.2f} ms; top:")
            for k, v in t.most_common(12):
                print(f"    {v/1e3:8.3f} ms  x{c[k]:4d}  {k}")
