"""graphfuser fuzz repro: wrong_grad.

Observed (call 3): grad of x0: 4192/7168 elements; at [0, 0, 0, 0]: graphfuser -0, eager nan, fp64 reference nan

Ops: acos, asin, isinf, logical_and, prod. Calls (batch size, layout flipped): [(16, False), (16, False), (16, False), (16, False), (16, True), (16, True), (16, True)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float16['B', 16, 7, 4] transposed nan_inf requires_grad

Run from the repository root: PYTHONPATH=. python /tmp/fz8989/fuzz-repros/cpu-00-wrong_grad-acos-asin.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor):
    v0 = torch.acos(x0)
    v1 = torch.prod(v0, dtype=torch.float32)
    v2 = v1.isinf()
    v3 = torch.asin(x0)
    v4 = torch.logical_and(v2, v1)
    return (v4, v2, v1)


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor):\n'
           '    v0 = torch.acos(x0)\n'
           '    v1 = torch.prod(v0, dtype=torch.float32)\n'
           '    v2 = v1.isinf()\n'
           '    v3 = torch.asin(x0)\n'
           '    v4 = torch.logical_and(v2, v1)\n'
           '    return (v4, v2, v1)\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float16',
             'shape': ['B', 16, 7, 4],
             'layout': 'transposed',
             'fill': 'nan_inf',
             'requires_grad': True}],
 'calls': [[16, False], [16, False], [16, False], [16, False], [16, True], [16, True], [16, True]],
 'ops': ['acos', 'asin', 'isinf', 'logical_and', 'prod'],
 'seed': 1011,
 'autocast': None}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
