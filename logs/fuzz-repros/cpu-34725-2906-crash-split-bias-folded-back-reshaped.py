"""graphfuser fuzz repro: crash.

Observed (call 2): RuntimeError: The size of tensor a (7) must match the size of tensor b (3) at non-singleton dimension 1

Ops: alias:contiguous, inplace:add_, linear, linear_permute, log1p, var. Calls (batch size, layout flipped): [(4, False), (4, False), (4, False), (4, False), (4, False), (4, False), (4, False)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float32[1, 7, 5, 7] transposed zeros; x1: bfloat16[7] dense positive; x2: bfloat16[] sliced ints; x3: float32[3, 7] dense ints; x4: float32[3] dense ints; x5: float32[3, 3] dense constant_rows; x6: float32[3] dense huge_mean

Fixed in passes/bias.py (restore_unfused_bias); test: tests/fuzz/test_fuzz_repros_2.py::test_a_split_bias_reshaped_by_a_later_pass_is_not_folded_back.

Run from the repository root: PYTHONPATH=. python logs/fuzz-repros/cpu-34725-2906-crash-split-bias-folded-back-reshaped.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, x3: torch.Tensor, x4: torch.Tensor, x5: torch.Tensor, x6: torch.Tensor):
    v0 = x0.contiguous()
    x0.mul_(0.5)
    v1 = F.linear(x0, x3.to(x0.dtype), x4.to(x0.dtype)).permute(0, 3, 1, 2)
    v2 = F.linear(x4, x5.to(x4.dtype), x6.to(x4.dtype))
    x4.add_(7)
    v3 = torch.var(v0, [2], unbiased=False, keepdim=True)
    v4 = v1.log1p()
    return (v4, v2)


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, x3: torch.Tensor, x4: torch.Tensor, '
           'x5: torch.Tensor, x6: torch.Tensor):\n'
           '    v0 = x0.contiguous()\n'
           '    x0.mul_(0.5)\n'
           '    v1 = F.linear(x0, x3.to(x0.dtype), x4.to(x0.dtype)).permute(0, 3, 1, 2)\n'
           '    v2 = F.linear(x4, x5.to(x4.dtype), x6.to(x4.dtype))\n'
           '    x4.add_(7)\n'
           '    v3 = torch.var(v0, [2], unbiased=False, keepdim=True)\n'
           '    v4 = v1.log1p()\n'
           '    return (v4, v2)\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [1, 7, 5, 7],
             'layout': 'transposed',
             'fill': 'zeros',
             'requires_grad': False},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'bfloat16',
             'shape': [7],
             'layout': 'dense',
             'fill': 'positive',
             'requires_grad': False},
            {'name': 'x2',
             'kind': 'tensor',
             'dtype': 'bfloat16',
             'shape': [],
             'layout': 'sliced',
             'fill': 'ints',
             'requires_grad': False},
            {'name': 'x3',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [3, 7],
             'layout': 'dense',
             'fill': 'ints',
             'requires_grad': False},
            {'name': 'x4',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [3],
             'layout': 'dense',
             'fill': 'ints',
             'requires_grad': False},
            {'name': 'x5',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [3, 3],
             'layout': 'dense',
             'fill': 'constant_rows',
             'requires_grad': False},
            {'name': 'x6',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [3],
             'layout': 'dense',
             'fill': 'huge_mean',
             'requires_grad': False}],
 'calls': [[4, False], [4, False], [4, False], [4, False], [4, False], [4, False], [4, False]],
 'ops': ['alias:contiguous', 'inplace:add_', 'linear', 'linear_permute', 'log1p', 'var'],
 'seed': 544,
 'autocast': None}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
