"""graphfuser fuzz repro: wrong_value.

Observed (call 1): input x0 after the call: 5/5 elements; at [0, 0]: graphfuser 2.33333, eager 1.33333

Ops: _log_softmax, alias:reshape, relu6, size. Calls (batch size, layout flipped): [(7, False), (7, False), (7, False), (7, False), (9, False), (9, False), (9, False)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float32[1, 5] channels_last constant_rows

Run from the repository root: PYTHONPATH=. python /root/out/fc/fuzz-repros/cpu-00-wrong_value-_log_softmax-alias_reshape.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor):
    v0 = x0 * x0.size(-1)
    v1 = F.relu6(x0)
    v2 = x0.reshape(-1)
    x0.add_(1)
    v3 = torch._log_softmax(v1, 0, False)
    return v3


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor):\n'
           '    v0 = x0 * x0.size(-1)\n'
           '    v1 = F.relu6(x0)\n'
           '    v2 = x0.reshape(-1)\n'
           '    x0.add_(1)\n'
           '    v3 = torch._log_softmax(v1, 0, False)\n'
           '    return v3\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [1, 5],
             'layout': 'channels_last',
             'fill': 'constant_rows',
             'requires_grad': False}],
 'calls': [[7, False], [7, False], [7, False], [7, False], [9, False], [9, False], [9, False]],
 'ops': ['_log_softmax', 'alias:reshape', 'relu6', 'size'],
 'seed': 2448}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
