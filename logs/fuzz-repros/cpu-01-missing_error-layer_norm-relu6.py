"""graphfuser fuzz repro: missing_error.

Observed (call 4): eager raised RuntimeError: Given normalized_shape=[5], expected input with shape [*, 5], but got input of size[0]

Ops: layer_norm, relu6, size. Calls (batch size, layout flipped): [(5, False), (5, False), (5, False), (5, False), (0, True), (0, True), (0, True)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: int32['B'] sliced nan_inf; x1: float32['B'] transposed normal; x2: int64[] transposed constant_rows

Run from the repository root: PYTHONPATH=. python logs/fuzz-repros/cpu-01-missing_error-layer_norm-relu6.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor):
    v0 = F.layer_norm(x1, [5], None, None, 1e-05)
    v1 = F.relu6(x1)
    v2 = x0 * v0.size(-1)
    return (v2, v1)


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor):\n'
           '    v0 = F.layer_norm(x1, [5], None, None, 1e-05)\n'
           '    v1 = F.relu6(x1)\n'
           '    v2 = x0 * v0.size(-1)\n'
           '    return (v2, v1)\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'int32',
             'shape': ['B'],
             'layout': 'sliced',
             'fill': 'nan_inf',
             'requires_grad': False},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': ['B'],
             'layout': 'transposed',
             'fill': 'normal',
             'requires_grad': False},
            {'name': 'x2',
             'kind': 'tensor',
             'dtype': 'int64',
             'shape': [],
             'layout': 'transposed',
             'fill': 'constant_rows',
             'requires_grad': False}],
 'calls': [[5, False], [5, False], [5, False], [5, False], [0, True], [0, True], [0, True]],
 'ops': ['layer_norm', 'relu6', 'size'],
 'seed': 1906}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
