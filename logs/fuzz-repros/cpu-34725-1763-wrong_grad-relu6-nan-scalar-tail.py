"""graphfuser fuzz repro: wrong_grad.

Observed (call 2): grad of x3: 28/1000 elements; at [0, 10]: graphfuser inf, eager 0, fp64 reference 0

Ops: _log_softmax, addmm, alias:slice, clamp_min, inplace:relu_, linear, max_other, mul, relu6, rotary. Calls (batch size, layout flipped): [(16, False), (16, False), (16, False), (16, False), (16, True), (16, True), (16, True)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: int64['B', 1] expanded edge; x1: uint8[1000] dense positive; x2: int32[] channels_last positive; s0: float [-1.25, -1.25]; x3: float32[1, 1000] dense edge requires_grad; x4: float32[1] dense constant_rows; x5: float32[1, 1000] dense normal; x6: float32[1, 1000] sliced normal requires_grad; x7: float32[1000, 3] dense edge requires_grad; x8: float32[3] dense edge requires_grad

Eager disagreeing with itself (hardtanh_nan_grad): the oracle now reruns eager with relu6 differentiated as its
scalar tail (fuzz/grads.py ScalarTailClamps); test: tests/fuzz/test_oracle.py::test_relu6_gradient_at_a_nan_is_matched_against_eagers_scalar_tail.

Run from the repository root: PYTHONPATH=. python logs/fuzz-repros/cpu-34725-1763-wrong_grad-relu6-nan-scalar-tail.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, s0: float, x3: torch.Tensor, x4: torch.Tensor, x5: torch.Tensor, x6: torch.Tensor, x7: torch.Tensor, x8: torch.Tensor):
    v0 = x1 * s0
    v1 = F.linear(v0, x3.to(v0.dtype), x4.to(v0.dtype))
    v2 = x3 * x5 + torch.cat((-x3[..., 500:], x3[..., :500]), -1) * x6
    v0.relu_()
    v3 = F.relu6(v2)
    v4 = torch.max(x1, x0)
    v5 = torch._log_softmax(x3, -1, False)
    v6 = torch.clamp_min(v3, v2)
    v7 = x4[1:]
    v7.mul_(2)
    v8 = torch.addmm(x8.to(v3.dtype), v3.reshape(-1, v3.size(-1)), x7.to(v3.dtype)).unflatten(0, v3.shape[:-1])
    return v8


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, s0: float, x3: torch.Tensor, x4: '
           'torch.Tensor, x5: torch.Tensor, x6: torch.Tensor, x7: torch.Tensor, x8: torch.Tensor):\n'
           '    v0 = x1 * s0\n'
           '    v1 = F.linear(v0, x3.to(v0.dtype), x4.to(v0.dtype))\n'
           '    v2 = x3 * x5 + torch.cat((-x3[..., 500:], x3[..., :500]), -1) * x6\n'
           '    v0.relu_()\n'
           '    v3 = F.relu6(v2)\n'
           '    v4 = torch.max(x1, x0)\n'
           '    v5 = torch._log_softmax(x3, -1, False)\n'
           '    v6 = torch.clamp_min(v3, v2)\n'
           '    v7 = x4[1:]\n'
           '    v7.mul_(2)\n'
           '    v8 = torch.addmm(x8.to(v3.dtype), v3.reshape(-1, v3.size(-1)), x7.to(v3.dtype)).unflatten(0, '
           'v3.shape[:-1])\n'
           '    return v8\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'int64',
             'shape': ['B', 1],
             'layout': 'expanded',
             'fill': 'edge',
             'requires_grad': False},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'uint8',
             'shape': [1000],
             'layout': 'dense',
             'fill': 'positive',
             'requires_grad': False},
            {'name': 'x2',
             'kind': 'tensor',
             'dtype': 'int32',
             'shape': [],
             'layout': 'channels_last',
             'fill': 'positive',
             'requires_grad': False},
            {'name': 's0', 'kind': 'float', 'values': [-1.25, -1.25]},
            {'name': 'x3',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [1, 1000],
             'layout': 'dense',
             'fill': 'edge',
             'requires_grad': True},
            {'name': 'x4',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [1],
             'layout': 'dense',
             'fill': 'constant_rows',
             'requires_grad': False},
            {'name': 'x5',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [1, 1000],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': False},
            {'name': 'x6',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [1, 1000],
             'layout': 'sliced',
             'fill': 'normal',
             'requires_grad': True},
            {'name': 'x7',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [1000, 3],
             'layout': 'dense',
             'fill': 'edge',
             'requires_grad': True},
            {'name': 'x8',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [3],
             'layout': 'dense',
             'fill': 'edge',
             'requires_grad': True}],
 'calls': [[16, False], [16, False], [16, False], [16, False], [16, True], [16, True], [16, True]],
 'ops': ['_log_softmax',
         'addmm',
         'alias:slice',
         'clamp_min',
         'inplace:relu_',
         'linear',
         'max_other',
         'mul',
         'relu6',
         'rotary'],
 'seed': 11473,
 'autocast': None}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
