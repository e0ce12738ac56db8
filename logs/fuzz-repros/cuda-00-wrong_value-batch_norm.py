"""graphfuser fuzz repro: wrong_value.

Observed (call 3): output 0: 2/81 elements; at [0, 0, 2, 2]: graphfuser -inf, eager -2.90553e+38, fp64 reference -2.90553e+38

Ops: batch_norm. Calls (batch size, layout flipped): [(3, False), (3, False), (3, False), (3, False), (3, True), (3, True), (3, True)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float32['B', 3, 3, 3] dense edge; x1: int8[] expanded edge; x2: float32[3] dense normal; x3: float32[3] dense edge; x4: float32[3] dense normal

Run from the repository root: PYTHONPATH=. python /root/out/fuzz-repros/cuda-00-wrong_value-batch_norm.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, x3: torch.Tensor, x4: torch.Tensor):
    v0 = F.batch_norm(x0, x2, x3, x4, None, False, 0.1, 1e-05)
    return v0


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, x3: torch.Tensor, x4: '
           'torch.Tensor):\n'
           '    v0 = F.batch_norm(x0, x2, x3, x4, None, False, 0.1, 1e-05)\n'
           '    return v0\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': ['B', 3, 3, 3],
             'layout': 'dense',
             'fill': 'edge',
             'requires_grad': False},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'int8',
             'shape': [],
             'layout': 'expanded',
             'fill': 'edge',
             'requires_grad': False},
            {'name': 'x2',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [3],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': False},
            {'name': 'x3',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [3],
             'layout': 'dense',
             'fill': 'edge',
             'requires_grad': False},
            {'name': 'x4',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [3],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': False}],
 'calls': [[3, False], [3, False], [3, False], [3, False], [3, True], [3, True], [3, True]],
 'ops': ['batch_norm'],
 'seed': 303,
 'autocast': None}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
