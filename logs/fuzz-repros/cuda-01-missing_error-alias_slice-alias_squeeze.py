"""graphfuser fuzz repro: missing_error.

Observed (call 0): eager raised AcceleratorError: CUDA error: invalid argument

Ops: alias:slice, alias:squeeze, asin, group_norm. Calls (batch size, layout flipped): [(3, False), (3, False), (3, False), (3, False), (3, True), (3, True), (3, True)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float32['B', 0, 7] dense ints; x1: float32[0] dense normal

Run from the repository root: PYTHONPATH=. python logs/fuzz-repros/cuda-01-missing_error-alias_slice-alias_squeeze.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor):
    v0 = x0[1:]
    x0.add_(1)
    v1 = torch.asin(v0)
    v2 = v1.squeeze()
    v1.mul_(0.5)
    v3 = F.group_norm(x0, 3, x1, None, 1e-05)
    return (v3, v1, v0)


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor):\n'
           '    v0 = x0[1:]\n'
           '    x0.add_(1)\n'
           '    v1 = torch.asin(v0)\n'
           '    v2 = v1.squeeze()\n'
           '    v1.mul_(0.5)\n'
           '    v3 = F.group_norm(x0, 3, x1, None, 1e-05)\n'
           '    return (v3, v1, v0)\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': ['B', 0, 7],
             'layout': 'dense',
             'fill': 'ints',
             'requires_grad': False},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [0],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': False}],
 'calls': [[3, False], [3, False], [3, False], [3, False], [3, True], [3, True], [3, True]],
 'ops': ['alias:slice', 'alias:squeeze', 'asin', 'group_norm'],
 'seed': 65536}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
