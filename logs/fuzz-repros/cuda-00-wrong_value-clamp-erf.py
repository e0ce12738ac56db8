"""graphfuser fuzz repro: wrong_value.

Observed (call 2): output 0: 231/231 elements; at [0, 0]: graphfuser 0.749209, eager nan, fp64 reference nan

Ops: clamp, erf. Calls (batch size, layout flipped): [(33, False), (33, False), (33, False), (33, False), (1, False), (1, False), (1, False)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float32['B', 7] sliced positive

Run from the repository root: PYTHONPATH=. python logs/fuzz-repros/cuda-00-wrong_value-clamp-erf.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor):
    v0 = x0.clamp(-0.5, float("nan"))
    v1 = torch.erf(v0)
    return (v1, v0)


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor):\n'
           '    v0 = x0.clamp(-0.5, float("nan"))\n'
           '    v1 = torch.erf(v0)\n'
           '    return (v1, v0)\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': ['B', 7],
             'layout': 'sliced',
             'fill': 'positive',
             'requires_grad': False}],
 'calls': [[33, False], [33, False], [33, False], [33, False], [1, False], [1, False], [1, False]],
 'ops': ['clamp', 'erf'],
 'seed': 557}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
