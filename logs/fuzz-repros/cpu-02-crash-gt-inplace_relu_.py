"""graphfuser fuzz repro: crash (known: issue 10 class 7: crashes in the pipeline).

Observed (call 1): SyntaxError: invalid syntax (<graphfuser host program fallback>, line 6)

Ops: gt, inplace:relu_, leaky_relu, sign, size. Calls (batch size, layout flipped): [(33, False), (33, False), (33, False), (33, False), (1, False), (1, False), (1, False)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float32['B'] dense positive; x1: int64[] dense ints; s0: int [0, 3]

Run from the repository root: PYTHONPATH=. python logs/fuzz-repros/cpu-02-crash-gt-inplace_relu_.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor, s0: int):
    v0 = torch.sign(x0)
    v1 = v0 * x0.size(-1)
    v2 = F.leaky_relu(v1, 0.01)
    v3 = x1 > s0
    x0.relu_()
    return v3


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor, s0: int):\n'
           '    v0 = torch.sign(x0)\n'
           '    v1 = v0 * x0.size(-1)\n'
           '    v2 = F.leaky_relu(v1, 0.01)\n'
           '    v3 = x1 > s0\n'
           '    x0.relu_()\n'
           '    return v3\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': ['B'],
             'layout': 'dense',
             'fill': 'positive',
             'requires_grad': False},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'int64',
             'shape': [],
             'layout': 'dense',
             'fill': 'ints',
             'requires_grad': False},
            {'name': 's0', 'kind': 'int', 'values': [0, 3]}],
 'calls': [[33, False], [33, False], [33, False], [33, False], [1, False], [1, False], [1, False]],
 'ops': ['gt', 'inplace:relu_', 'leaky_relu', 'sign', 'size'],
 'seed': 482}

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
