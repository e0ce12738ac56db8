"""graphfuser fuzz repro: missing_error (known: issue 10 class 4: eager's errors are lost (shape preconditions)).

Observed (call 0): eager raised RuntimeError: result type Float can't be cast to the desired output type Byte

Ops: inplace:add_, mul, size. Calls (batch size, layout flipped): [(4, False), (4, False), (4, False), (4, False), (1, False), (1, False), (1, False)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: uint8['B', 7] dense huge_mean

Run from the repository root: PYTHONPATH=. python logs/fuzz-repros/cpu-01-missing_error-inplace_add_-mul.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor):
    v0 = 7 * x0
    v1 = x0 * x0.size(-1)
    v0.add_(3.0)
    return v1


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor):\n'
           '    v0 = 7 * x0\n'
           '    v1 = x0 * x0.size(-1)\n'
           '    v0.add_(3.0)\n'
           '    return v1\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'uint8',
             'shape': ['B', 7],
             'layout': 'dense',
             'fill': 'huge_mean',
             'requires_grad': False}],
 'calls': [[4, False], [4, False], [4, False], [4, False], [1, False], [1, False], [1, False]],
 'ops': ['inplace:add_', 'mul', 'size'],
 'seed': 429}

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
