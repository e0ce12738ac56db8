"""graphfuser fuzz repro: wrong_grad.

Observed (call 2): grad of x1: 112/1000 elements; at [0, 27]: graphfuser 0, eager nan, fp64 reference nan

Ops: layer_norm, threshold. Calls (batch size, layout flipped): [(4, False), (4, False), (4, False), (4, False), (9, False), (9, False), (9, False)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: uint8['B', 1000] dense ints; x1: float32[1, 1000] sliced nan_inf requires_grad

Run from the repository root: PYTHONPATH=. python logs/fuzz-repros/cpu-00-wrong_grad-layer_norm-threshold.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor):
    v0 = F.threshold(x1, 0.1, 0.0)
    v1 = F.layer_norm(v0, [1, 1000], None, None, 0.1)
    return v1


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor):\n'
           '    v0 = F.threshold(x1, 0.1, 0.0)\n'
           '    v1 = F.layer_norm(v0, [1, 1000], None, None, 0.1)\n'
           '    return v1\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'uint8',
             'shape': ['B', 1000],
             'layout': 'dense',
             'fill': 'ints',
             'requires_grad': False},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [1, 1000],
             'layout': 'sliced',
             'fill': 'nan_inf',
             'requires_grad': True}],
 'calls': [[4, False], [4, False], [4, False], [4, False], [9, False], [9, False], [9, False]],
 'ops': ['layer_norm', 'threshold'],
 'seed': 727,
 'autocast': 'bfloat16'}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
