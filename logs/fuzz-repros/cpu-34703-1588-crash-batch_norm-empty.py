"""graphfuser fuzz repro: crash.

Observed (call 4): RuntimeError: The size of tensor a (35) must match the size of tensor b (33) at non-singleton dimension 0

Ops: alias:dropout, alias:squeeze, alias:unsqueeze, batch_norm, eq, isinf, le, lgamma, log1p, logical_and, min_other, mul, size. Calls (batch size, layout flipped): [(33, False), (33, False), (33, False), (33, False), (35, True), (35, True), (35, True)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: bfloat16['B', 0, 5, 0] sliced positive; x1: bfloat16[1, 0] channels_last zeros; s0: int [2, 2]; x2: float32[33] dense normal; x3: float32[33] dense positive; x4: float32[33] dense normal

Fixed in passes/batch_norm.py (_eligible: a batch norm profiled on an empty input is left as it is); test:
tests/fuzz/test_fuzz_repros_2.py::test_training_batch_norm_of_an_empty_input_beside_stats_of_another_width.

Run from the repository root: PYTHONPATH=. python logs/fuzz-repros/cpu-34703-1588-crash-batch_norm-empty.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor, s0: int, x2: torch.Tensor, x3: torch.Tensor, x4: torch.Tensor):
    v0 = torch.eq(x1, s0)
    v1 = torch.min(v0, x0)
    v2 = x0.unsqueeze(0)
    x0.mul_(0.5)
    v3 = v1.isinf()
    v4 = torch.log1p(v2)
    v5 = torch.logical_and(x0, x0)
    v6 = v1 <= float("inf")
    v7 = x0.squeeze()
    v7.mul_(2)
    v8 = 2.0 * v4
    v9 = F.dropout(v8, 0.5, False)
    v9.mul_(2)
    v10 = v7 * v3.size(-1)
    v11 = F.batch_norm(v4, x2, x3, None, x4, True, 0.1, 1e-12)
    v12 = torch.lgamma(v7)
    v13 = v9 * v5.size(-1)
    return (v13, v6, v12)


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor, s0: int, x2: torch.Tensor, x3: torch.Tensor, x4: '
           'torch.Tensor):\n'
           '    v0 = torch.eq(x1, s0)\n'
           '    v1 = torch.min(v0, x0)\n'
           '    v2 = x0.unsqueeze(0)\n'
           '    x0.mul_(0.5)\n'
           '    v3 = v1.isinf()\n'
           '    v4 = torch.log1p(v2)\n'
           '    v5 = torch.logical_and(x0, x0)\n'
           '    v6 = v1 <= float("inf")\n'
           '    v7 = x0.squeeze()\n'
           '    v7.mul_(2)\n'
           '    v8 = 2.0 * v4\n'
           '    v9 = F.dropout(v8, 0.5, False)\n'
           '    v9.mul_(2)\n'
           '    v10 = v7 * v3.size(-1)\n'
           '    v11 = F.batch_norm(v4, x2, x3, None, x4, True, 0.1, 1e-12)\n'
           '    v12 = torch.lgamma(v7)\n'
           '    v13 = v9 * v5.size(-1)\n'
           '    return (v13, v6, v12)\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'bfloat16',
             'shape': ['B', 0, 5, 0],
             'layout': 'sliced',
             'fill': 'positive',
             'requires_grad': False},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'bfloat16',
             'shape': [1, 0],
             'layout': 'channels_last',
             'fill': 'zeros',
             'requires_grad': False},
            {'name': 's0', 'kind': 'int', 'values': [2, 2]},
            {'name': 'x2',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [33],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': False},
            {'name': 'x3',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [33],
             'layout': 'dense',
             'fill': 'positive',
             'requires_grad': False},
            {'name': 'x4',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [33],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': False}],
 'calls': [[33, False], [33, False], [33, False], [33, False], [35, True], [35, True], [35, True]],
 'ops': ['alias:dropout',
         'alias:squeeze',
         'alias:unsqueeze',
         'batch_norm',
         'eq',
         'isinf',
         'le',
         'lgamma',
         'log1p',
         'logical_and',
         'min_other',
         'mul',
         'size'],
 'seed': 230,
 'autocast': None}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
