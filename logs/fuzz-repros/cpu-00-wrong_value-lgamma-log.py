"""graphfuser fuzz repro: wrong_value.

Observed (call 4): output 0: 2/256 elements; at [0, 1, 11]: graphfuser 42.3772, eager 42.3738, fp64 reference 42.373

Ops: lgamma, log, size, tan. Calls (batch size, layout flipped): [(4, False), (4, False), (4, False), (4, False), (4, False), (4, False), (4, False)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float32['B', 4, 16] sliced nan_inf; x1: int32['B', 1, 16] dense huge_mean

Run from the repository root: PYTHONPATH=. python /tmp/fz8787/fuzz-repros/cpu-00-wrong_value-lgamma-log.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor):
    v0 = x0.lgamma()
    v1 = x1 * v0.size(-1)
    v2 = v0 * v1.size(-1)
    v3 = v2.log()
    v4 = v2.tan()
    return v4


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor):\n'
           '    v0 = x0.lgamma()\n'
           '    v1 = x1 * v0.size(-1)\n'
           '    v2 = v0 * v1.size(-1)\n'
           '    v3 = v2.log()\n'
           '    v4 = v2.tan()\n'
           '    return v4\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': ['B', 4, 16],
             'layout': 'sliced',
             'fill': 'nan_inf',
             'requires_grad': False},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'int32',
             'shape': ['B', 1, 16],
             'layout': 'dense',
             'fill': 'huge_mean',
             'requires_grad': False}],
 'calls': [[4, False], [4, False], [4, False], [4, False], [4, False], [4, False], [4, False]],
 'ops': ['lgamma', 'log', 'size', 'tan'],
 'seed': 9381,
 'autocast': None}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
