"""graphfuser fuzz repro: wrong_value (known: issue 10 class 1: reductions over an empty extent).

Observed (call 6): output 0: 14/16 elements; at [0, 1]: graphfuser 2.5886e-07, eager 2.07088e-07, fp64 reference 2.14708e-07

Ops: erf, log10, rms_norm. Calls (batch size, layout flipped): [(16, False), (16, False), (16, False), (16, False), (0, True), (0, True), (0, True)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float32[1, 16] dense huge_mean; x1: uint8[16] channels_last zeros

Run from the repository root: PYTHONPATH=. python logs/fuzz-repros/cpu-11-wrong_value-erf-log10.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor):
    v0 = x0 * torch.rsqrt(x0.pow(2).mean(-1, keepdim=True) + 1e-12)
    v1 = torch.erf(v0)
    v2 = torch.log10(v0)
    return v2


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor):\n'
           '    v0 = x0 * torch.rsqrt(x0.pow(2).mean(-1, keepdim=True) + 1e-12)\n'
           '    v1 = torch.erf(v0)\n'
           '    v2 = torch.log10(v0)\n'
           '    return v2\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [1, 16],
             'layout': 'dense',
             'fill': 'huge_mean',
             'requires_grad': False},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'uint8',
             'shape': [16],
             'layout': 'channels_last',
             'fill': 'zeros',
             'requires_grad': False}],
 'calls': [[16, False], [16, False], [16, False], [16, False], [0, True], [0, True], [0, True]],
 'ops': ['erf', 'log10', 'rms_norm'],
 'seed': 3123}

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
