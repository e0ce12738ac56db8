"""graphfuser fuzz repro: wrong_shape (known: issue 10 class 6: in-place writes through aliases).

Observed (call 2): output 0: () vs eager (1,)

Ops: add, alias:unsqueeze. Calls (batch size, layout flipped): [(1, False), (1, False), (1, False), (1, False), (3, True), (3, True), (3, True)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: int64['B'] sliced normal; x1: float32[] sliced huge_mean; x2: float32[] dense normal

Run from the repository root: PYTHONPATH=. python /root/out/g/fuzz-repros/cuda-01-wrong_shape-add-alias_unsqueeze.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor):
    v0 = 1 + x2
    v1 = v0.unsqueeze(0)
    v1.mul_(2)
    return v1


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor):\n'
           '    v0 = 1 + x2\n'
           '    v1 = v0.unsqueeze(0)\n'
           '    v1.mul_(2)\n'
           '    return v1\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'int64',
             'shape': ['B'],
             'layout': 'sliced',
             'fill': 'normal',
             'requires_grad': False},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [],
             'layout': 'sliced',
             'fill': 'huge_mean',
             'requires_grad': False},
            {'name': 'x2',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': False}],
 'calls': [[1, False], [1, False], [1, False], [1, False], [3, True], [3, True], [3, True]],
 'ops': ['add', 'alias:unsqueeze'],
 'seed': 1331}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
