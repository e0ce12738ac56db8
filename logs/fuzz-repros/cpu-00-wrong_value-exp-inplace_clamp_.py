"""graphfuser fuzz repro: wrong_value (known: issue 10 class 6: in-place writes through aliases).

Observed (call 2): output 1: 16/16 elements; at [0, 0]: graphfuser 16, eager nan, fp64 reference nan

Ops: exp, inplace:clamp_, size. Calls (batch size, layout flipped): [(1, False), (1, False), (1, False), (1, False), (1, False), (1, False), (1, False)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float64['B', 16] channels_last constant_rows

Run from the repository root: PYTHONPATH=. python logs/fuzz-repros/cpu-00-wrong_value-exp-inplace_clamp_.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor):
    v0 = x0 * x0.size(-1)
    v1 = torch.exp(x0)
    v0.clamp_(min=float("nan"))
    return (v1, v0)


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor):\n'
           '    v0 = x0 * x0.size(-1)\n'
           '    v1 = torch.exp(x0)\n'
           '    v0.clamp_(min=float("nan"))\n'
           '    return (v1, v0)\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float64',
             'shape': ['B', 16],
             'layout': 'channels_last',
             'fill': 'constant_rows',
             'requires_grad': False}],
 'calls': [[1, False], [1, False], [1, False], [1, False], [1, False], [1, False], [1, False]],
 'ops': ['exp', 'inplace:clamp_', 'size'],
 'seed': 18194}

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
