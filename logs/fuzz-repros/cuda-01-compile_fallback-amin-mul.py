"""graphfuser fuzz repro: compile_fallback.

Observed (call -1): graphfuser: prim::CudaFusionGroup (cuda_fusion_b248ecabbc8b) could not be compiled: CompileError: NVRTC failed to compile kernel cuda_fusion_b248ecabbc8b_p4_v1_i32 (NVRTC_ERROR_COMPILATION):

Ops: amin, mul. Calls (batch size, layout flipped): [(16, False), (16, False), (16, False), (16, False), (16, True), (16, True), (16, True)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: uint8['B'] expanded constant_rows

Run from the repository root: PYTHONPATH=. python logs/fuzz-repros/cuda-01-compile_fallback-amin-mul.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor):
    v0 = x0 * x0
    v1 = torch.amin(v0, [0], keepdim=True)
    return (v1, v0)


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor):\n'
           '    v0 = x0 * x0\n'
           '    v1 = torch.amin(v0, [0], keepdim=True)\n'
           '    return (v1, v0)\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'uint8',
             'shape': ['B'],
             'layout': 'expanded',
             'fill': 'constant_rows',
             'requires_grad': False}],
 'calls': [[16, False], [16, False], [16, False], [16, False], [16, True], [16, True], [16, True]],
 'ops': ['amin', 'mul'],
 'seed': 26551}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
