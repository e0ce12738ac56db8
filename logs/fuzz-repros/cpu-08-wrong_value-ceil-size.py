"""graphfuser fuzz repro: wrong_value (known: issue 10 class 1: reductions over an empty extent).

Observed (call 2): output 2: 1/1 elements; at [0]: graphfuser -4.87212e+37, eager nan, fp64 reference nan

Ops: ceil, size, std. Calls (batch size, layout flipped): [(0, False), (0, False), (0, False), (0, False), (2, False), (2, False), (2, False)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float32['B'] dense positive

Run from the repository root: PYTHONPATH=. python logs/fuzz-repros/cpu-08-wrong_value-ceil-size.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor):
    v0 = x0 * x0.size(-1)
    v1 = torch.std(v0, [0], unbiased=True, keepdim=True)
    v2 = v0.ceil()
    return (v2, v0, v1)


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor):\n'
           '    v0 = x0 * x0.size(-1)\n'
           '    v1 = torch.std(v0, [0], unbiased=True, keepdim=True)\n'
           '    v2 = v0.ceil()\n'
           '    return (v2, v0, v1)\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float32',
             'shape': ['B'],
             'layout': 'dense',
             'fill': 'positive',
             'requires_grad': False}],
 'calls': [[0, False], [0, False], [0, False], [0, False], [2, False], [2, False], [2, False]],
 'ops': ['ceil', 'size', 'std'],
 'seed': 200}

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
