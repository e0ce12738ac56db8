"""graphfuser fuzz repro: wrong_value.

Observed (call 2): input x4 after the call: 2/2 elements; at [0]: graphfuser 140344, eager 140346

Ops: batch_norm, bitwise_or, inplace:add_, size. Calls (batch size, layout flipped): [(33, False), (33, False), (33, False), (33, False), (33, False), (33, False), (33, False)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float32['B', 2, 4099] sliced positive; x1: int8[2, 1] dense constant_rows; x2: int64[1, 2, 4099] dense normal; x3: float32[2] dense normal; x4: float32[2] dense positive

Run from the repository root: PYTHONPATH=. python logs/fuzz-repros/cpu-00-wrong_value-batch_norm-bitwise_or.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, x3: torch.Tensor, x4: torch.Tensor):
    v0 = x0 * x2.size(-1)
    v1 = torch.bitwise_or(x2, 1)
    v2 = x0 * x1.size(-1)
    x2.add_(7)
    v3 = F.batch_norm(v0, x3, x4, None, None, True, 0.1, 0.1)
    return (v3, v1)


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, x3: torch.Tensor, x4: '
           'torch.Tensor):\n'
           '    v0 = x0 * x2.size(-1)\n'
           '    v1 = torch.bitwise_or(x2, 1)\n'
           '    v2 = x0 * x1.size(-1)\n'
           '    x2.add_(7)\n'
           '    v3 = F.batch_norm(v0, x3, x4, None, None, True, 0.1, 0.1)\n'
           '    return (v3, v1)\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': ['B', 2, 4099],
             'layout': 'sliced',
             'fill': 'positive',
             'requires_grad': False},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'int8',
             'shape': [2, 1],
             'layout': 'dense',
             'fill': 'constant_rows',
             'requires_grad': False},
            {'name': 'x2',
             'kind': 'tensor',
             'dtype': 'int64',
             'shape': [1, 2, 4099],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': False},
            {'name': 'x3',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [2],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': False},
            {'name': 'x4',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [2],
             'layout': 'dense',
             'fill': 'positive',
             'requires_grad': False}],
 'calls': [[33, False], [33, False], [33, False], [33, False], [33, False], [33, False], [33, False]],
 'ops': ['batch_norm', 'bitwise_or', 'inplace:add_', 'size'],
 'seed': 2062}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
