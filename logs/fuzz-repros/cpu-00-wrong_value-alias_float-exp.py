"""graphfuser fuzz repro: wrong_value (known: issue 10 class 6: in-place writes through aliases).

Observed (call 2): output 0: 3/3 elements; at [0]: graphfuser 7.38906, eager 8.38906, fp64 reference 8.38906

Ops: alias:float, exp. Calls (batch size, layout flipped): [(3, False), (3, False), (3, False), (3, False), (0, True), (0, True), (0, True)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: int64['B'] dense normal

Run from the repository root: PYTHONPATH=. python logs/fuzz-repros/cpu-00-wrong_value-alias_float-exp.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor):
    v0 = torch.exp(x0)
    v1 = v0.float()
    v0.add_(1)
    return v1


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor):\n'
           '    v0 = torch.exp(x0)\n'
           '    v1 = v0.float()\n'
           '    v0.add_(1)\n'
           '    return v1\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'int64',
             'shape': ['B'],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': False}],
 'calls': [[3, False], [3, False], [3, False], [3, False], [0, True], [0, True], [0, True]],
 'ops': ['alias:float', 'exp'],
 'seed': 653}

if __name__ == "__main__":
    import sys

    from graphfuser.fuzz.oracle import run_case

    DEVICE = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    result = run_case(CASE, DEVICE, "/tmp", "repro")
    for f in result["findings"]:
        print(f"{f['category']} (call {f['call']}): {f['detail']}")
    print("no difference from eager" if not result["findings"] else "")
    sys.exit(1 if result["findings"] else 0)
