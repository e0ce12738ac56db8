"""graphfuser fuzz repro: crash.

Observed (call 2): RuntimeError: The expanded size of the tensor (0) must match the existing size (8) at non-singleton dimension 0.  Target sizes: [0, 8].  Tensor sizes: [8, 1]

Ops: alias:slice, exp2, inplace:mul_, le, linear_permute, reciprocal, size, sub, to. Calls (batch size, layout flipped): [(0, False), (0, False), (0, False), (0, False), (0, False), (0, False), (0, False)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: uint8['B', 16, 1] dense edge; x1: float32[1] dense nan_inf; x2: float32[8, 1] dense zeros requires_grad; x3: float32[8] dense huge_mean

Open: not reproduced alone, nor after graphs 0-56 of its seed in one worker (a fuzz run of two workers met it once).

Run from the repository root: PYTHONPATH=. GRAPHFUSER_FUZZ_FRONTEND=compile python logs/fuzz-repros/cpu-34726-56-crash-not-reproduced-alone.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, x3: torch.Tensor):
    v0 = x0.to(x1.dtype)
    v1 = v0.exp2()
    v2 = F.linear(v1, x2.to(v1.dtype), x3.to(v1.dtype)).permute(0, 2, 1)
    v3 = 0 - x1
    v4 = v0[1:]
    v0.add_(1)
    v5 = x2.reciprocal()
    v6 = x3 * v0.size(-1)
    v7 = torch.le(x2, v2)
    v7.mul_(bool(1))
    return (v7, v3)


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, x3: torch.Tensor):\n'
           '    v0 = x0.to(x1.dtype)\n'
           '    v1 = v0.exp2()\n'
           '    v2 = F.linear(v1, x2.to(v1.dtype), x3.to(v1.dtype)).permute(0, 2, 1)\n'
           '    v3 = 0 - x1\n'
           '    v4 = v0[1:]\n'
           '    v0.add_(1)\n'
           '    v5 = x2.reciprocal()\n'
           '    v6 = x3 * v0.size(-1)\n'
           '    v7 = torch.le(x2, v2)\n'
           '    v7.mul_(bool(1))\n'
           '    return (v7, v3)\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'uint8',
             'shape': ['B', 16, 1],
             'layout': 'dense',
             'fill': 'edge',
             'requires_grad': False},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [1],
             'layout': 'dense',
             'fill': 'nan_inf',
             'requires_grad': False},
            {'name': 'x2',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [8, 1],
             'layout': 'dense',
             'fill': 'zeros',
             'requires_grad': True},
            {'name': 'x3',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [8],
             'layout': 'dense',
             'fill': 'huge_mean',
             'requires_grad': False}],
 'calls': [[0, False], [0, False], [0, False], [0, False], [0, False], [0, False], [0, False]],
 'ops': ['alias:slice', 'exp2', 'inplace:mul_', 'le', 'linear_permute', 'reciprocal', 'size', 'sub', 'to'],
 'seed': 19151,
 'autocast': None}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
