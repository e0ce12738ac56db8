"""graphfuser fuzz repro: compile_fallback (known: issue 10 class 7: crashes in the pipeline).

Observed (call -1): graphfuser: prim::CpuFusionGroup (cpu_fusion_a3568c0d371c) could not be compiled: LoweringError: reduced loop axes without a reduction

Ops: amax, isinf, mul. Calls (batch size, layout flipped): [(5, False), (5, False), (5, False), (5, False), (1, False), (1, False), (1, False)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: int64['B', 16, 3] dense ints

Run from the repository root: PYTHONPATH=. python /root/out/cpu/fuzz-repros/cpu-02-compile_fallback-amax-isinf.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor):
    v0 = x0 * 1e+30
    v1 = torch.amax(x0, [2], keepdim=True)
    v2 = v1.isinf()
    return v2


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor):\n'
           '    v0 = x0 * 1e+30\n'
           '    v1 = torch.amax(x0, [2], keepdim=True)\n'
           '    v2 = v1.isinf()\n'
           '    return v2\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'int64',
             'shape': ['B', 16, 3],
             'layout': 'dense',
             'fill': 'ints',
             'requires_grad': False}],
 'calls': [[5, False], [5, False], [5, False], [5, False], [1, False], [1, False], [1, False]],
 'ops': ['amax', 'isinf', 'mul'],
 'seed': 48309}

if __name__ == "__main__":
    import sys

    from graphfuser.fuzz.oracle import run_case

    import tempfile

    from graphfuser.config import config

    config.set(repro_dir=tempfile.mkdtemp(prefix="graphfuser-repro-"))   # not the working directory
    DEVICE = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    result = run_case(CASE, DEVICE, "/tmp", "repro")
    for f in result["findings"]:
        print(f"{f['category']} (call {f['call']}): {f['detail']}")
    print("no difference from eager" if not result["findings"] else "")
    sys.exit(1 if result["findings"] else 0)
