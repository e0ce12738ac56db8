"""graphfuser fuzz repro: wrong_value (known: issue 10 class 6: in-place writes through aliases).

Observed (call 0): output 0: 1/1 elements; at []: graphfuser -1.16188, eager -1.62811, fp64 reference -1.62811

Ops: add, alias:type_as. Calls (batch size, layout flipped): [(1, False), (1, False), (1, False), (1, False), (1, True), (1, True), (1, True)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float32[] dense normal; x1: float32[] dense normal; x2: float32[] dense normal

Run from the repository root: PYTHONPATH=. python /root/out/f/fuzz-repros/cuda-00-wrong_value-add-alias_type_as.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor):
    v0 = x0.type_as(x0)
    v0.mul_(2)
    v1 = x0 + x1
    return v1


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor):\n'
           '    v0 = x0.type_as(x0)\n'
           '    v0.mul_(2)\n'
           '    v1 = x0 + x1\n'
           '    return v1\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': False},
            {'name': 'x1',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': False},
            {'name': 'x2',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': [],
             'layout': 'dense',
             'fill': 'normal',
             'requires_grad': False}],
 'calls': [[1, False], [1, False], [1, False], [1, False], [1, True], [1, True], [1, True]],
 'ops': ['add', 'alias:type_as'],
 'seed': 3764}

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
