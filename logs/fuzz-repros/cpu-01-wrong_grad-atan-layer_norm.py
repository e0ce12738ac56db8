"""graphfuser fuzz repro: wrong_grad.

Observed (call 2): grad of x0: 16/1584 elements; at [1, 22, 0]: graphfuser -0.000148905, eager -0.000126499, fp64 reference -0.000126499

Ops: atan, layer_norm, var_mean. Calls (batch size, layout flipped): [(3, False), (3, False), (3, False), (3, False), (7, True), (7, True), (7, True)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float32['B', 33, 16] transposed huge_mean requires_grad; x1: float32[16] dense normal; x2: float32[16] dense normal requires_grad

Run from the repository root: PYTHONPATH=. python /tmp/fz9292/fuzz-repros/cpu-01-wrong_grad-atan-layer_norm.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor):
    v0 = x0.atan()
    v1 = F.layer_norm(v0, [16], x1, x2, 1e-12)
    v2, v3 = torch.var_mean(v1, [2], correction=2, keepdim=False)
    return (v3, v0)


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor):\n'
           '    v0 = x0.atan()\n'
           '    v1 = F.layer_norm(v0, [16], x1, x2, 1e-12)\n'
           '    v2, v3 = torch.var_mean(v1, [2], correction=2, keepdim=False)\n'
           '    return (v3, v0)\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': ['B', 33, 16],
             'layout': 'transposed',
             'fill': 'huge_mean',
             'requires_grad': True},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [16],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': False},
            {'name': 'x2',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [16],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': True}],
 'calls': [[3, False], [3, False], [3, False], [3, False], [7, True], [7, True], [7, True]],
 'ops': ['atan', 'layer_norm', 'var_mean'],
 'seed': 230,
 'autocast': None}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
