import os, sys, tempfile, traceback, torch
torch.set_num_threads(1)
from graphfuser.fuzz.campaign import generate
from graphfuser.fuzz.oracle import run_case
from graphfuser.config import config
cases = generate(200, 20261122)
idx = [i for i, c in enumerate(cases) if "x0.fill_(1.5)" in c["source"] and "x0 > 0, v0, 2.0" in c["source"]]
print("crash case index", idx, flush=True)
wd = tempfile.mkdtemp()
config.set(repro_dir=os.path.join(wd, "repro"))
order = idx + list(range(len(cases))) if sys.argv[1:] == ["all"] else idx
for n, i in enumerate(order):
    try:
        r = run_case(cases[i], "cuda", wd, f"p{n}")
        torch.cuda.synchronize()
        bad = [f for f in r["findings"] if "CUDA" in f["detail"]]
        if bad or i in idx:
            print(i, r["findings"][:2], flush=True)
        if bad:
            print(cases[i]["source"], cases[i]["inputs"]); break
    except Exception as e:
        print("EXC at case", i, type(e).__name__, str(e)[:300]); print(cases[i]["source"], cases[i]["inputs"]); traceback.print_exc(); break
