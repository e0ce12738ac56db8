"""graphfuser fuzz repro: missing_error (known: issue 10 class 4: eager's errors are lost (shape preconditions)).

Observed (call 0): eager raised NotImplementedError: "bitwise_or_cpu" not implemented for 'Float'

Ops: bitwise_or, neg. Calls (batch size, layout flipped): [(3, False), (3, False), (3, False), (3, False), (5, False), (5, False), (5, False)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float32['B', 3] dense normal

Run from the repository root: PYTHONPATH=. python logs/fuzz-repros/cpu-05-missing_error-bitwise_or-neg.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor):
    v0 = x0 | x0
    v1 = torch.neg(x0)
    return v1


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor):\n'
           '    v0 = x0 | x0\n'
           '    v1 = torch.neg(x0)\n'
           '    return v1\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': ['B', 3],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': False}],
 'calls': [[3, False], [3, False], [3, False], [3, False], [5, False], [5, False], [5, False]],
 'ops': ['bitwise_or', 'neg'],
 'seed': 0}

if __name__ == "__main__":
    import sys

    from graphfuser.fuzz.oracle import run_case

    DEVICE = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    result = run_case(CASE, DEVICE, "/tmp", "repro")
    for f in result["findings"]:
        print(f"{f['category']} (call {f['call']}): {f['detail']}")
    print("no difference from eager" if not result["findings"] else "")
    sys.exit(1 if result["findings"] else 0)
