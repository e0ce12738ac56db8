"""graphfuser fuzz repro: wrong_grad.

Observed (call 3): grad of x0: 1/140 elements; at [0, 0, 0, 3]: graphfuser inf, eager nan, fp64 reference nan

Ops: _log_softmax, hardswish, inplace:clamp_, inplace:copy_, inplace:div_, layer_norm, log1p, size, softmax, tan. Calls (batch size, layout flipped): [(2, False), (2, False), (2, False), (2, False), (2, False), (2, False), (2, False)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float16['B', 2, 5, 7] dense normal requires_grad; x1: float16[7] dense normal; x2: float16[7] dense normal

Run from the repository root: PYTHONPATH=. python logs/fuzz-repros/cpu-34717-1306-wrong_grad-layer_norm-div-by-zero.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor):
    v0 = F.layer_norm(x0, [7], x1, x2, 1e-12)
    v1 = torch.softmax(x0, 2)
    v2 = F.hardswish(x0)
    v3 = v1 * v1.size(-1)
    v4 = torch._log_softmax(v3, 3, False)
    v5 = v0.tan()
    v0.clamp_(min=-1.0)
    v6 = torch.log1p(v1)
    v0.div_(bool(0))
    v6.copy_(v0)
    return (v6, v0)


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor):\n'
           '    v0 = F.layer_norm(x0, [7], x1, x2, 1e-12)\n'
           '    v1 = torch.softmax(x0, 2)\n'
           '    v2 = F.hardswish(x0)\n'
           '    v3 = v1 * v1.size(-1)\n'
           '    v4 = torch._log_softmax(v3, 3, False)\n'
           '    v5 = v0.tan()\n'
           '    v0.clamp_(min=-1.0)\n'
           '    v6 = torch.log1p(v1)\n'
           '    v0.div_(bool(0))\n'
           '    v6.copy_(v0)\n'
           '    return (v6, v0)\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float16',
             'shape': ['B', 2, 5, 7],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': True},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'float16',
             'shape': [7],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': False},
            {'name': 'x2',
             'kind': 'tensor',
             'dtype': 'float16',
             'shape': [7],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': False}],
 'calls': [[2, False], [2, False], [2, False], [2, False], [2, False], [2, False], [2, False]],
 'ops': ['_log_softmax',
         'hardswish',
         'inplace:clamp_',
         'inplace:copy_',
         'inplace:div_',
         'layer_norm',
         'log1p',
         'size',
         'softmax',
         'tan'],
 'seed': 5050,
 'autocast': None}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
