"""graphfuser fuzz repro: wrong_value.

Observed (call 3): output 0: 1/1 elements; at [0, 0]: graphfuser nan, eager inf, fp64 reference 3.3133e+46

Ops: inplace:exp_, sinh, size, var. Calls (batch size, layout flipped): [(1, False), (1, False), (1, False), (1, False), (1, False), (1, False), (1, False)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float32['B', 2] expanded ints; x1: bool[] dense nan_inf; x2: int32['B', 2] channels_last ints

Run from the repository root: PYTHONPATH=. python /root/out/fc/fuzz-repros/cpu-02-wrong_value-inplace_exp_-sinh.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor):
    x0.exp_()
    v0 = x1 * x0.size(-1)
    v1 = x0.sinh()
    v2 = torch.var(v1, None, unbiased=True, keepdim=True)
    return v2


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor):\n'
           '    x0.exp_()\n'
           '    v0 = x1 * x0.size(-1)\n'
           '    v1 = x0.sinh()\n'
           '    v2 = torch.var(v1, None, unbiased=True, keepdim=True)\n'
           '    return v2\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': ['B', 2],
             'layout': 'expanded',
             'fill': 'ints',
             'requires_grad': False},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'bool',
             'shape': [],
             'layout': 'dense',
             'fill': 'nan_inf',
             'requires_grad': False},
            {'name': 'x2',
             'kind': 'tensor',
             'dtype': 'int32',
             'shape': ['B', 2],
             'layout': 'channels_last',
             'fill': 'ints',
             'requires_grad': False}],
 'calls': [[1, False], [1, False], [1, False], [1, False], [1, False], [1, False], [1, False]],
 'ops': ['inplace:exp_', 'sinh', 'size', 'var'],
 'seed': 45254}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
