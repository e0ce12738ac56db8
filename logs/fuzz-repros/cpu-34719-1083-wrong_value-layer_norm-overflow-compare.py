"""graphfuser fuzz repro: wrong_value.

Observed (call 2): output 0: 2/99 elements; at [0, 14, 0, 0]: graphfuser True, eager False

Ops: addmm, addmm_permute, clamp_max, erfc, expm1, layer_norm, log10, log1p, lt, rms_norm, size, to, var. Calls (batch size, layout flipped): [(1, False), (1, False), (1, False), (1, False), (3, True), (3, True), (3, True)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float32[1, 33, 1, 3] expanded edge; x1: float32[3, 8] dense nan_inf; x2: float32[8] dense positive; x3: float32[3, 1] dense normal; x4: float32[1] dense nan_inf

Run from the repository root: PYTHONPATH=. python logs/fuzz-repros/cpu-34719-1083-wrong_value-layer_norm-overflow-compare.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, x3: torch.Tensor, x4: torch.Tensor):
    v0 = F.layer_norm(x0, [1, 3], None, None, 1e-12)
    v1 = v0.log1p()
    v2 = v1.to(v0.dtype)
    v3 = torch.log10(v0)
    v4 = v3.erfc()
    v5 = torch.expm1(v2)
    v6 = v4 * torch.rsqrt(v4.pow(2).mean(-1, keepdim=True) + 0.1)
    v7 = v0.to(v4.dtype)
    v8 = torch.addmm(x2.to(x0.dtype), x0.reshape(-1, x0.size(-1)), x1.to(x0.dtype)).unflatten(0, x0.shape[:-1]).permute(0, 3, 1, 2)
    v9 = v3 * v0.size(-1)
    v10 = torch.var(v1, [-4], correction=0, keepdim=False)
    v11 = torch.clamp_max(v9, x0)
    v12 = torch.addmm(x4.to(v4.dtype), v4.reshape(-1, v4.size(-1)), x3.to(v4.dtype)).unflatten(0, v4.shape[:-1])
    v13 = x4 * x0.size(-1)
    v14 = torch.lt(v5, bool(1))
    return (v14, v11, v9)


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, x3: torch.Tensor, x4: '
           'torch.Tensor):\n'
           '    v0 = F.layer_norm(x0, [1, 3], None, None, 1e-12)\n'
           '    v1 = v0.log1p()\n'
           '    v2 = v1.to(v0.dtype)\n'
           '    v3 = torch.log10(v0)\n'
           '    v4 = v3.erfc()\n'
           '    v5 = torch.expm1(v2)\n'
           '    v6 = v4 * torch.rsqrt(v4.pow(2).mean(-1, keepdim=True) + 0.1)\n'
           '    v7 = v0.to(v4.dtype)\n'
           '    v8 = torch.addmm(x2.to(x0.dtype), x0.reshape(-1, x0.size(-1)), x1.to(x0.dtype)).unflatten(0, '
           'x0.shape[:-1]).permute(0, 3, 1, 2)\n'
           '    v9 = v3 * v0.size(-1)\n'
           '    v10 = torch.var(v1, [-4], correction=0, keepdim=False)\n'
           '    v11 = torch.clamp_max(v9, x0)\n'
           '    v12 = torch.addmm(x4.to(v4.dtype), v4.reshape(-1, v4.size(-1)), '
           'x3.to(v4.dtype)).unflatten(0, v4.shape[:-1])\n'
           '    v13 = x4 * x0.size(-1)\n'
           '    v14 = torch.lt(v5, bool(1))\n'
           '    return (v14, v11, v9)\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [1, 33, 1, 3],
             'layout': 'expanded',
             'fill': 'edge',
             'requires_grad': False},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [3, 8],
             'layout': 'dense',
             'fill': 'nan_inf',
             'requires_grad': False},
            {'name': 'x2',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [8],
             'layout': 'dense',
             'fill': 'positive',
             'requires_grad': False},
            {'name': 'x3',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [3, 1],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': False},
            {'name': 'x4',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [1],
             'layout': 'dense',
             'fill': 'nan_inf',
             'requires_grad': False}],
 'calls': [[1, False], [1, False], [1, False], [1, False], [3, True], [3, True], [3, True]],
 'ops': ['addmm',
         'addmm_permute',
         'clamp_max',
         'erfc',
         'expm1',
         'layer_norm',
         'log10',
         'log1p',
         'lt',
         'rms_norm',
         'size',
         'to',
         'var'],
 'seed': 2476,
 'autocast': None}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
