"""graphfuser fuzz repro: wrong_grad.

Observed (call 3): grad of x0: 16/256 elements; at [0, 0, 0, 0]: graphfuser nan, eager 0.203496, fp64 reference 0.406992

Ops: _softmax, alias:float, inplace:fill_, layer_norm, mul, sin, size. Calls (batch size, layout flipped): [(4, False), (4, False), (4, False), (4, False), (4, False), (4, False), (4, False)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float32['B', 4, 1, 16] dense edge requires_grad; x1: uint8[3, 16] dense nan_inf; x2: float32[16] dense normal; x3: float32[16] dense normal requires_grad; s0: float [3.0, 2.0]

Run from the repository root: PYTHONPATH=. python logs/fuzz-repros/cpu-34716-469-wrong_grad-layer_norm-overflow-row.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, x3: torch.Tensor, s0: float):
    v0 = F.layer_norm(x0, [16], x2, x3, 0.1)
    v1 = x1 * v0.size(-1)
    v2 = x1 * v1.size(-1)
    v3 = torch.sin(x0)
    x1.fill_(0)
    v4 = x0 * s0
    v5 = v4 * x0.size(-1)
    v6 = torch._softmax(v4, -3, False)
    v7 = v2 * v5.size(-1)
    v8 = v0 * v1.size(-1)
    v9 = v3.float()
    v3.mul_(0.5)
    return (v9, v0)


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, x3: torch.Tensor, s0: float):\n'
           '    v0 = F.layer_norm(x0, [16], x2, x3, 0.1)\n'
           '    v1 = x1 * v0.size(-1)\n'
           '    v2 = x1 * v1.size(-1)\n'
           '    v3 = torch.sin(x0)\n'
           '    x1.fill_(0)\n'
           '    v4 = x0 * s0\n'
           '    v5 = v4 * x0.size(-1)\n'
           '    v6 = torch._softmax(v4, -3, False)\n'
           '    v7 = v2 * v5.size(-1)\n'
           '    v8 = v0 * v1.size(-1)\n'
           '    v9 = v3.float()\n'
           '    v3.mul_(0.5)\n'
           '    return (v9, v0)\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': ['B', 4, 1, 16],
             'layout': 'dense',
             'fill': 'edge',
             'requires_grad': True},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'uint8',
             'shape': [3, 16],
             'layout': 'dense',
             'fill': 'nan_inf',
             'requires_grad': False},
            {'name': 'x2',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [16],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': False},
            {'name': 'x3',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [16],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': True},
            {'name': 's0', 'kind': 'float', 'values': [3.0, 2.0]}],
 'calls': [[4, False], [4, False], [4, False], [4, False], [4, False], [4, False], [4, False]],
 'ops': ['_softmax', 'alias:float', 'inplace:fill_', 'layer_norm', 'mul', 'sin', 'size'],
 'seed': 965,
 'autocast': None}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
