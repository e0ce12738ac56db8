"""graphfuser fuzz repro: missing_error (known: issue 10 class 4: eager's errors are lost (shape preconditions)).

Observed (call 0): eager raised RuntimeError: ZeroDivisionError

Ops: cos, inplace:neg_, inplace:sigmoid_, remainder. Calls (batch size, layout flipped): [(5, False), (5, False), (5, False), (5, False), (5, False), (5, False), (5, False)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: uint8['B', 33, 33] dense ints; s0: int [0, 3]

Run from the repository root: PYTHONPATH=. python logs/fuzz-repros/cpu-12-missing_error-cos-inplace_neg_.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, s0: int):
    x0.neg_()
    v0 = torch.remainder(x0, s0)
    v0.sigmoid_()
    v1 = x0.cos()
    return v1


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, s0: int):\n'
           '    x0.neg_()\n'
           '    v0 = torch.remainder(x0, s0)\n'
           '    v0.sigmoid_()\n'
           '    v1 = x0.cos()\n'
           '    return v1\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'uint8',
             'shape': ['B', 33, 33],
             'layout': 'dense',
             'fill': 'ints',
             'requires_grad': False},
            {'name': 's0', 'kind': 'int', 'values': [0, 3]}],
 'calls': [[5, False], [5, False], [5, False], [5, False], [5, False], [5, False], [5, False]],
 'ops': ['cos', 'inplace:neg_', 'inplace:sigmoid_', 'remainder'],
 'seed': 391}

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
