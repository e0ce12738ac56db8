"""graphfuser fuzz repro: wrong_value (known: issue 10 class 6: in-place writes through aliases).

Observed (call 2): output 0: 9218/33792 elements; at [0, 0, 0, 2]: graphfuser 0, eager 1, fp64 reference 1

Ops: alias:dropout, asin, expm1. Calls (batch size, layout flipped): [(16, False), (16, False), (16, False), (16, False), (18, True), (18, True), (18, True)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float32['B', 4, 16, 33] dense ints

Run from the repository root: PYTHONPATH=. python logs/fuzz-repros/cpu-04-wrong_value-alias_dropout-asin.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor):
    v0 = x0.asin()
    v1 = torch.expm1(v0)
    v2 = F.dropout(v1, 0.5, False)
    v1.add_(1)
    return (v2, v1)


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor):\n'
           '    v0 = x0.asin()\n'
           '    v1 = torch.expm1(v0)\n'
           '    v2 = F.dropout(v1, 0.5, False)\n'
           '    v1.add_(1)\n'
           '    return (v2, v1)\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': ['B', 4, 16, 33],
             'layout': 'dense',
             'fill': 'ints',
             'requires_grad': False}],
 'calls': [[16, False], [16, False], [16, False], [16, False], [18, True], [18, True], [18, True]],
 'ops': ['alias:dropout', 'asin', 'expm1'],
 'seed': 7867}

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
