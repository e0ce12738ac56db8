"""graphfuser fuzz repro: missing_error.

Observed (call 0): eager raised RuntimeError: mixed dtype (CPU): all inputs must share same datatype.

Ops: alias:type_as, group_norm, inplace:sub_, logical_and, size. Calls (batch size, layout flipped): [(4, False), (4, False), (4, False), (4, False), (1, False), (1, False), (1, False)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float64['B', 16, 1, 16] transposed ints; x1: float64[] channels_last zeros; x2: float32[16] dense normal

Run from the repository root: PYTHONPATH=. python /root/out/fc/fuzz-repros/cpu-01-missing_error-alias_type_as-group_norm.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor):
    x0.sub_(x1)
    v0 = torch.logical_and(x0, x1)
    v1 = x0.type_as(x0)
    x0.mul_(0.5)
    v2 = x0 * x0.size(-1)
    v3 = F.group_norm(v1, 4, x2, None, 1e-05)
    return v3


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor):\n'
           '    x0.sub_(x1)\n'
           '    v0 = torch.logical_and(x0, x1)\n'
           '    v1 = x0.type_as(x0)\n'
           '    x0.mul_(0.5)\n'
           '    v2 = x0 * x0.size(-1)\n'
           '    v3 = F.group_norm(v1, 4, x2, None, 1e-05)\n'
           '    return v3\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float64',
             'shape': ['B', 16, 1, 16],
             'layout': 'transposed',
             'fill': 'ints',
             'requires_grad': False},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'float64',
             'shape': [],
             'layout': 'channels_last',
             'fill': 'zeros',
             'requires_grad': False},
            {'name': 'x2',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [16],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': False}],
 'calls': [[4, False], [4, False], [4, False], [4, False], [1, False], [1, False], [1, False]],
 'ops': ['alias:type_as', 'group_norm', 'inplace:sub_', 'logical_and', 'size'],
 'seed': 1168}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
