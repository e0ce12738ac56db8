"""graphfuser fuzz repro: missing_error (known: issue 10 class 4: eager's errors are lost (shape preconditions)).

Observed (call 0): eager raised NotImplementedError: "bitwise_or_cpu" not implemented for 'Float'

Ops: bitwise_or, size. Calls (batch size, layout flipped): [(1, False), (1, False), (1, False), (1, False), (0, True), (0, True), (0, True)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float32['B', 33, 7] dense huge_mean; x1: uint8[] dense nan_inf; s0: int [-1, -1]

Run from the repository root: PYTHONPATH=. python logs/fuzz-repros/cpu-05-missing_error-bitwise_or-size.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor, s0: int):
    v0 = x0 | s0
    v1 = x1 * x0.size(-1)
    return v1


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor, s0: int):\n'
           '    v0 = x0 | s0\n'
           '    v1 = x1 * x0.size(-1)\n'
           '    return v1\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': ['B', 33, 7],
             'layout': 'dense',
             'fill': 'huge_mean',
             'requires_grad': False},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'uint8',
             'shape': [],
             'layout': 'dense',
             'fill': 'nan_inf',
             'requires_grad': False},
            {'name': 's0', 'kind': 'int', 'values': [-1, -1]}],
 'calls': [[1, False], [1, False], [1, False], [1, False], [0, True], [0, True], [0, True]],
 'ops': ['bitwise_or', 'size'],
 'seed': 562}

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
