"""graphfuser fuzz repro: missing_error (known: issue 10 class 4: eager's errors are lost (shape preconditions)).

Observed (call 0): eager raised NotImplementedError: "bitwise_not_cpu" not implemented for 'BFloat16'

Ops: atan, bitwise_not. Calls (batch size, layout flipped): [(0, False), (0, False), (0, False), (0, False), (1, False), (1, False), (1, False)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: bfloat16['B', 33, 1] channels_last normal; x1: float64[33, 1] sliced zeros

Run from the repository root: PYTHONPATH=. python /root/out/cpu/fuzz-repros/cpu-01-missing_error-atan-bitwise_not.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor):
    v0 = torch.bitwise_not(x0)
    v1 = x0.atan()
    return v1


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor):\n'
           '    v0 = torch.bitwise_not(x0)\n'
           '    v1 = x0.atan()\n'
           '    return v1\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'bfloat16',
             'shape': ['B', 33, 1],
             'layout': 'channels_last',
             'fill': 'normal',
             'requires_grad': False},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'float64',
             'shape': [33, 1],
             'layout': 'sliced',
             'fill': 'zeros',
             'requires_grad': False}],
 'calls': [[0, False], [0, False], [0, False], [0, False], [1, False], [1, False], [1, False]],
 'ops': ['atan', 'bitwise_not'],
 'seed': 29765}

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
