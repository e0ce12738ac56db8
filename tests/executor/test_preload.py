"""The variant a reduction launcher's first call takes is guessed at build time from the profile
(executor/preload.py): the guess, made on meta tensors, must be the variant a real call of the
profiled sizes loads. CUDA launchers are generated here without a GPU; their calls run on CPU
tensors, which stop at the first variant lookup before anything touches a device."""
import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.executor.compiled_reduction import DeferToEager, ReductionGroup, launcher_source
from graphfuser.config import config
from graphfuser.executor.preload import predicted_variant
from graphfuser.ir import parse_graph, print_graph


class _Loaded(Exception):
    pass


def _cuda_launcher(fn, calls):
    """(run, cuda subgraph): the CUDA launcher of ``fn``'s one fusion group, profiled on ``calls``."""
    sf = graphfuser.script(fn)
    for args in calls:
        sf(*args)
    g = graphfuser.last_executed_optimized_graph()
    (sub,) = [n.subgraph for n in g.all_nodes() if n.kind.endswith("FusionGroup")]
    sub = parse_graph(print_graph(sub).replace("device=cpu", "device=cuda:0"))
    cg = ReductionGroup(sub, "cuda", torch.device("cuda:0"), "k")
    loads = []

    def load(i):
        loads.append(i)
        raise _Loaded(i)

    def fail(e, args):
        raise e

    ns = {"_empty": torch.empty_strided, "_empty_c": torch.empty, "_dev": torch.device("cpu"),
          "_Defer": DeferToEager, "_fns": [None] * len(cg.variants), "_load": load, "_sms": 132,
          "_fallback": lambda *a: None, "_broken": False, "_eager": None, "_fail": fail}
    for j, op in enumerate(cg.plan.outputs):
        ns[f"_odt{j}"] = op.dtype
    exec(compile(launcher_source(cg), "<launcher>", "exec"), ns)
    run = ns["run"]
    run.namespace = ns
    return run, sub, loads


def _layer_norm_768(x, w, b):
    return F.layer_norm(x + 1.0, [768], w, b, 1e-5)


def _layer_norm_4096(x, w, b):
    return F.layer_norm(x + 1.0, [4096], w, b, 1e-5)


def _layer_norm_runtime_width(x, w, b):
    return F.layer_norm(x + 1.0, [x.shape[-1]], w, b, 1e-5)


def _softmax(x):
    return torch.softmax(x * 2.0, -1)


def _row_sum(x):
    return (x * x).sum(-1)


def _ln_args(rows, width, dtype):
    return (torch.randn(rows, width, dtype=dtype), torch.randn(width, dtype=dtype), torch.randn(width, dtype=dtype))


CASES = {
    "layer_norm_bf16_4096x768": (_layer_norm_768, lambda: _ln_args(4096, 768, torch.bfloat16)),
    "layer_norm_f32_64x4096": (_layer_norm_4096, lambda: _ln_args(64, 4096, torch.float32)),
    "softmax_f32_8x50000": (_softmax, lambda: (torch.randn(8, 50000),)),
    "softmax_f32_3000x100": (_softmax, lambda: (torch.randn(3000, 100),)),
    "row_sum_stepped_slice": (_row_sum, lambda: (torch.randn(512, 1030)[:, 3:1027:2],)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_guess_is_the_variant_a_real_call_loads(case):
    fn, make = CASES[case]
    args = make()
    run, sub, loads = _cuda_launcher(fn, [args] * 3)
    guess = predicted_variant(run, sub)
    assert guess is not None
    with pytest.raises(_Loaded):
        run(*args)
    assert loads == [guess]


def test_guesses_differ_between_shapes():
    """The guess follows the sizes (the test above could not fail if it were one fixed index)."""
    guesses = set()
    for case in ("layer_norm_bf16_4096x768", "softmax_f32_8x50000", "row_sum_stepped_slice"):
        fn, make = CASES[case]
        run, sub, _ = _cuda_launcher(fn, [make()] * 3)
        guesses.add(predicted_variant(run, sub))
    assert len(guesses) == 3


def test_no_guess_without_concrete_sizes():
    """A dim that changed between profiling runs is symbolic: nothing to guess from."""
    run, sub, _ = _cuda_launcher(_softmax, [(torch.randn(n, 100),) for n in (8, 9, 10)])
    assert predicted_variant(run, sub) is None


def test_no_guess_where_a_scalar_decides():
    """A width passed as a run-time int: the dry run's stand-in scalar fails the launcher's size
    check, which defers to eager: no guess (the call compiles its variant as before)."""
    run, sub, _ = _cuda_launcher(_layer_norm_runtime_width, [_ln_args(64, 4096, torch.float32)] * 3)
    assert predicted_variant(run, sub) is None


@pytest.mark.cuda
@pytest.mark.parametrize("case", ["layer_norm_bf16_4096x768", "softmax_f32_8x50000", "row_sum_stepped_slice"])
def test_first_call_compiles_nothing_more_on_cuda(case):
    """On a GPU: the group is built with its guessed variant loaded, and the first call launches
    that one (no NVRTC run on the calling thread), with eager's values."""
    from graphfuser.executor.compiled import compile_group
    from graphfuser.runtime import cache

    fn, make = CASES[case]
    args = [a.cuda() for a in make()]
    if case == "row_sum_stepped_slice":
        args = [torch.randn(512, 1030, device="cuda")[:, 3:1027:2]]
    sf = graphfuser.script(fn)
    for _ in range(2):
        sf(*args)
    with config.override(disable=["fallback"]):
        out = sf(*args)
    g = graphfuser.last_executed_optimized_graph()
    (group,) = [n for n in g.all_nodes() if n.kind.endswith("FusionGroup")]
    run = compile_group(group)          # (the kernel cache's runner: the one the call used)
    loaded = [i for i, f in enumerate(run.namespace["_fns"]) if f is not None]
    guess = predicted_variant(run, run.compiled.sub)
    assert loaded == [guess]
    before = cache.STATS["compiles"]
    out = sf(*args)
    assert cache.STATS["compiles"] == before
    torch.testing.assert_close(out.float(), fn(*args).float(), rtol=2e-2, atol=2e-2)
