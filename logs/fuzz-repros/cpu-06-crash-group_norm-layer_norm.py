"""graphfuser fuzz repro: crash (known: issue 10 class 1: reductions over an empty extent).

Observed (call 1): SyntaxError: invalid syntax (<graphfuser host program fallback>, line 8)

Ops: group_norm, layer_norm. Calls (batch size, layout flipped): [(5, False), (5, False), (5, False), (5, False), (5, True), (5, True), (5, True)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float32['B', 4, 1] transposed zeros

Run from the repository root: PYTHONPATH=. python logs/fuzz-repros/cpu-06-crash-group_norm-layer_norm.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor):
    v0 = F.layer_norm(x0, [1], None, None, 1e-05)
    v1 = F.group_norm(x0, 4, None, None, 0.1)
    return v1


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor):\n'
           '    v0 = F.layer_norm(x0, [1], None, None, 1e-05)\n'
           '    v1 = F.group_norm(x0, 4, None, None, 0.1)\n'
           '    return v1\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': ['B', 4, 1],
             'layout': 'transposed',
             'fill': 'zeros',
             'requires_grad': False}],
 'calls': [[5, False], [5, False], [5, False], [5, False], [5, True], [5, True], [5, True]],
 'ops': ['group_norm', 'layer_norm'],
 'seed': 65536}

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
