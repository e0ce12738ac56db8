"""graphfuser fuzz repro: wrong_value (graph 1435 of CPU seed 34722, torch.compile).

Observed (call 4): output 0: 3/3 elements; at [0, 0]: graphfuser -inf, eager nan, fp64 reference inf

A training batch norm of a constant fp16 channel (an expanded input) with a negative weight and no
bias gives -0, then a mean over a dim of size 1, then rsqrt. graphfuser lowered a sum over size-1
dims as the identity, keeping the -0, where eager's sum starts from +0 and gives +0: rsqrt gave
-inf against the float64 reference's +inf (eager's own fp16 kernel gives NaN there: its eps of
1e-12 underflows in fp16). Fixed in codegen/reduction/lower.py (the identity of a sum adds +0);
test: tests/fuzz/test_fuzz_repros_2.py::test_a_sum_over_size_one_dims_of_negative_zeros_is_positive_zero.

Run from the repository root: PYTHONPATH=. GRAPHFUSER_FUZZ_FRONTEND=compile python logs/fuzz-repros/cpu-34722-1435-wrong_value-batch_norm-signed-zero.py
"""

CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, x3: torch.Tensor, x4: '
           'torch.Tensor):\n'
           '    v0 = F.batch_norm(x1, x2, x3, x4, None, True, 0.1, 1e-12)\n'
           '    v1 = 2 >= x1\n'
           '    v2 = v0 * x0.size(-1)\n'
           '    v3 = v2.isnan()\n'
           '    v4 = v0 * v2.size(-1)\n'
           '    v5 = torch._log_softmax(v2, 1, False)\n'
           '    v6 = v5 * v4.size(-1)\n'
           '    v7 = torch.neg(v0)\n'
           '    v8 = torch.mean(v0, [-1], keepdim=True, dtype=torch.float16)\n'
           '    v9 = v7.to(v7.dtype)\n'
           '    v9.mul_(2)\n'
           '    v10 = x0 * x1.size(-1)\n'
           '    v11 = v0 * x1.size(-1)\n'
           '    v12 = torch.frac(v9)\n'
           '    v13 = torch.rsqrt(v8)\n'
           '    return v13\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'int32',
             'shape': ['B', 1, 3, 1],
             'layout': 'dense',
             'fill': 'ints',
             'requires_grad': False},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'float16',
             'shape': [3, 1],
             'layout': 'expanded',
             'fill': 'positive',
             'requires_grad': False},
            {'name': 'x2',
             'kind': 'tensor',
             'dtype': 'float16',
             'shape': [1],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': False},
            {'name': 'x3',
             'kind': 'tensor',
             'dtype': 'float16',
             'shape': [1],
             'layout': 'dense',
             'fill': 'edge',
             'requires_grad': False},
            {'name': 'x4',
             'kind': 'tensor',
             'dtype': 'float16',
             'shape': [1],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': True}],
 'calls': [[2, False], [2, False], [2, False], [2, False], [2, False], [2, False], [2, False]],
 'ops': ['_log_softmax',
         'alias:to_same',
         'batch_norm',
         'frac',
         'ge',
         'isnan',
         'mean',
         'neg',
         'rsqrt',
         'size'],
 'seed': 64641,
 'autocast': 'bfloat16'}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
