"""graphfuser fuzz repro: wrong_value.

Observed (call 2): output 0: 56/63 elements; at [0, 0, 0]: graphfuser nan, eager 0, fp64 reference 0

Ops: inplace:clamp_, round. Calls (batch size, layout flipped): [(3, False), (3, False), (3, False), (3, False), (7, False), (7, False), (7, False)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float32['B', 3, 7] dense nan_inf

Run from the repository root: PYTHONPATH=. python logs/fuzz-repros/cpu-00-wrong_value-inplace_clamp_-round.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor):
    v0 = torch.round(x0)
    v0.clamp_(min=float("nan"))
    return v0


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor):\n'
           '    v0 = torch.round(x0)\n'
           '    v0.clamp_(min=float("nan"))\n'
           '    return v0\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': ['B', 3, 7],
             'layout': 'dense',
             'fill': 'nan_inf',
             'requires_grad': False}],
 'calls': [[3, False], [3, False], [3, False], [3, False], [7, False], [7, False], [7, False]],
 'ops': ['inplace:clamp_', 'round'],
 'seed': 1798}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
