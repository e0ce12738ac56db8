"""graphfuser fuzz repro: missing_error (known: issue 10 class 4: eager's errors are lost (shape preconditions)).

Observed (call 0): eager raised RuntimeError: result type Float can't be cast to the desired output type Byte

Ops: alias:t, inplace:exp_, relu. Calls (batch size, layout flipped): [(0, False), (0, False), (0, False), (0, False), (0, False), (0, False), (0, False)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: uint8['B'] dense zeros

Run from the repository root: PYTHONPATH=. python /root/out/cpu/fuzz-repros/cpu-04-missing_error-alias_t-inplace_exp_.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor):
    v0 = x0.type_as(x0)
    v0.mul_(2)
    v0.exp_()
    v1 = torch.relu(x0)
    return v1


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor):\n'
           '    v0 = x0.type_as(x0)\n'
           '    v0.mul_(2)\n'
           '    v0.exp_()\n'
           '    v1 = torch.relu(x0)\n'
           '    return v1\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'uint8',
             'shape': ['B'],
             'layout': 'dense',
             'fill': 'zeros',
             'requires_grad': False}],
 'calls': [[0, False], [0, False], [0, False], [0, False], [0, False], [0, False], [0, False]],
 'ops': ['alias:t', 'inplace:exp_', 'relu'],
 'seed': 11506}

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
