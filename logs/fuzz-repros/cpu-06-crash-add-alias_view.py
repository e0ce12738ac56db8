"""graphfuser fuzz repro: crash (known: issue 10 class 7: crashes in the pipeline).

Observed (call 1): SyntaxError: invalid syntax (<graphfuser host program fallback>, line 5)

Ops: add, alias:view, inplace:neg_, leaky_relu, softplus. Calls (batch size, layout flipped): [(1, False), (1, False), (1, False), (1, False), (1, True), (1, True), (1, True)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float32[] dense nan_inf; x1: float32[] sliced normal; s0: int [3, 1]

Run from the repository root: PYTHONPATH=. python logs/fuzz-repros/cpu-06-crash-add-alias_view.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor, s0: int):
    v0 = x1.view(-1)
    x1.mul_(0.5)
    v1 = F.leaky_relu(x0, -0.5)
    v2 = F.softplus(x1, 0.5, 1.0)
    v3 = v0 + s0
    v1.neg_()
    return v3


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor, s0: int):\n'
           '    v0 = x1.view(-1)\n'
           '    x1.mul_(0.5)\n'
           '    v1 = F.leaky_relu(x0, -0.5)\n'
           '    v2 = F.softplus(x1, 0.5, 1.0)\n'
           '    v3 = v0 + s0\n'
           '    v1.neg_()\n'
           '    return v3\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [],
             'layout': 'dense',
             'fill': 'nan_inf',
             'requires_grad': False},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [],
             'layout': 'sliced',
             'fill': 'normal',
             'requires_grad': False},
            {'name': 's0', 'kind': 'int', 'values': [3, 1]}],
 'calls': [[1, False], [1, False], [1, False], [1, False], [1, True], [1, True], [1, True]],
 'ops': ['add', 'alias:view', 'inplace:neg_', 'leaky_relu', 'softplus'],
 'seed': 4810}

if __name__ == "__main__":
    import sys

    from graphfuser.fuzz.oracle import run_case

    DEVICE = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    result = run_case(CASE, DEVICE, "/tmp", "repro")
    for f in result["findings"]:
        print(f"{f['category']} (call {f['call']}): {f['detail']}")
    print("no difference from eager" if not result["findings"] else "")
    sys.exit(1 if result["findings"] else 0)
