"""graphfuser fuzz repro: wrong_grad.

Observed (call 2): grad of x1: 1/14 elements; at [0, 1, 0]: graphfuser nan, eager 0, fp64 reference 0

Ops: addcdiv, alias:squeeze, hardtanh, inplace:clamp_, isinf, sinh, size. Calls (batch size, layout flipped): [(0, False), (0, False), (0, False), (0, False), (1, False), (1, False), (1, False)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: int8['B', 1, 7, 2] dense zeros; x1: float64[1, 7, 2] dense edge requires_grad

Run from the repository root: PYTHONPATH=. python logs/fuzz-repros/cpu-34712-113-wrong_grad-hardtanh-addcdiv.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor):
    v0 = x0.squeeze()
    v0.mul_(2)
    v1 = F.hardtanh(x1, -0.5, 0.25)
    v2 = torch.addcdiv(x1, x1, v1, value=-2.0)
    v3 = v1 * v2.size(-1)
    v4 = x0 * v1.size(-1)
    v5 = torch.isinf(v2)
    v6 = v1.sinh()
    v2.clamp_(min=float("nan"))
    return (v6, v0)


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor):\n'
           '    v0 = x0.squeeze()\n'
           '    v0.mul_(2)\n'
           '    v1 = F.hardtanh(x1, -0.5, 0.25)\n'
           '    v2 = torch.addcdiv(x1, x1, v1, value=-2.0)\n'
           '    v3 = v1 * v2.size(-1)\n'
           '    v4 = x0 * v1.size(-1)\n'
           '    v5 = torch.isinf(v2)\n'
           '    v6 = v1.sinh()\n'
           '    v2.clamp_(min=float("nan"))\n'
           '    return (v6, v0)\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'int8',
             'shape': ['B', 1, 7, 2],
             'layout': 'dense',
             'fill': 'zeros',
             'requires_grad': False},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'float64',
             'shape': [1, 7, 2],
             'layout': 'dense',
             'fill': 'edge',
             'requires_grad': True}],
 'calls': [[0, False], [0, False], [0, False], [0, False], [1, False], [1, False], [1, False]],
 'ops': ['addcdiv', 'alias:squeeze', 'hardtanh', 'inplace:clamp_', 'isinf', 'sinh', 'size'],
 'seed': 65536,
 'autocast': None}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
