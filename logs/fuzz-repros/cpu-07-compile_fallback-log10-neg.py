"""graphfuser fuzz repro: compile_fallback (known: issue 10 class 7: crashes in the pipeline).

Observed (call -1): graphfuser: prim::CpuFusionGroup (cpu_fusion_49e581b82f86) could not be compiled: IndexError: list index out of range

Ops: log10, neg. Calls (batch size, layout flipped): [(16, False), (16, False), (16, False), (16, False), (0, True), (0, True), (0, True)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float64[1] transposed ints; x1: int32['B'] dense constant_rows; x2: float64['B'] dense nan_inf

Run from the repository root: PYTHONPATH=. python logs/fuzz-repros/cpu-07-compile_fallback-log10-neg.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor):
    v0 = torch.log10(x0)
    v1 = torch.neg(x0)
    return (v1, v0)


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor):\n'
           '    v0 = torch.log10(x0)\n'
           '    v1 = torch.neg(x0)\n'
           '    return (v1, v0)\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float64',
             'shape': [1],
             'layout': 'transposed',
             'fill': 'ints',
             'requires_grad': False},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'int32',
             'shape': ['B'],
             'layout': 'dense',
             'fill': 'constant_rows',
             'requires_grad': False},
            {'name': 'x2',
             'kind': 'tensor',
             'dtype': 'float64',
             'shape': ['B'],
             'layout': 'dense',
             'fill': 'nan_inf',
             'requires_grad': False}],
 'calls': [[16, False], [16, False], [16, False], [16, False], [0, True], [0, True], [0, True]],
 'ops': ['log10', 'neg'],
 'seed': 11812}

if __name__ == "__main__":
    import sys

    from graphfuser.fuzz.oracle import run_case

    DEVICE = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    result = run_case(CASE, DEVICE, "/tmp", "repro")
    for f in result["findings"]:
        print(f"{f['category']} (call {f['call']}): {f['detail']}")
    print("no difference from eager" if not result["findings"] else "")
    sys.exit(1 if result["findings"] else 0)
