"""graphfuser fuzz repro: wrong_value.

Observed (call 0): output 0: 1/1 elements; at []: graphfuser 255, eager -1, fp64 reference -1

Ops: sub. Calls (batch size, layout flipped): [(1, False), (1, False), (1, False), (1, False), (1, False), (1, False), (1, False)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: uint8[] dense constant_rows; s0: float [0.0, 0.0]

Run from the repository root: PYTHONPATH=. python /root/out/c/fuzz-repros/cpu-00-wrong_value-sub.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, s0: float):
    v0 = s0 - x0
    return v0


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, s0: float):\n'
           '    v0 = s0 - x0\n'
           '    return v0\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'uint8',
             'shape': [],
             'layout': 'dense',
             'fill': 'constant_rows',
             'requires_grad': False},
            {'name': 's0', 'kind': 'float', 'values': [0.0, 0.0]}],
 'calls': [[1, False], [1, False], [1, False], [1, False], [1, False], [1, False], [1, False]],
 'ops': ['sub'],
 'seed': 303}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
