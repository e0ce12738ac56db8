"""graphfuser fuzz repro: wrong_value (known: issue 10 class 6: in-place writes through aliases).

Observed (call 0): output 0: 27/27 elements; at [0, 0, 0]: graphfuser -0.275569, eager 0.604752, fp64 reference 0.604752

Ops: add, alias:t. Calls (batch size, layout flipped): [(3, False), (3, False), (3, False), (3, False), (5, False), (5, False), (5, False)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float32['B', 3, 3] dense normal; x1: float32[] dense normal

Run from the repository root: PYTHONPATH=. python /root/out/g/fuzz-repros/cuda-00-wrong_value-add-alias_t.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor):
    v0 = x0.type_as(x0)
    v0.mul_(2)
    v1 = x0 + x1
    return v1


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor):\n'
           '    v0 = x0.type_as(x0)\n'
           '    v0.mul_(2)\n'
           '    v1 = x0 + x1\n'
           '    return v1\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': ['B', 3, 3],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': False},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': False}],
 'calls': [[3, False], [3, False], [3, False], [3, False], [5, False], [5, False], [5, False]],
 'ops': ['add', 'alias:t'],
 'seed': 600}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
