"""graphfuser fuzz repro: compile_fallback (known: issue 10 class 7: crashes in the pipeline).

Observed (call -1): graphfuser: prim::CpuFusionGroup (cpu_fusion_c7dadb898df4) could not be compiled: IndexError: list index out of range

Ops: add, neg, sub. Calls (batch size, layout flipped): [(3, False), (3, False), (3, False), (3, False), (7, True), (7, True), (7, True)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float32['B'] dense normal; x1: float32[] dense nan_inf

Run from the repository root: PYTHONPATH=. python logs/fuzz-repros/cpu-03-compile_fallback-add-neg.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor):
    v0 = x0 - x0
    v1 = torch.neg(x1)
    v2 = v1 + 0.5
    return v2


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor):\n'
           '    v0 = x0 - x0\n'
           '    v1 = torch.neg(x1)\n'
           '    v2 = v1 + 0.5\n'
           '    return v2\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': ['B'],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': False},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [],
             'layout': 'dense',
             'fill': 'nan_inf',
             'requires_grad': False}],
 'calls': [[3, False], [3, False], [3, False], [3, False], [7, True], [7, True], [7, True]],
 'ops': ['add', 'neg', 'sub'],
 'seed': 911}

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
