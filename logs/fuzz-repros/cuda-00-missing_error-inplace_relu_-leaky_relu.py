"""graphfuser fuzz repro: missing_error.

Observed (call 0): eager raised NotImplementedError: "leaky_relu_cuda" not implemented for 'Int'

Ops: inplace:relu_, leaky_relu, mul, sinh, trunc. Calls (batch size, layout flipped): [(300, False), (300, False), (300, False), (300, False), (1, False), (1, False), (1, False)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: int32['B'] dense ints

Run from the repository root: PYTHONPATH=. python logs/fuzz-repros/cuda-00-missing_error-inplace_relu_-leaky_relu.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor):
    v0 = F.leaky_relu(x0, 0.2)
    x0.relu_()
    v1 = x0.trunc()
    v2 = v0 * v1
    v3 = v1.sinh()
    return v3


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor):\n'
           '    v0 = F.leaky_relu(x0, 0.2)\n'
           '    x0.relu_()\n'
           '    v1 = x0.trunc()\n'
           '    v2 = v0 * v1\n'
           '    v3 = v1.sinh()\n'
           '    return v3\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'int32',
             'shape': ['B'],
             'layout': 'dense',
             'fill': 'ints',
             'requires_grad': False}],
 'calls': [[300, False], [300, False], [300, False], [300, False], [1, False], [1, False], [1, False]],
 'ops': ['inplace:relu_', 'leaky_relu', 'mul', 'sinh', 'trunc'],
 'seed': 156}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
