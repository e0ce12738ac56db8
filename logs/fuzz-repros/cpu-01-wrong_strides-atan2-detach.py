"""graphfuser fuzz repro: wrong_strides.

Observed (call 2): output 1: (132, 4, 1) vs eager (264, 8, 2) for shape (3, 33, 4)

Ops: atan2, detach, inplace:sub_, mean, size. Calls (batch size, layout flipped): [(3, False), (3, False), (3, False), (3, False), (3, False), (3, False), (3, False)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float32['B', 33, 4] sliced huge_mean; s0: int [1, 1]

Run from the repository root: PYTHONPATH=. python logs/fuzz-repros/cpu-01-wrong_strides-atan2-detach.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, s0: int):
    v0 = torch.mean(x0, None, keepdim=False, dtype=torch.float64)
    v0.sub_(s0)
    v1 = torch.detach(x0)
    v2 = torch.atan2(v1, v0)
    v3 = v2 * x0.size(-1)
    return (v3, v1)


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, s0: int):\n'
           '    v0 = torch.mean(x0, None, keepdim=False, dtype=torch.float64)\n'
           '    v0.sub_(s0)\n'
           '    v1 = torch.detach(x0)\n'
           '    v2 = torch.atan2(v1, v0)\n'
           '    v3 = v2 * x0.size(-1)\n'
           '    return (v3, v1)\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': ['B', 33, 4],
             'layout': 'sliced',
             'fill': 'huge_mean',
             'requires_grad': False},
            {'name': 's0', 'kind': 'int', 'values': [1, 1]}],
 'calls': [[3, False], [3, False], [3, False], [3, False], [3, False], [3, False], [3, False]],
 'ops': ['atan2', 'detach', 'inplace:sub_', 'mean', 'size'],
 'seed': 1143}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
