"""graphfuser fuzz repro: wrong_value (known: issue 10 class 6: in-place writes through aliases).

Observed (call 0): output 0: 6/6 elements; at [0, 0]: graphfuser 1.79796, eager 3.59592, fp64 reference 3.59592

Ops: add, alias:type_as. Calls (batch size, layout flipped): [(2, False), (2, False), (2, False), (2, False), (4, False), (4, False), (4, False)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float32['B', 3] dense normal

Run from the repository root: PYTHONPATH=. python /root/out/c/fuzz-repros/cpu-01-wrong_value-add-alias_type_as.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor):
    v0 = x0.type_as(x0)
    v0.mul_(2)
    v1 = x0 + x0
    return v1


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor):\n'
           '    v0 = x0.type_as(x0)\n'
           '    v0.mul_(2)\n'
           '    v1 = x0 + x0\n'
           '    return v1\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': ['B', 3],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': False}],
 'calls': [[2, False], [2, False], [2, False], [2, False], [4, False], [4, False], [4, False]],
 'ops': ['add', 'alias:type_as'],
 'seed': 711}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
