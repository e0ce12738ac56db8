"""graphfuser fuzz repro: missing_error.

Observed (call 4): eager raised RuntimeError: view size is not compatible with input tensor's size and stride (at least one dimension spans across two contiguous subspaces). Use .reshape(...) instead.

Ops: addmm, alias:dropout, alias:t, alias:unsqueeze, alias:view, div, inplace:neg_, isfinite, linear, logical_or, masked_fill, matmul, mul, std_mean, threshold. Calls (batch size, layout flipped): [(2, False), (2, False), (2, False), (2, False), (2, True), (2, True), (2, True)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: bfloat16['B', 3] dense nan_inf; x1: float32[3] channels_last normal; x2: float32[3] dense ints; s0: float [-0.0, -0.0]; x3: float32[8, 3] dense normal; x4: float32[8] dense normal; x5: float32[3, 1] dense ints; x6: float32[3, 1] dense ints; x7: float32[1] dense zeros; x8: float32[1, 1] dense huge_mean; x9: float32[1] dense huge_mean requires_grad

Cause: sink_views moved the view onto x0 as a reshape of x0 (mul(reshape(x0, -1), s0)); after the
layout flip the reshape copied where eager's view of the transposed product raises. Fixed: the
moved view checks what eager's view of the product would (graphfuser::view_check,
ops/views.py); tests/passes/test_sink_views.py::test_a_moved_view_raises_where_eagers_view_raises.

Run from the repository root: PYTHONPATH=. GRAPHFUSER_FUZZ_CUDA_DECISIONS=1 python logs/fuzz-repros/cpu-34745-820-missing_error-view-of-transposed-product.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, s0: float, x3: torch.Tensor, x4: torch.Tensor, x5: torch.Tensor, x6: torch.Tensor, x7: torch.Tensor, x8: torch.Tensor, x9: torch.Tensor):
    v0 = torch.mul(x0, s0)
    v1 = v0.view(-1)
    v1.mul_(2)
    v2 = x2.unsqueeze(0)
    x2.add_(1)
    v3, v4 = torch.std_mean(v0, [1], unbiased=True, keepdim=True)
    v5 = F.threshold(v1, 0.1, 2.0)
    v6 = v1.masked_fill((v3 > 0), 3.0)
    v7 = F.linear(x2, x3.to(x2.dtype), x4.to(x2.dtype))
    v8 = torch.matmul(x0, x5.to(x0.dtype))
    v9 = torch.addmm(x7.to(v2.dtype), v2.reshape(-1, v2.size(-1)), x6.to(v2.dtype)).unflatten(0, v2.shape[:-1])
    v10 = v4.t()
    v4.add_(1)
    v5.neg_()
    v11 = F.dropout(x5, 0.5, False)
    x5.add_(1)
    v12 = torch.logical_or(v0, v3)
    v13 = F.linear(v3, x8.to(v3.dtype), x9.to(v3.dtype))
    v14 = x8.isfinite()
    v15 = torch.div(x8, bool(0))
    return (v15, v1, v11)


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, s0: float, x3: torch.Tensor, x4: '
           'torch.Tensor, x5: torch.Tensor, x6: torch.Tensor, x7: torch.Tensor, x8: torch.Tensor, x9: '
           'torch.Tensor):\n'
           '    v0 = torch.mul(x0, s0)\n'
           '    v1 = v0.view(-1)\n'
           '    v1.mul_(2)\n'
           '    v2 = x2.unsqueeze(0)\n'
           '    x2.add_(1)\n'
           '    v3, v4 = torch.std_mean(v0, [1], unbiased=True, keepdim=True)\n'
           '    v5 = F.threshold(v1, 0.1, 2.0)\n'
           '    v6 = v1.masked_fill((v3 > 0), 3.0)\n'
           '    v7 = F.linear(x2, x3.to(x2.dtype), x4.to(x2.dtype))\n'
           '    v8 = torch.matmul(x0, x5.to(x0.dtype))\n'
           '    v9 = torch.addmm(x7.to(v2.dtype), v2.reshape(-1, v2.size(-1)), x6.to(v2.dtype)).unflatten(0, '
           'v2.shape[:-1])\n'
           '    v10 = v4.t()\n'
           '    v4.add_(1)\n'
           '    v5.neg_()\n'
           '    v11 = F.dropout(x5, 0.5, False)\n'
           '    x5.add_(1)\n'
           '    v12 = torch.logical_or(v0, v3)\n'
           '    v13 = F.linear(v3, x8.to(v3.dtype), x9.to(v3.dtype))\n'
           '    v14 = x8.isfinite()\n'
           '    v15 = torch.div(x8, bool(0))\n'
           '    return (v15, v1, v11)\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'bfloat16',
             'shape': ['B', 3],
             'layout': 'dense',
             'fill': 'nan_inf',
             'requires_grad': False},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [3],
             'layout': 'channels_last',
             'fill': 'normal',
             'requires_grad': False},
            {'name': 'x2',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [3],
             'layout': 'dense',
             'fill': 'ints',
             'requires_grad': False},
            {'name': 's0', 'kind': 'float', 'values': [-0.0, -0.0]},
            {'name': 'x3',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [8, 3],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': False},
            {'name': 'x4',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [8],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': False},
            {'name': 'x5',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [3, 1],
             'layout': 'dense',
             'fill': 'ints',
             'requires_grad': False},
            {'name': 'x6',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [3, 1],
             'layout': 'dense',
             'fill': 'ints',
             'requires_grad': False},
            {'name': 'x7',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [1],
             'layout': 'dense',
             'fill': 'zeros',
             'requires_grad': False},
            {'name': 'x8',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [1, 1],
             'layout': 'dense',
             'fill': 'huge_mean',
             'requires_grad': False},
            {'name': 'x9',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [1],
             'layout': 'dense',
             'fill': 'huge_mean',
             'requires_grad': True}],
 'calls': [[2, False], [2, False], [2, False], [2, False], [2, True], [2, True], [2, True]],
 'ops': ['addmm',
         'alias:dropout',
         'alias:t',
         'alias:unsqueeze',
         'alias:view',
         'div',
         'inplace:neg_',
         'isfinite',
         'linear',
         'logical_or',
         'masked_fill',
         'matmul',
         'mul',
         'std_mean',
         'threshold'],
 'seed': 65535,
 'autocast': None}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
