"""graphfuser fuzz repro: wrong_value (known: issue 10 class 6: in-place writes through aliases).

Observed (call 2): output 0: 4/4 elements; at [0, 0, 0]: graphfuser nan, eager 0.333333, fp64 reference 0.333333

Ops: fmod, inplace:clamp_. Calls (batch size, layout flipped): [(2, False), (2, False), (2, False), (2, False), (2, False), (2, False), (2, False)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float64['B', 2, 1] dense constant_rows; s0: int [-1, -1]

Run from the repository root: PYTHONPATH=. python /root/out/cpu/fuzz-repros/cpu-03-wrong_value-fmod-inplace_clamp_.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, s0: int):
    v0 = torch.fmod(x0, s0)
    v0.clamp_(min=float("nan"))
    return v0


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, s0: int):\n'
           '    v0 = torch.fmod(x0, s0)\n'
           '    v0.clamp_(min=float("nan"))\n'
           '    return v0\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float64',
             'shape': ['B', 2, 1],
             'layout': 'dense',
             'fill': 'constant_rows',
             'requires_grad': False},
            {'name': 's0', 'kind': 'int', 'values': [-1, -1]}],
 'calls': [[2, False], [2, False], [2, False], [2, False], [2, False], [2, False], [2, False]],
 'ops': ['fmod', 'inplace:clamp_'],
 'seed': 328}

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
