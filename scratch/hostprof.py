import cProfile, pstats, time, torch, graphfuser
from graphfuser.zoo import build
m, size = build("mobilenet_v3_large"); m = m.cuda()
x = torch.randn(64, *size, device="cuda")
with torch.no_grad():
    sf = graphfuser.script(m)
    t0 = time.perf_counter()
    for _ in range(4): sf(x)
    torch.cuda.synchronize(); print("first 4 calls (profile+compile) s", time.perf_counter() - t0)
    jm = torch.jit.script(m)
    for _ in range(4): jm(x)
    for name, f in (("eager", m), ("jit", jm), ("gf", sf)):
        for _ in range(5): f(x)
        torch.cuda.synchronize(); t = time.perf_counter()
        for _ in range(20): f(x)
        torch.cuda.synchronize(); print(name, "wall ms/call", (time.perf_counter() - t) / 20 * 1e3)
        t = time.perf_counter()
        for _ in range(20): f(x)
        print(name, "host-only ms/call (no sync)", (time.perf_counter() - t) / 20 * 1e3); torch.cuda.synchronize()
    pr = cProfile.Profile(); pr.enable()
    for _ in range(20): sf(x)
    pr.disable(); torch.cuda.synchronize()
    pstats.Stats(pr).sort_stats("tottime").print_stats(30)
