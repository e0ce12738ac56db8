"""graphfuser fuzz repro: crash (known: issue 10 class 1: reductions over an empty extent).

Observed (call 1): SyntaxError: invalid syntax (<graphfuser host program fallback>, line 8)

Ops: alias:reshape, layer_norm. Calls (batch size, layout flipped): [(3, False), (3, False), (3, False), (3, False), (3, True), (3, True), (3, True)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float32['B', 3] dense normal

Run from the repository root: PYTHONPATH=. python logs/fuzz-repros/cpu-10-crash-alias_reshape-layer_norm.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor):
    v0 = F.layer_norm(x0, [3], None, None, 1e-05)
    v1 = x0.reshape(-1)
    x0.mul_(0.5)
    return v1


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor):\n'
           '    v0 = F.layer_norm(x0, [3], None, None, 1e-05)\n'
           '    v1 = x0.reshape(-1)\n'
           '    x0.mul_(0.5)\n'
           '    return v1\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': ['B', 3],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': False}],
 'calls': [[3, False], [3, False], [3, False], [3, False], [3, True], [3, True], [3, True]],
 'ops': ['alias:reshape', 'layer_norm'],
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
