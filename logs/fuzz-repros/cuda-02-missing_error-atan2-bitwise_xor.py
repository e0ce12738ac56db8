"""graphfuser fuzz repro: missing_error (known: issue 10 class 4: eager's errors are lost (shape preconditions)).

Observed (call 0): eager raised NotImplementedError: "bitwise_xor_cuda" not implemented for 'Float'

Ops: atan2, bitwise_xor, inplace:mul_. Calls (batch size, layout flipped): [(1, False), (1, False), (1, False), (1, False), (1, False), (1, False), (1, False)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float32[] dense normal

Run from the repository root: PYTHONPATH=. python /root/out/f/fuzz-repros/cuda-02-missing_error-atan2-bitwise_xor.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor):
    v0 = x0 ^ x0
    v1 = torch.atan2(x0, x0)
    x0.mul_(x0)
    return v1


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor):\n'
           '    v0 = x0 ^ x0\n'
           '    v1 = torch.atan2(x0, x0)\n'
           '    x0.mul_(x0)\n'
           '    return v1\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': False}],
 'calls': [[1, False], [1, False], [1, False], [1, False], [1, False], [1, False], [1, False]],
 'ops': ['atan2', 'bitwise_xor', 'inplace:mul_'],
 'seed': 7}

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
