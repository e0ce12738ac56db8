"""graphfuser fuzz repro: compile_fallback (known: issue 10 class 7: crashes in the pipeline).

Observed (call -1): graphfuser: prim::CpuFusionGroup (cpu_fusion_6781cd6fb2c2) could not be compiled: CompileError: C++ kernel failed to compile (g++ (Debian 12.2.0-14+deb12u1) 12.2.0, exit 1):

Ops: add, amax, inplace:neg_. Calls (batch size, layout flipped): [(1, False), (1, False), (1, False), (1, False), (1, False), (1, False), (1, False)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float32[] dense normal; x1: float32[] dense normal; x2: float32[] dense normal

Run from the repository root: PYTHONPATH=. python logs/fuzz-repros/cpu-07-compile_fallback-add-amax.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor):
    x0.neg_()
    v0 = torch.amax(x0, [], keepdim=False)
    v1 = x0 + v0
    return v1


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor):\n'
           '    x0.neg_()\n'
           '    v0 = torch.amax(x0, [], keepdim=False)\n'
           '    v1 = x0 + v0\n'
           '    return v1\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': False},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': False},
            {'name': 'x2',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': False}],
 'calls': [[1, False], [1, False], [1, False], [1, False], [1, False], [1, False], [1, False]],
 'ops': ['add', 'amax', 'inplace:neg_'],
 'seed': 0}

if __name__ == "__main__":
    import sys

    from graphfuser.fuzz.oracle import run_case

    import tempfile

    from graphfuser.config import config

    config.set(repro_dir=tempfile.mkdtemp(prefix="graphfuser-repro-"))   # not the working directory
    DEVICE = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    result = run_case(CASE, DEVICE, "/tmp", "repro")
    for f in result["findings"]:
        print(f"{f['category']} (call {f['call']}): {f['detail']}")
    print("no difference from eager" if not result["findings"] else "")
    sys.exit(1 if result["findings"] else 0)
