"""graphfuser fuzz repro: wrong_value.

Observed (call 2): output 0: 3/3 elements; at [0]: graphfuser -2.98023e-07, eager -0, fp64 reference -1.12851e-06

Ops: add, fmod, gelu. Calls (batch size, layout flipped): [(3, False), (3, False), (3, False), (3, False), (5, False), (5, False), (5, False)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float32['B'] dense ints; x1: float32[] dense normal

Run from the repository root: PYTHONPATH=. python /root/out/cpu/fuzz-repros/cpu-05-wrong_value-add-fmod.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor):
    v0 = F.gelu(x0, approximate="none")
    v1 = x0 + x0
    v2 = x0 + x0
    v3 = torch.fmod(x0, v0)
    return v3


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor):\n'
           '    v0 = F.gelu(x0, approximate="none")\n'
           '    v1 = x0 + x0\n'
           '    v2 = x0 + x0\n'
           '    v3 = torch.fmod(x0, v0)\n'
           '    return v3\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': ['B'],
             'layout': 'dense',
             'fill': 'ints',
             'requires_grad': False},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': False}],
 'calls': [[3, False], [3, False], [3, False], [3, False], [5, False], [5, False], [5, False]],
 'ops': ['add', 'fmod', 'gelu'],
 'seed': 4098}

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
