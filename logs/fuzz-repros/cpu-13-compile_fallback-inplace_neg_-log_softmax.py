"""graphfuser fuzz repro: compile_fallback (known: issue 10 class 7: crashes in the pipeline).

Observed (call -1): graphfuser: prim::CpuFusionGroup (cpu_fusion_0435fcc6271e) could not be compiled: EmptyReductionError: max / min over an empty dim

Ops: inplace:neg_, log_softmax, size. Calls (batch size, layout flipped): [(0, False), (0, False), (0, False), (0, False), (0, True), (0, True), (0, True)]; graphfuser profiles
profiling_runs calls, then runs fused; later calls re-specialize.
Inputs: x0: float16['B', 5, 33, 7] expanded constant_rows

Run from the repository root: PYTHONPATH=. python logs/fuzz-repros/cpu-13-compile_fallback-inplace_neg_-log_softmax.py
"""
import torch
import torch.nn.functional as F


def fn(x0: torch.Tensor):
    v0 = x0 * x0.size(-1)
    v0.neg_()
    v1 = torch.log_softmax(x0, -4)
    return v1


CASE = {'source': 'import torch\n'
           'import torch.nn.functional as F\n'
           '\n'
           '\n'
           'def fn(x0: torch.Tensor):\n'
           '    v0 = x0 * x0.size(-1)\n'
           '    v0.neg_()\n'
           '    v1 = torch.log_softmax(x0, -4)\n'
           '    return v1\n',
 'inputs': [{'name': 'x0',
             'kind': 'tensor',
             'dtype': 'float16',
             'shape': ['B', 5, 33, 7],
             'layout': 'expanded',
             'fill': 'constant_rows',
             'requires_grad': False}],
 'calls': [[0, False], [0, False], [0, False], [0, False], [0, True], [0, True], [0, True]],
 'ops': ['inplace:neg_', 'log_softmax', 'size'],
 'seed': 21824}

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
