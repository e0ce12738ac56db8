"""graphfuser fuzz repro: missing_error.

Observed (call 0): eager raised RuntimeError: The size of tensor a (33) must match the size of tensor b (8) at non-singleton dimension 1

Ops: _softmax, alias:reshape, alias:slice, alias:squeeze, bitwise_xor, inplace:neg_, linear, logical_xor, size, sum, var_mean. Calls (batch size, layout flipped): [(3, False), (3, False), (3, False), (3, False), (7, False), (7, False), (7, False)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: uint8['B', 33, 5, 1] channels_last positive; x1: float32[8, 33] dense positive requires_grad; x2: float32[8] dense zeros; x3: float32[3, 8] dense positive; x4: float32[3] dense constant_rows; x5: float32[3, 8] dense edge; x6: float32[3] dense positive

Run from the repository root: PYTHONPATH=. python /root/out/a/fuzz-repros/cuda-01-missing_error-_softmax-alias_reshape.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, x3: torch.Tensor, x4: torch.Tensor, x5: torch.Tensor, x6: torch.Tensor):
    v0 = torch.sum(x0, [0, 2, 3], keepdim=False, dtype=torch.float32)
    v1 = v0.squeeze()
    v1.mul_(2)
    v2 = F.linear(v0, x1.to(v0.dtype), x2.to(v0.dtype))
    v3 = torch.logical_xor(x1, v2)
    v0.neg_()
    v4 = v3[1:]
    v4.mul_(2)
    v5 = torch._softmax(v2, 0, False)
    v6 = v2 * x1.size(-1)
    v7, v8 = torch.var_mean(v2, [0], unbiased=True, keepdim=False)
    v9 = v8.reshape(-1)
    v8.mul_(0.5)
    v10 = F.linear(x2, x3.to(x2.dtype), x4.to(x2.dtype))
    v11 = F.linear(x2, x5.to(x2.dtype), x6.to(x2.dtype))
    v12 = 1 ^ x0
    return v12


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, x3: torch.Tensor, x4: torch.Tensor, '
           'x5: torch.Tensor, x6: torch.Tensor):\n'
           '    v0 = torch.sum(x0, [0, 2, 3], keepdim=False, dtype=torch.float32)\n'
           '    v1 = v0.squeeze()\n'
           '    v1.mul_(2)\n'
           '    v2 = F.linear(v0, x1.to(v0.dtype), x2.to(v0.dtype))\n'
           '    v3 = torch.logical_xor(x1, v2)\n'
           '    v0.neg_()\n'
           '    v4 = v3[1:]\n'
           '    v4.mul_(2)\n'
           '    v5 = torch._softmax(v2, 0, False)\n'
           '    v6 = v2 * x1.size(-1)\n'
           '    v7, v8 = torch.var_mean(v2, [0], unbiased=True, keepdim=False)\n'
           '    v9 = v8.reshape(-1)\n'
           '    v8.mul_(0.5)\n'
           '    v10 = F.linear(x2, x3.to(x2.dtype), x4.to(x2.dtype))\n'
           '    v11 = F.linear(x2, x5.to(x2.dtype), x6.to(x2.dtype))\n'
           '    v12 = 1 ^ x0\n'
           '    return v12\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'uint8',
             'shape': ['B', 33, 5, 1],
             'layout': 'channels_last',
             'fill': 'positive',
             'requires_grad': False},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [8, 33],
             'layout': 'dense',
             'fill': 'positive',
             'requires_grad': True},
            {'name': 'x2',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [8],
             'layout': 'dense',
             'fill': 'zeros',
             'requires_grad': False},
            {'name': 'x3',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [3, 8],
             'layout': 'dense',
             'fill': 'positive',
             'requires_grad': False},
            {'name': 'x4',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [3],
             'layout': 'dense',
             'fill': 'constant_rows',
             'requires_grad': False},
            {'name': 'x5',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [3, 8],
             'layout': 'dense',
             'fill': 'edge',
             'requires_grad': False},
            {'name': 'x6',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [3],
             'layout': 'dense',
             'fill': 'positive',
             'requires_grad': False}],
 'calls': [[3, False], [3, False], [3, False], [3, False], [7, False], [7, False], [7, False]],
 'ops': ['_softmax',
         'alias:reshape',
         'alias:slice',
         'alias:squeeze',
         'bitwise_xor',
         'inplace:neg_',
         'linear',
         'logical_xor',
         'size',
         'sum',
         'var_mean'],
 'seed': 1166,
 'autocast': None}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
