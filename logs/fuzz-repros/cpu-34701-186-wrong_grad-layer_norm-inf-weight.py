"""graphfuser fuzz repro: wrong_grad.

Observed (call 3): grad of x2: 6/16 elements; at [0]: graphfuser -inf, eager nan, fp64 reference nan

Ops: detach, inplace:fill_, layer_norm, logical_not, matmul, nan_to_num, size. Calls (batch size, layout flipped): [(1, False), (1, False), (1, False), (1, False), (0, False), (0, False), (0, False)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: int64['B', 33, 16] dense edge; x1: float64[] dense nan_inf requires_grad; x2: float16[16] channels_last nan_inf requires_grad; x3: float16[16] dense edge requires_grad; x4: float16[16] dense edge requires_grad; x5: float32[16, 3] dense huge_mean requires_grad

Run from the repository root: PYTHONPATH=. python scratch/fz2/fuzz-repros/cpu-00-wrong_grad-detach-inplace_fill_.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, x3: torch.Tensor, x4: torch.Tensor, x5: torch.Tensor):
    v0 = F.layer_norm(x2, [16], x3, x4, 0.1)
    v1 = x0.logical_not()
    v2 = v0 * x2.size(-1)
    v3 = v2.detach()
    v1.fill_(0)
    v4 = torch.nan_to_num(v2, nan=0.0, posinf=1.0)
    v5 = v3.logical_not()
    v6 = torch.matmul(v0, x5.to(v0.dtype))
    return (v6, v2, v4)


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, x3: torch.Tensor, x4: torch.Tensor, '
           'x5: torch.Tensor):\n'
           '    v0 = F.layer_norm(x2, [16], x3, x4, 0.1)\n'
           '    v1 = x0.logical_not()\n'
           '    v2 = v0 * x2.size(-1)\n'
           '    v3 = v2.detach()\n'
           '    v1.fill_(0)\n'
           '    v4 = torch.nan_to_num(v2, nan=0.0, posinf=1.0)\n'
           '    v5 = v3.logical_not()\n'
           '    v6 = torch.matmul(v0, x5.to(v0.dtype))\n'
           '    return (v6, v2, v4)\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'int64',
             'shape': ['B', 33, 16],
             'layout': 'dense',
             'fill': 'edge',
             'requires_grad': False},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'float64',
             'shape': [],
             'layout': 'dense',
             'fill': 'nan_inf',
             'requires_grad': True},
            {'name': 'x2',
             'kind': 'tensor',
             'dtype': 'float16',
             'shape': [16],
             'layout': 'channels_last',
             'fill': 'nan_inf',
             'requires_grad': True},
            {'name': 'x3',
             'kind': 'tensor',
             'dtype': 'float16',
             'shape': [16],
             'layout': 'dense',
             'fill': 'edge',
             'requires_grad': True},
            {'name': 'x4',
             'kind': 'tensor',
             'dtype': 'float16',
             'shape': [16],
             'layout': 'dense',
             'fill': 'edge',
             'requires_grad': True},
            {'name': 'x5',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [16, 3],
             'layout': 'dense',
             'fill': 'huge_mean',
             'requires_grad': True}],
 'calls': [[1, False], [1, False], [1, False], [1, False], [0, False], [0, False], [0, False]],
 'ops': ['detach', 'inplace:fill_', 'layer_norm', 'logical_not', 'matmul', 'nan_to_num', 'size'],
 'seed': 256,
 'autocast': None}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
