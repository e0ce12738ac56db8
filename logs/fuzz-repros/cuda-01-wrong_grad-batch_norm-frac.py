"""graphfuser fuzz repro: wrong_grad.

Observed (call 3): grad of x6: 1/8 elements; at [5]: graphfuser nan, eager -inf, fp64 reference -inf

Ops: batch_norm, frac, matmul, size. Calls (batch size, layout flipped): [(16, False), (16, False), (16, False), (16, False), (1, False), (1, False), (1, False)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: bfloat16['B'] expanded positive requires_grad; x1: int8[] dense constant_rows; x2: float64['B'] dense nan_inf requires_grad; x3: float32['B', 8] dense edge; x4: float32[8] sliced normal; x5: float32[8] dense positive; x6: float32[8] sliced normal requires_grad

Run from the repository root: PYTHONPATH=. python /root/out/fuzz-repros/cuda-01-wrong_grad-batch_norm-frac.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, x3: torch.Tensor, x4: torch.Tensor, x5: torch.Tensor, x6: torch.Tensor):
    v0 = x0 * x2.size(-1)
    v1 = torch.frac(v0)
    v2 = torch.matmul(v0, x3.to(v0.dtype))
    v3 = F.batch_norm(x3, x4, x5, x6, None, False, 0.1, 1e-05)
    return (v3, v2)


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, x3: torch.Tensor, x4: torch.Tensor, '
           'x5: torch.Tensor, x6: torch.Tensor):\n'
           '    v0 = x0 * x2.size(-1)\n'
           '    v1 = torch.frac(v0)\n'
           '    v2 = torch.matmul(v0, x3.to(v0.dtype))\n'
           '    v3 = F.batch_norm(x3, x4, x5, x6, None, False, 0.1, 1e-05)\n'
           '    return (v3, v2)\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'bfloat16',
             'shape': ['B'],
             'layout': 'expanded',
             'fill': 'positive',
             'requires_grad': True},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'int8',
             'shape': [],
             'layout': 'dense',
             'fill': 'constant_rows',
             'requires_grad': False},
            {'name': 'x2',
             'kind': 'tensor',
             'dtype': 'float64',
             'shape': ['B'],
             'layout': 'dense',
             'fill': 'nan_inf',
             'requires_grad': True},
            {'name': 'x3',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': ['B', 8],
             'layout': 'dense',
             'fill': 'edge',
             'requires_grad': False},
            {'name': 'x4',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [8],
             'layout': 'sliced',
             'fill': 'normal',
             'requires_grad': False},
            {'name': 'x5',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [8],
             'layout': 'dense',
             'fill': 'positive',
             'requires_grad': False},
            {'name': 'x6',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [8],
             'layout': 'sliced',
             'fill': 'normal',
             'requires_grad': True}],
 'calls': [[16, False], [16, False], [16, False], [16, False], [1, False], [1, False], [1, False]],
 'ops': ['batch_norm', 'frac', 'matmul', 'size'],
 'seed': 304,
 'autocast': None}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
