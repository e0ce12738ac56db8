"""graphfuser fuzz repro: crash.

Observed (call 2): backward: RuntimeError: one of the variables needed for gradient computation has been modified by an inplace operation: [CPUBFloat16Type [1]], which is output 0 of AsStrided, is at version 2; expected version 1 instead. Hint: enable anomaly detection to find the operation that failed to compute its gradient, with torch.autograd.set_detect_anomaly(True, check_nan=False).

Ops: alias:unsqueeze, inplace:copy_, logical_not, mul, rms_norm. Calls (batch size, layout flipped): [(1, False), (1, False), (1, False), (1, False), (1, True), (1, True), (1, True)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: bfloat16[] sliced zeros requires_grad; x1: bfloat16[] dense zeros requires_grad; x2: float32[1] dense normal requires_grad

Run from the repository root: PYTHONPATH=. python logs/fuzz-repros/cpu-01-crash-alias_unsqueeze-inplace_copy_.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor):
    v0 = 1e+30 * x0
    v1 = v0.unsqueeze(0)
    v1.mul_(2)
    v2 = x0.logical_not()
    v3 = F.rms_norm(v1, [1], x2, 1e-05)
    v0.copy_(x0)
    return (v3, v2, v0)


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor):\n'
           '    v0 = 1e+30 * x0\n'
           '    v1 = v0.unsqueeze(0)\n'
           '    v1.mul_(2)\n'
           '    v2 = x0.logical_not()\n'
           '    v3 = F.rms_norm(v1, [1], x2, 1e-05)\n'
           '    v0.copy_(x0)\n'
           '    return (v3, v2, v0)\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'bfloat16',
             'shape': [],
             'layout': 'sliced',
             'fill': 'zeros',
             'requires_grad': True},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'bfloat16',
             'shape': [],
             'layout': 'dense',
             'fill': 'zeros',
             'requires_grad': True},
            {'name': 'x2',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [1],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': True}],
 'calls': [[1, False], [1, False], [1, False], [1, False], [1, True], [1, True], [1, True]],
 'ops': ['alias:unsqueeze', 'inplace:copy_', 'logical_not', 'mul', 'rms_norm'],
 'seed': 21533,
 'autocast': None}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
