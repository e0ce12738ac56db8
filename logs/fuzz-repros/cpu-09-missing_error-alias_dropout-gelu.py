"""graphfuser fuzz repro: missing_error (known: issue 10 class 4: eager's errors are lost (shape preconditions)).

Observed (call 0): eager raised NotImplementedError: "GeluKernelImpl" not implemented for 'Byte'

Ops: alias:dropout, gelu. Calls (batch size, layout flipped): [(4, False), (4, False), (4, False), (4, False), (0, True), (0, True), (0, True)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: uint8['B', 5, 1, 1] transposed zeros

Run from the repository root: PYTHONPATH=. python logs/fuzz-repros/cpu-09-missing_error-alias_dropout-gelu.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor):
    v0 = F.gelu(x0, approximate="none")
    v1 = F.dropout(x0, 0.5, False)
    x0.add_(1)
    return v1


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor):\n'
           '    v0 = F.gelu(x0, approximate="none")\n'
           '    v1 = F.dropout(x0, 0.5, False)\n'
           '    x0.add_(1)\n'
           '    return v1\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'uint8',
             'shape': ['B', 5, 1, 1],
             'layout': 'transposed',
             'fill': 'zeros',
             'requires_grad': False}],
 'calls': [[4, False], [4, False], [4, False], [4, False], [0, True], [0, True], [0, True]],
 'ops': ['alias:dropout', 'gelu'],
 'seed': 1032}

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
