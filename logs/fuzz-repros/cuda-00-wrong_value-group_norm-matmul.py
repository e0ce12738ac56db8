"""graphfuser fuzz repro: wrong_value.

Observed (call 2): output 0: 10/24 elements; at [0, 0, 0]: graphfuser nan, eager 0, fp64 reference 2.10195

Ops: group_norm, matmul, mul, tan. Calls (batch size, layout flipped): [(4, False), (4, False), (4, False), (4, False), (4, True), (4, True), (4, True)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: bool['B', 3, 2] channels_last normal; x1: float32[] dense positive; x2: float32[2, 8] dense ints; x3: float32[3] dense normal

Run from the repository root: PYTHONPATH=. python logs/fuzz-repros/cuda-00-wrong_value-group_norm-matmul.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, x3: torch.Tensor):
    v0 = torch.mul(x0, 1e+30)
    v1 = torch.matmul(v0, x2.to(v0.dtype))
    v2 = x1.tan()
    v3 = F.group_norm(v0, 3, x3, None, 1e-05)
    return v3


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, x3: torch.Tensor):\n'
           '    v0 = torch.mul(x0, 1e+30)\n'
           '    v1 = torch.matmul(v0, x2.to(v0.dtype))\n'
           '    v2 = x1.tan()\n'
           '    v3 = F.group_norm(v0, 3, x3, None, 1e-05)\n'
           '    return v3\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'bool',
             'shape': ['B', 3, 2],
             'layout': 'channels_last',
             'fill': 'normal',
             'requires_grad': False},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [],
             'layout': 'dense',
             'fill': 'positive',
             'requires_grad': False},
            {'name': 'x2',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [2, 8],
             'layout': 'dense',
             'fill': 'ints',
             'requires_grad': False},
            {'name': 'x3',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [3],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': False}],
 'calls': [[4, False], [4, False], [4, False], [4, False], [4, True], [4, True], [4, True]],
 'ops': ['group_norm', 'matmul', 'mul', 'tan'],
 'seed': 28892,
 'autocast': None}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
