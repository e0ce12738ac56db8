"""graphfuser fuzz repro: wrong_grad.

Observed (call 2): grad of x2: 35/56 elements; at [0, 0]: graphfuser nan, eager 0.604251, fp64 reference 0.604251

Ops: addmm, hardswish, softmax. Calls (batch size, layout flipped): [(0, False), (0, False), (0, False), (0, False), (1, True), (1, True), (1, True)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float32[1, 7] dense nan_inf requires_grad; x1: bfloat16[7] transposed edge; x2: float32[7, 8] dense nan_inf requires_grad; x3: float32[8] dense constant_rows requires_grad; x4: float32[8, 3] dense constant_rows requires_grad; x5: float32[3] dense positive requires_grad

Judged: the deviation hardswish_nan_grad. The addmm's result holds NaNs; hardswish of its 8
elements took eager's scalar tail, which passes the upstream gradient at a NaN, where graphfuser's
CPU kernel keeps the vectorized chunks' NaN; the NaN carried on into the weight's gradient (eager
inf or a number). The oracle reruns eager with every hardswish differentiated as the vectorized
chunks (fuzz/grads.py ScalarTailClamps): graphfuser's gradients are that program's.
tests/fuzz/test_oracle.py::test_hardswish_gradient_at_a_nan_is_matched_against_eagers_vectorized_rule.

Run from the repository root: PYTHONPATH=. GRAPHFUSER_FUZZ_CUDA_DECISIONS=1 python logs/fuzz-repros/cpu-34750-948-hardswish_nan_grad-addmm-hardswish.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, x3: torch.Tensor, x4: torch.Tensor, x5: torch.Tensor):
    v0 = F.softmax(x1, dim=-1)
    v1 = torch.addmm(x3.to(x0.dtype), x0.reshape(-1, x0.size(-1)), x2.to(x0.dtype)).unflatten(0, x0.shape[:-1])
    v2 = F.hardswish(v1)
    v3 = torch.addmm(x5.to(v2.dtype), v2.reshape(-1, v2.size(-1)), x4.to(v2.dtype)).unflatten(0, v2.shape[:-1])
    return (v3, v0)


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, x3: torch.Tensor, x4: torch.Tensor, '
           'x5: torch.Tensor):\n'
           '    v0 = F.softmax(x1, dim=-1)\n'
           '    v1 = torch.addmm(x3.to(x0.dtype), x0.reshape(-1, x0.size(-1)), x2.to(x0.dtype)).unflatten(0, '
           'x0.shape[:-1])\n'
           '    v2 = F.hardswish(v1)\n'
           '    v3 = torch.addmm(x5.to(v2.dtype), v2.reshape(-1, v2.size(-1)), x4.to(v2.dtype)).unflatten(0, '
           'v2.shape[:-1])\n'
           '    return (v3, v0)\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [1, 7],
             'layout': 'dense',
             'fill': 'nan_inf',
             'requires_grad': True},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'bfloat16',
             'shape': [7],
             'layout': 'transposed',
             'fill': 'edge',
             'requires_grad': False},
            {'name': 'x2',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [7, 8],
             'layout': 'dense',
             'fill': 'nan_inf',
             'requires_grad': True},
            {'name': 'x3',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [8],
             'layout': 'dense',
             'fill': 'constant_rows',
             'requires_grad': True},
            {'name': 'x4',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [8, 3],
             'layout': 'dense',
             'fill': 'constant_rows',
             'requires_grad': True},
            {'name': 'x5',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [3],
             'layout': 'dense',
             'fill': 'positive',
             'requires_grad': True}],
 'calls': [[0, False], [0, False], [0, False], [0, False], [1, True], [1, True], [1, True]],
 'ops': ['addmm', 'hardswish', 'softmax'],
 'seed': 7697,
 'autocast': None}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
