"""graphfuser fuzz repro: wrong_shape (known: issue 10 class 6: in-place writes through aliases).

Observed (call 2): output 0: () vs eager (1,)

Ops: alias:unsqueeze, mul. Calls (batch size, layout flipped): [(1, False), (1, False), (1, False), (1, False), (1, False), (1, False), (1, False)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float32[] dense zeros

Run from the repository root: PYTHONPATH=. python /root/out/f/fuzz-repros/cuda-01-wrong_shape-alias_unsqueeze-mul.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor):
    v0 = 1 * x0
    v1 = v0.unsqueeze(0)
    v1.mul_(2)
    return v1


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor):\n'
           '    v0 = 1 * x0\n'
           '    v1 = v0.unsqueeze(0)\n'
           '    v1.mul_(2)\n'
           '    return v1\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [],
             'layout': 'dense',
             'fill': 'zeros',
             'requires_grad': False}],
 'calls': [[1, False], [1, False], [1, False], [1, False], [1, False], [1, False], [1, False]],
 'ops': ['alias:unsqueeze', 'mul'],
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
