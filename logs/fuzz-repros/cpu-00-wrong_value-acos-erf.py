"""graphfuser fuzz repro: wrong_value.

Observed (call 6): output 0: 1/3000 elements; at [190, 0]: graphfuser 0, eager 0.000345267, fp64 reference 0.000238351

Ops: acos, erf, matmul. Calls (batch size, layout flipped): [(1000, False), (1000, False), (1000, False), (1000, False), (1000, False), (1000, False), (1000, False)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float64['B'] channels_last ints; x1: float32['B', 3] dense nan_inf

Run from the repository root: PYTHONPATH=. python /tmp/fz9292/fuzz-repros/cpu-00-wrong_value-acos-erf.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor):
    v0 = torch.matmul(x0, x1.to(x0.dtype))
    v1 = x1.erf()
    v2 = v1.acos()
    return v2


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor):\n'
           '    v0 = torch.matmul(x0, x1.to(x0.dtype))\n'
           '    v1 = x1.erf()\n'
           '    v2 = v1.acos()\n'
           '    return v2\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float64',
             'shape': ['B'],
             'layout': 'channels_last',
             'fill': 'ints',
             'requires_grad': False},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': ['B', 3],
             'layout': 'dense',
             'fill': 'nan_inf',
             'requires_grad': False}],
 'calls': [[1000, False],
           [1000, False],
           [1000, False],
           [1000, False],
           [1000, False],
           [1000, False],
           [1000, False]],
 'ops': ['acos', 'erf', 'matmul'],
 'seed': 10143,
 'autocast': None}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
