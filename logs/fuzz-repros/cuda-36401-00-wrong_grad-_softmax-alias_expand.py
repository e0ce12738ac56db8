"""graphfuser fuzz repro: wrong_grad.

Observed (call 5): grad of x1: 1/16 elements; at [0, 14]: graphfuser inf, eager nan, fp64 reference nan

Ops: _softmax, alias:expand, group_norm, leaky_relu, linear, logical_or, matmul, maximum, remainder, size, var. Calls (batch size, layout flipped): [(0, False), (0, False), (0, False), (0, False), (0, True), (0, True), (0, True)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float64['B', 1, 1, 16] dense positive; x1: float16[1, 16] dense normal requires_grad; x2: float16[16] dense normal; s0: bool [False, False]; x3: float32[1, 16] dense zeros; x4: float32[1] dense huge_mean; x5: float32[16, 1] dense edge

Run from the repository root: PYTHONPATH=. python /root/out/a/fuzz-repros/cuda-00-wrong_grad-_softmax-alias_expand.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, s0: bool, x3: torch.Tensor, x4: torch.Tensor, x5: torch.Tensor):
    v0 = F.group_norm(x1, 4, x2, None, 1e-12)
    v1 = x0 % s0
    v2 = torch.maximum(v0, x1)
    v3 = v0 * v2.size(-1)
    v4 = torch.logical_or(v0, v0)
    v5 = torch.var(v1, None, unbiased=False, keepdim=False)
    v6 = F.leaky_relu(v2, 0.01)
    v7 = v4 * x0.size(-1)
    v8 = torch._softmax(v3, -1, False)
    v9 = F.linear(v2, x3.to(v2.dtype), x4.to(v2.dtype))
    v10 = v1.expand([2, 0, 1, 1, 16])
    v1.mul_(0.5)
    v11 = torch.matmul(v6, x5.to(v6.dtype))
    return (v11, v7)


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, s0: bool, x3: torch.Tensor, x4: '
           'torch.Tensor, x5: torch.Tensor):\n'
           '    v0 = F.group_norm(x1, 4, x2, None, 1e-12)\n'
           '    v1 = x0 % s0\n'
           '    v2 = torch.maximum(v0, x1)\n'
           '    v3 = v0 * v2.size(-1)\n'
           '    v4 = torch.logical_or(v0, v0)\n'
           '    v5 = torch.var(v1, None, unbiased=False, keepdim=False)\n'
           '    v6 = F.leaky_relu(v2, 0.01)\n'
           '    v7 = v4 * x0.size(-1)\n'
           '    v8 = torch._softmax(v3, -1, False)\n'
           '    v9 = F.linear(v2, x3.to(v2.dtype), x4.to(v2.dtype))\n'
           '    v10 = v1.expand([2, 0, 1, 1, 16])\n'
           '    v1.mul_(0.5)\n'
           '    v11 = torch.matmul(v6, x5.to(v6.dtype))\n'
           '    return (v11, v7)\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float64',
             'shape': ['B', 1, 1, 16],
             'layout': 'dense',
             'fill': 'positive',
             'requires_grad': False},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'float16',
             'shape': [1, 16],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': True},
            {'name': 'x2',
             'kind': 'tensor',
             'dtype': 'float16',
             'shape': [16],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': False},
            {'name': 's0', 'kind': 'bool', 'values': [False, False]},
            {'name': 'x3',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [1, 16],
             'layout': 'dense',
             'fill': 'zeros',
             'requires_grad': False},
            {'name': 'x4',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [1],
             'layout': 'dense',
             'fill': 'huge_mean',
             'requires_grad': False},
            {'name': 'x5',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [16, 1],
             'layout': 'dense',
             'fill': 'edge',
             'requires_grad': False}],
 'calls': [[0, False], [0, False], [0, False], [0, False], [0, True], [0, True], [0, True]],
 'ops': ['_softmax',
         'alias:expand',
         'group_norm',
         'leaky_relu',
         'linear',
         'logical_or',
         'matmul',
         'maximum',
         'remainder',
         'size',
         'var'],
 'seed': 36525,
 'autocast': None}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
