"""graphfuser fuzz repro: compile_fallback.

Observed (call -1): graphfuser: prim::CpuFusionGroup (cpu_fusion_06760b58707e) could not be compiled: LoweringError: reduced loop axes without a reduction

Ops: div, rsub, sum, to. Calls (batch size, layout flipped): [(16, False), (16, False), (16, False), (16, False), (16, False), (16, False), (16, False)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: bfloat16['B', 33, 33] dense nan_inf requires_grad

Run from the repository root: PYTHONPATH=. python /tmp/fz8787/fuzz-repros/cpu-01-compile_fallback-div-rsub.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor):
    v0 = torch.sum(x0, None, keepdim=False)
    v1 = torch.rsub(x0, 7, alpha=0.5)
    v2 = torch.div(x0, x0)
    v3 = v1.type_as(v0)
    return (v3, v2)


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor):\n'
           '    v0 = torch.sum(x0, None, keepdim=False)\n'
           '    v1 = torch.rsub(x0, 7, alpha=0.5)\n'
           '    v2 = torch.div(x0, x0)\n'
           '    v3 = v1.type_as(v0)\n'
           '    return (v3, v2)\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'bfloat16',
             'shape': ['B', 33, 33],
             'layout': 'dense',
             'fill': 'nan_inf',
             'requires_grad': True}],
 'calls': [[16, False], [16, False], [16, False], [16, False], [16, False], [16, False], [16, False]],
 'ops': ['div', 'rsub', 'sum', 'to'],
 'seed': 8,
 'autocast': None}

if __name__ == "__main__":
    from graphfuser.fuzz.report import run_repro

    raise SystemExit(run_repro(CASE))
