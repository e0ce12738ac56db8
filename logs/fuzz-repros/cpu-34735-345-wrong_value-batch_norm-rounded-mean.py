"""graphfuser fuzz repro: wrong_value.

Observed (call 4): output 0: 32/1024 elements; at [3, 1, 0]: graphfuser True, eager False

Ops: batch_norm, erf, lerp, logical_xor, neg. Calls (batch size, layout flipped): [(16, False), (16, False), (16, False), (16, False), (16, False), (16, False), (16, False)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float64['B', 4, 16] dense constant_rows requires_grad; x1: uint8[] dense huge_mean; x2: float64[4] dense huge_mean; x3: float64[4] sliced edge; x4: float64[4] dense zeros requires_grad

Not a defect: the deviation of a float64 row equal to its channel's mean rounded to float64 is 0 in a kernel (its mean
register) and -2.4e-17 exactly; the oracle's rounded pipeline now takes the mean as a kernel holds it (fuzz/reference.py
rounded_mean); test: tests/fuzz/test_oracle.py::test_rounded_mean_reference_takes_deviations_from_the_mean_a_kernel_holds.

Run from the repository root: PYTHONPATH=. GRAPHFUSER_FUZZ_FRONTEND=compile GRAPHFUSER_FUZZ_CUDA_DECISIONS=1 python logs/fuzz-repros/cpu-34735-345-wrong_value-batch_norm-rounded-mean.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, x3: torch.Tensor, x4: torch.Tensor):
    v0 = F.batch_norm(x0, x2, x3, None, x4, True, 0.1, 1e-12)
    v1 = torch.erf(x0)
    v2 = v1.neg()
    v3 = torch.lerp(v0, x0, 1.5)
    v4 = torch.logical_xor(v0, v1)
    return v4


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, x3: torch.Tensor, x4: '
           'torch.Tensor):\n'
           '    v0 = F.batch_norm(x0, x2, x3, None, x4, True, 0.1, 1e-12)\n'
           '    v1 = torch.erf(x0)\n'
           '    v2 = v1.neg()\n'
           '    v3 = torch.lerp(v0, x0, 1.5)\n'
           '    v4 = torch.logical_xor(v0, v1)\n'
           '    return v4\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float64',
             'shape': ['B', 4, 16],
             'layout': 'dense',
             'fill': 'constant_rows',
             'requires_grad': True},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'uint8',
             'shape': [],
             'layout': 'dense',
             'fill': 'huge_mean',
             'requires_grad': False},
            {'name': 'x2',
             'kind': 'tensor',
             'dtype': 'float64',
             'shape': [4],
             'layout': 'dense',
             'fill': 'huge_mean',
             'requires_grad': False},
            {'name': 'x3',
             'kind': 'tensor',
             'dtype': 'float64',
             'shape': [4],
             'layout': 'sliced',
             'fill': 'edge',
             'requires_grad': False},
            {'name': 'x4',
             'kind': 'tensor',
             'dtype': 'float64',
             'shape': [4],
             'layout': 'dense',
             'fill': 'zeros',
             'requires_grad': True}],
 'calls': [[16, False], [16, False], [16, False], [16, False], [16, False], [16, False], [16, False]],
 'ops': ['batch_norm', 'erf', 'lerp', 'logical_xor', 'neg'],
 'seed': 1510,
 'autocast': None}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
