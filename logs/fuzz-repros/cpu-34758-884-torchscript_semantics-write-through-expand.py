"""graphfuser fuzz repro: missing_error.

Observed (call 0): eager raised RuntimeError: unsupported operation: more than one element of the written-to tensor refers to a single memory location. Please clone() the tensor before performing the operation.

Ops: addmm, alias:expand, alias:reshape, eq, fmod, inplace:div_, inplace:mul_, inplace:relu_, linear_permute, log, nan_to_num, remainder, size, std_mean. Calls (batch size, layout flipped): [(1, False), (1, False), (1, False), (1, False), (0, True), (0, True), (0, True)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float32[1, 7, 2, 33] dense normal; x1: float32[7, 2, 33] expanded zeros; s0: bool [False, False]; x2: float32[33, 8] dense constant_rows; x3: float32[8] dense huge_mean; s1: float [-1.25, -1.25]; x4: float32[1, 33] dense edge; x5: float32[1] dense positive

Judged: the deviation torchscript_semantics. Eager raises at v7.mul_(2), an in-place write into an
expanded view of std_mean's unused mean; TorchScript's frontend drops that write (dead: nothing reads
the mean), so graphfuser never sees it, and TorchScript's own function raises elsewhere (the implicit
conversion of x1, which graphfuser keeps as a tensor, as eager does). The oracle's program without
TorchScript's dead statements now drops a dead write through a view of a fresh value too
(fuzz/inherited.py _dead_statements_dropped); eager then answers as graphfuser does.
tests/fuzz/test_oracle_2.py::test_pruning_keeps_a_write_seen_through_a_live_view.

Run from the repository root: PYTHONPATH=. python logs/fuzz-repros/cpu-34758-884-torchscript_semantics-write-through-expand.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor, s0: bool, x2: torch.Tensor, x3: torch.Tensor, s1: float, x4: torch.Tensor, x5: torch.Tensor):
    v0 = s0 == x1
    v1 = x1.log()
    v2 = torch.addmm(x3.to(v1.dtype), v1.reshape(-1, v1.size(-1)), x2.to(v1.dtype)).unflatten(0, v1.shape[:-1])
    v3, v4 = torch.std_mean(x0, [0], unbiased=False, keepdim=True)
    x0.div_(bool(0))
    v5 = v1.reshape(-1)
    v1.mul_(0.5)
    v6 = torch.fmod(x0, s1)
    v5.mul_(bool(1))
    v7 = v4.expand([2, 1, 7, 2, 33])
    v7.mul_(2)
    v8 = torch.nan_to_num(v2, nan=1.5, posinf=1.0)
    v9 = v3 * v3.size(-1)
    v10 = v0 * v6.size(-1)
    v11 = F.linear(v9, x4.to(v9.dtype), x5.to(v9.dtype)).permute(0, 3, 1, 2)
    v8.relu_()
    v12 = torch.remainder(v9, bool(1))
    return (v12, v3, v0)


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor, s0: bool, x2: torch.Tensor, x3: torch.Tensor, s1: '
           'float, x4: torch.Tensor, x5: torch.Tensor):\n'
           '    v0 = s0 == x1\n'
           '    v1 = x1.log()\n'
           '    v2 = torch.addmm(x3.to(v1.dtype), v1.reshape(-1, v1.size(-1)), x2.to(v1.dtype)).unflatten(0, '
           'v1.shape[:-1])\n'
           '    v3, v4 = torch.std_mean(x0, [0], unbiased=False, keepdim=True)\n'
           '    x0.div_(bool(0))\n'
           '    v5 = v1.reshape(-1)\n'
           '    v1.mul_(0.5)\n'
           '    v6 = torch.fmod(x0, s1)\n'
           '    v5.mul_(bool(1))\n'
           '    v7 = v4.expand([2, 1, 7, 2, 33])\n'
           '    v7.mul_(2)\n'
           '    v8 = torch.nan_to_num(v2, nan=1.5, posinf=1.0)\n'
           '    v9 = v3 * v3.size(-1)\n'
           '    v10 = v0 * v6.size(-1)\n'
           '    v11 = F.linear(v9, x4.to(v9.dtype), x5.to(v9.dtype)).permute(0, 3, 1, 2)\n'
           '    v8.relu_()\n'
           '    v12 = torch.remainder(v9, bool(1))\n'
           '    return (v12, v3, v0)\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [1, 7, 2, 33],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': False},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [7, 2, 33],
             'layout': 'expanded',
             'fill': 'zeros',
             'requires_grad': False},
            {'name': 's0', 'kind': 'bool', 'values': [False, False]},
            {'name': 'x2',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [33, 8],
             'layout': 'dense',
             'fill': 'constant_rows',
             'requires_grad': False},
            {'name': 'x3',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [8],
             'layout': 'dense',
             'fill': 'huge_mean',
             'requires_grad': False},
            {'name': 's1', 'kind': 'float', 'values': [-1.25, -1.25]},
            {'name': 'x4',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [1, 33],
             'layout': 'dense',
             'fill': 'edge',
             'requires_grad': False},
            {'name': 'x5',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [1],
             'layout': 'dense',
             'fill': 'positive',
             'requires_grad': False}],
 'calls': [[1, False], [1, False], [1, False], [1, False], [0, True], [0, True], [0, True]],
 'ops': ['addmm',
         'alias:expand',
         'alias:reshape',
         'eq',
         'fmod',
         'inplace:div_',
         'inplace:mul_',
         'inplace:relu_',
         'linear_permute',
         'log',
         'nan_to_num',
         'remainder',
         'size',
         'std_mean'],
 'seed': 1584,
 'autocast': None}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
