"""The fuzzer's own parts: generation covers the op table, the oracle can fail, hangs are caught."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

pytest.importorskip("hypothesis")

from graphfuser.fuzz import campaign, gen  # noqa: E402
from graphfuser.fuzz.oracle import compare_tensor, run_case  # noqa: E402
from graphfuser.fuzz.worker import Worker  # noqa: E402
from graphfuser.ops import ROWS  # noqa: E402
from tests.fuzz.oracle_cases import X, _case  # noqa: E402




def test_generator_covers_every_row():
    from graphfuser.fuzz.vocab import COMPOSITES
    from graphfuser.ops.random import RANDOM_ROWS

    # not generated: random rows (eager cannot reproduce their numbers), autocast's casts (made by
    # passes/autocast.py under torch.autocast) and the training batch norm that saves its
    # statistics and the layer norm that saves its statistics (made by autodiff/saved.py from
    # batch_norm and layer_norm), the bias-gradient route (made by
    # passes/bias.py under grad), the dense copy of a broadcast view (made by
    # passes/broadcast_copy.py from the repeat_kv composite): none is written by users
    # (and the composites: patterns a pass rewrites as a whole, made of rows)
    assert set(gen.OPS) - set(COMPOSITES) == set(ROWS) - set(RANDOM_ROWS) - {
        "autocast_to_full_precision", "autocast_to_reduced_precision", "batch_norm_train", "bias_grad",
        "dense_copy", "layer_norm_train"}


def test_generation_is_deterministic_and_diverse():
    a, b = campaign.generate(40, 5), campaign.generate(40, 5)
    assert [c["source"] for c in a] == [c["source"] for c in b]
    # distinct cases (generate deduplicates by source, inputs and calls; two cases may share a source)
    assert len({c["source"] + repr(c["inputs"]) + repr(c["calls"]) for c in a}) == 40
    assert len({c["source"] for c in a}) >= 35


def test_compare_tensor_catches_differences():
    e = torch.tensor([1.0, 2.0, float("nan")])
    assert compare_tensor(e.clone(), e, e.double(), 1.2e-7) is None
    assert compare_tensor(torch.tensor([1.0, 2.001, float("nan")]), e, e.double(), 1.2e-7)[0] == "wrong_value"
    assert compare_tensor(torch.tensor([1.0, 2.0, 3.0]), e, e.double(), 1.2e-7)[0] == "wrong_value"
    assert compare_tensor(e.half(), e, None, 1.2e-7)[0] == "wrong_dtype"
    assert compare_tensor(torch.tensor([1, 2]), torch.tensor([1, 3]), None, 1.2e-7)[0] == "wrong_value"
    m = torch.rand(3, 4)
    assert compare_tensor(m.t().contiguous(), m.t(), None, 1.2e-7)[0] == "wrong_strides"


def test_rounding_noise_is_not_a_failure():
    # eager's fp32 result is 1 ulp off the fp64 truth; an answer nearer the truth passes
    z = torch.tensor([0.1], dtype=torch.float64)
    e = torch.tensor([0.1], dtype=torch.float32).nextafter(torch.tensor([1.0]))
    assert compare_tensor(z.float(), e, z, 1.2e-7) is None


def test_a_clean_case_passes():
    res = run_case(_case("    return torch.relu(x0 * 2.0) + 1.0\n", [X]), "cpu", "/tmp", "clean")
    assert res["findings"] == [] and res["kernel_ran"]


def test_worker_reports_a_hang():
    w = Worker("cpu", timeout=0.01)
    try:
        res = w.run(_case("    return x0 + 1.0\n", [X]))
    finally:
        w.close()
    assert res["findings"][0]["category"] == "hang"


def test_import_graphfuser_needs_no_hypothesis():
    code = ("import sys; sys.modules['hypothesis'] = None; import graphfuser, graphfuser.fuzz; "
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr


def test_graphfuser_faithful_where_eager_is_not_passes():
    # eager's fp32 std of huge-mean data is off; graphfuser at the float64 truth is no failure,
    # graphfuser three times as far off on the other side is
    z = torch.tensor([0.008172], dtype=torch.float64)
    e = torch.tensor([0.00817468])
    assert compare_tensor(z.float(), e, z, 1.2e-7) is None
    assert compare_tensor(torch.tensor([0.0081640]), e, z, 1.2e-7)[0] == "wrong_value"


def test_gradient_noise_of_an_ill_conditioned_sum():
    """A gradient that cancels to ~0 (a bf16 scalar broadcast into a group norm of constant
    groups: fuzz graph 416 of seed 9393): eager's rounding noise is one sample; graphfuser's may be
    a few times it, never a real difference."""
    e, r = torch.tensor(6.10352e-05, dtype=torch.bfloat16), torch.tensor(-2.27374e-13, dtype=torch.float64)
    g = torch.tensor(1.83105e-04, dtype=torch.bfloat16)
    assert compare_tensor(g, e, r, 7.8e-3)[0] == "wrong_value"
    assert compare_tensor(g, e, r, 7.8e-3, eager_noise=4.0) is None
    assert compare_tensor(torch.tensor(0.5, dtype=torch.bfloat16), e, r, 7.8e-3, eager_noise=4.0)[0] == "wrong_value"
    # fuzz graph 335 (seed 6161): d/dx of x * rsqrt(x^2 + 1e-12), 0 up to 1e-12, comes out of
    # cancelling terms of the output gradient's size: its floor is eps times that size
    e, r, g = torch.tensor([0.0]), torch.tensor([6.26621e-12], dtype=torch.float64), torch.tensor([-3.76368e-09])
    assert compare_tensor(g, e, r, 1.2e-7)[0] == "wrong_value"
    assert compare_tensor(g, e, r, 1.2e-7, ref_floor=1.2e-7 * 1.5) is None


def test_eager_overflow_is_not_held_against_graphfuser():
    # fuzz graph 2871 (seed 6161): an fp16 prod's gradient where eager's products overflowed (NaN)
    # and the float64 reference is finite: graphfuser's value there is not judged (the deviation
    # eager_overflow); elsewhere it is
    e = torch.tensor([float("nan"), 1.0], dtype=torch.float16)
    z = torch.tensor([3.9e13, 1.0], dtype=torch.float64)
    assert compare_tensor(torch.tensor([0.0, 1.0], dtype=torch.float16), e, z, 9.8e-4)[0] == "eager_overflow"
    assert compare_tensor(torch.tensor([0.0, 2.0], dtype=torch.float16), e, z, 9.8e-4)[0] == "wrong_value"


def test_without_a_reference_low_precision_rounding_is_not_a_failure():
    # fuzz graph 231 (seed 9494): a float32 gradient through a bf16 autocast matmul, no float64
    # reference (its backward raised); graphfuser and eager 1 bf16 ulp apart
    g, e = torch.tensor([46848.0]), torch.tensor([47104.0])
    assert compare_tensor(g, e, None, 7.8e-3) is None
    assert compare_tensor(g, e, None, 1.2e-7)[0] == "wrong_value"
    assert compare_tensor(torch.tensor([40000.0]), e, None, 7.8e-3)[0] == "wrong_value"


def test_reference_floor_covers_float64_rounding():
    # a mean of integers that float64 Welford gives as 1.1e-16: exact 0 is no failure
    e, z = torch.tensor([1.1102e-16]), torch.tensor([1.1102e-16], dtype=torch.float64)
    assert compare_tensor(torch.tensor([0.0]), e, z, 1.2e-7, ref_floor=64 * 2.2e-16 * 3) is None
    assert compare_tensor(torch.tensor([1e-9]), e, z, 1.2e-7, ref_floor=64 * 2.2e-16 * 3)[0] == "wrong_value"


def test_exact_moments_reference_is_exact_for_constant_channels():
    from graphfuser.fuzz.reference import ExactMoments
    import torch.nn.functional as F

    x = torch.full((3, 4, 16), 2 / 3, dtype=torch.float64)
    rm, rv = torch.zeros(4, dtype=torch.float64), torch.ones(4, dtype=torch.float64)
    with ExactMoments():
        y = F.batch_norm(x, rm, rv, torch.randn(4, dtype=torch.float64), None, True, 0.1, 1e-12)
        ln = F.layer_norm(x.float(), [16], eps=1e-12)
    assert torch.equal(y, torch.zeros_like(y)) and torch.equal(ln, torch.zeros_like(ln))
    assert torch.allclose(rm, torch.full((4,), 0.2 / 3, dtype=torch.float64))   # eager's update ran


def test_rounded_pipeline_rounds_a_normalization_before_its_affine():
    """The oracle's correctly rounded pipeline (ExactMoments(stages=True) under
    RoundedIntermediates) rounds the normalized value to float32 before adding the bias, as every
    kernel does: -1/sqrt(1 + 1e-9) rounds to -1, and plus 1.0 that is 0; rounded only after the
    sum it stays 5e-10 (fuzz graph 225 of CPU seed 33701: a logical_and of such a value flipped
    where graphfuser's 0 was this pipeline's value)."""
    from graphfuser.fuzz.reference import ExactMoments, RoundedIntermediates
    import torch.nn.functional as F

    x, bias = torch.tensor([[-1.0, 1.0]]), torch.tensor([1.0, 1.0])
    with torch.no_grad(), ExactMoments(stages=True), RoundedIntermediates():
        staged = F.layer_norm(x, [2], None, bias, 1e-9)
        grouped = F.group_norm(x.reshape(1, 2, 1), 1, None, bias, 1e-9)
    with torch.no_grad(), ExactMoments():
        whole = F.layer_norm(x, [2], None, bias, 1e-9)
    assert staged[0, 0].item() == 0.0 and grouped[0, 0, 0].item() == 0.0
    assert 0 < whole[0, 0].item() < 1e-9


def test_rounded_mean_reference_takes_deviations_from_the_mean_a_kernel_holds():
    """Fuzz graph 345 of CPU seed 34735: a float64 batch norm of a channel holding thirds, at a
    row equal to the channel's mean rounded to float64. Its exact deviation is -2.4e-17 (the exact
    mean of those doubles is not a double), the value a kernel computes is 0 (its mean register
    holds the rounded mean), and a logical_xor of it flipped. ``ExactMoments(rounded_mean=True)``
    gives that 0; the exact reference does not."""
    from graphfuser.fuzz.reference import ExactMoments
    import torch.nn.functional as F

    x = torch.tensor([1 / 3, 2 / 3, 1.0, 2 / 3], dtype=torch.float64).reshape(4, 1, 1)
    rm, rv = torch.zeros(1, dtype=torch.float64), torch.ones(1, dtype=torch.float64)
    assert x.mean().item() == 2 / 3
    with torch.no_grad(), ExactMoments(stages=True, rounded_mean=True):
        kernel = F.batch_norm(x, rm.clone(), rv.clone(), None, None, True, 0.1, 1e-12)
    with torch.no_grad(), ExactMoments(stages=True):
        exact = F.batch_norm(x, rm.clone(), rv.clone(), None, None, True, 0.1, 1e-12)
    assert kernel[1].item() == 0.0 and exact[1].item() != 0.0


def test_exact_moments_reference_holds_the_mean_beyond_float64():
    # fuzz graph 2090 (seed 8787): a float64 layer norm of rows with mean 1e4 and spread 1e-2 sums
    # to 0; with the mean rounded to float64 the reference's sum was 1.5e-10, eager's value, and
    # graphfuser's exact 0 looked wrong
    from graphfuser.fuzz.reference import ExactMoments
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(123)
    x = 1e4 + torch.randn(64, 5, generator=g, dtype=torch.float64) * 1e-2
    with ExactMoments():
        ln = F.layer_norm(x, [5], eps=1e-12)
    assert ln.sum(1).abs().max() < 1e-14
    assert (F.layer_norm(x, [5], eps=1e-12).sum(1).abs().max()) > 1e-12     # what eager's float64 gives


def test_ill_conditioned_output_may_reach_twice_eagers_worst_error():
    # fuzz graph 1942 (seed 8787): a matmul of a group norm cancelling 4099 terms; graphfuser's
    # error 1.6x eager's worst is one more draw of rounding, 3x is not
    z = torch.tensor([0.2, 0.5], dtype=torch.float64)
    e = torch.tensor([0.2001, 0.5])
    assert compare_tensor(torch.tensor([0.20016, 0.5]), e, z, 1.2e-7) is None
    assert compare_tensor(torch.tensor([0.2003, 0.5]), e, z, 1.2e-7)[0] == "wrong_value"
    assert compare_tensor(torch.tensor([0.20016, 0.5]), e, z, 1.2e-7, eager_noise=1.0)[0] == "wrong_value"


def test_cases_at_replays_one_graph_of_a_campaign():
    assert campaign.cases_at(5, [7, 3]) == [campaign.generate(8, 5)[7], campaign.generate(8, 5)[3]]


def test_report_keeps_each_failing_case_and_replay_reruns_it(tmp_path, capsys):
    import json

    from graphfuser.fuzz import report
    from graphfuser.fuzz.cli import main

    case = _case("    return x0 + 1.0\n", [X])
    failing = {"findings": [{"category": "wrong_value", "call": 2, "detail": "made up"}], "deviations": []}
    res = {"device": "cpu", "graphs": 2, "seed": 1, "knobs": {}, "seconds": 0.0, "counts": {"wrong_value": 1},
           "failed_graphs": 1, "deviations": {}, "kernel_ran": 0, "invalid": 0, "runnable": 2, "fusion_rate": 0.0,
           "per_op": {}, "known": {}, "unknown": [], "classes": [],
           "cases": [case, case], "results": [{"findings": [], "deviations": []}, failing]}
    _, js = report.write(res, str(tmp_path), str(tmp_path / "repros"))
    saved = json.load(open(js))["failures"]
    assert [f["graph"] for f in saved] == [1] and saved[0]["case"] == case
    assert main(["--replay", js, "--graph", "1"]) == 0          # x0 + 1.0 does not fail
    out = capsys.readouterr().out
    assert "graph 1" in out and "no difference from eager" in out and "1 graph(s): 0 failing" in out


def test_torchscript_semantics_are_judged_after_the_calls_before(monkeypatch):
    # TorchScript's optimized executor (from its second call on) may drop a dead in-place write
    # that raises in eager; graphfuser, recovering through it, answers as it does on that call
    from graphfuser.fuzz import oracle

    class FirstCallRaises:
        def __init__(self, fn):
            self.calls = 0

        def __call__(self, *args):
            self.calls += 1
            if self.calls == 1:
                raise RuntimeError("result type Float can't be cast to the desired output type Bool")
            return args[0]

    monkeypatch.setattr(oracle.torch.jit, "script", FirstCallRaises)
    case = _case("    return x0\n", [X])
    assert not oracle._torchscript_answers(None, case, 0, "cpu")
    assert oracle._torchscript_answers(None, case, 1, "cpu")


def test_no_worse_than_eager_in_the_max_norm_passes():
    # a normalization of near-constant groups (fuzz graph 7868 of seed 5151): eager is far from
    # the float64 truth, graphfuser nearer at one element and within eager's worst error at another
    z = torch.tensor([0.00357645, 0.00996215, -0.0021], dtype=torch.float64)
    e = torch.tensor([-0.00130823, 0.00952345, -0.0021])
    g = torch.tensor([0.00468943, 0.0103604, -0.0015])
    assert compare_tensor(g, e, z, 1.2e-7) is None
    # worse than eager's worst error anywhere: a failure
    assert compare_tensor(torch.tensor([0.0136, 0.00996, -0.0021]), e, z, 1.2e-7)[0] == "wrong_value"
    # a NaN or inf where eager and the reference are finite is never within eager's error
    assert compare_tensor(torch.tensor([float("nan"), 0.00996, -0.0021]), e, z, 1.2e-7)[0] == "wrong_value"


def test_exact_moments_reference_is_exact_for_constant_groups():
    from graphfuser.fuzz.reference import ExactMoments

    x = torch.tensor([1 / 3, 1 / 3, 2 / 3, 2 / 3], dtype=torch.float64).reshape(1, 4, 1).expand(2, 4, 3)
    with ExactMoments():
        y = torch.nn.functional.group_norm(x, 2, None, None, 0.1)
    assert bool((y == 0).all())


_LAUNCH_FAILS = ("    if not torch.jit.is_scripting():\n"       # eager only, as eager's CUDA kernel launch
                 "        raise torch.AcceleratorError('CUDA error: invalid argument')\n"
                 "    return x0 * 2.0\n")


def test_eager_launch_failure_on_an_empty_tensor_is_a_deviation(monkeypatch):
    # fuzz graph 802 of seed 8181: eager CUDA group_norm over 0 channels fails to launch its kernel
    # ("CUDA error: invalid argument"); graphfuser returns the empty result, the right answer
    from graphfuser.fuzz import DEVIATIONS, oracle

    monkeypatch.setattr(oracle, "_torchscript_answers", lambda *a: False)
    empty = dict(X, shape=["B", 0])
    res = run_case(_case(_LAUNCH_FAILS, [empty]), "cpu", "/tmp", "empty_launch")
    assert res["findings"] == [] and {d["deviation"] for d in res["deviations"]} == {"empty_launch"}
    assert len(res["deviations"]) == 7 and "empty_launch" in DEVIATIONS
    # the same error on a tensor with elements is no launch of an empty grid: a missing error
    res = run_case(_case(_LAUNCH_FAILS, [X]), "cpu", "/tmp", "launch_error")
    assert res["deviations"] == [] and {f["category"] for f in res["findings"]} == {"missing_error"}


def test_empty_launch_is_matched_narrowly():
    from graphfuser.fuzz.known import eager_launch_failure_on_empty

    empty, full = torch.ones(3, 0, 7), torch.ones(3, 2)
    launch = torch.AcceleratorError("CUDA error: invalid argument\nCUDA kernel errors might be reported later")
    assert eager_launch_failure_on_empty(launch, [full, empty, 1.0])
    assert eager_launch_failure_on_empty(RuntimeError("CUDA error: invalid configuration argument"), [empty])
    assert not eager_launch_failure_on_empty(launch, [full, torch.ones(1)])     # no zero-size dim
    assert not eager_launch_failure_on_empty(RuntimeError("CUDA error: an illegal memory access was encountered"),
                                             [empty])
    assert not eager_launch_failure_on_empty(ValueError("CUDA error: invalid argument"), [empty])
    assert not eager_launch_failure_on_empty(RuntimeError("Expected weight to be a vector of size equal to the "
                                                          "number of channels in input"), [empty])


def test_only_the_optimized_executor_raising_is_still_torchscript_semantics():
    # fuzz graph 6033 (seed 7373): TorchScript's frontend drops a dead bitwise_or of a float64
    # tensor, which eager raises on; from its second call TorchScript's optimized executor raises
    # something else (a differentiable graph rejects the in-place write into a view of a fresh
    # intermediate). The language's answer is the unoptimized run's: graphfuser's is no defect.
    x = {"name": "x0", "kind": "tensor", "dtype": "float64", "shape": [1, 3, 0], "layout": "dense",
         "fill": "normal", "requires_grad": True}
    body = ("    v1 = x0 * x0.size(-1)\n    v3 = torch.bitwise_or(v1, 3.0)\n"
            "    v4 = v1.squeeze()\n    v4.mul_(2)\n    return v4\n")
    res = run_case(_case(body, [x], [[3, False]] * 4), "cpu", "/tmp", "ts6033")
    assert res["findings"] == []
    assert {d["deviation"] for d in res["deviations"]} == {"torchscript_semantics"}


def test_gradients_are_judged():
    from graphfuser.fuzz.grads import check_grads

    case = {"seed": 3, "inputs": [{"name": "x0"}]}
    xe, xg = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)

    def cmp(g, e, r, go=0.0):
        return compare_tensor(g, e, r, 1.2e-7, check_strides=False)

    ok = check_grads(case, 0, [xg * 2.0], [xe * 2.0], [xg], [xe], lambda: None, cmp)
    assert ok == []
    bad = check_grads(case, 0, [xg * 3.0], [xe * 2.0], [xg], [xe], lambda: None, cmp)
    assert [f["category"] for f in bad] == ["wrong_grad"] and "grad of x0" in bad[0]["detail"]
    # no input that requires grad reaches the outputs' graph: nothing to judge
    assert check_grads(case, 0, [xg.detach() * 2], [xe.detach() * 2], [xg], [xe], lambda: None, cmp) is None


def test_a_training_case_judges_gradients_through_fused_groups():
    x = dict(X, requires_grad=True)
    w = dict(X, name="x1", requires_grad=True)
    res = run_case(_case("    return torch.sigmoid(x0 * x1 + 2.0) * torch.tanh(x0 - x1)\n", [x, w]), "cpu", "/tmp",
                   "train")
    assert res["findings"] == [] and res["kernel_ran"] and res["grad_calls"] == 7


def test_inputs_written_in_place_are_judged_against_the_reference():
    # fuzz graph 8639 (seed 9494): eager's group_norm of one-element groups with eps 1e-12 is
    # far from exact; graphfuser's batch-norm running mean, written into an input, matched the
    # float64 reference's but was judged against eager's alone
    from graphfuser.fuzz.oracle import compare_tensor as cmp

    e, g, r = torch.tensor([-0.731274]), torch.tensor([-0.726722]), torch.tensor([-0.72672216], dtype=torch.float64)
    assert cmp(g, e, None, 1.2e-7, check_strides=False) is not None
    assert cmp(g, e, r, 1.2e-7, check_strides=False) is None
    x1 = {"name": "x1", "kind": "tensor", "dtype": "float32", "shape": ["B", 1], "layout": "sliced", "fill": "ints",
          "requires_grad": False}
    p = [{"name": f"x{k}", "kind": "tensor", "dtype": "float32", "shape": [1], "layout": "dense",
          "fill": "positive" if k == 5 else "normal", "requires_grad": False} for k in (2, 3, 4, 5, 6)]
    body = ("    v1 = F.group_norm(x1, 1, x2, x3, 1e-12)\n"
            "    v2 = F.batch_norm(v1, x4, x5, None, x6, True, 0.1, 0.1)\n    return (v2, v1)\n")
    res = run_case(_case(body, [x1] + p, [[16, False]] * 4 + [[33, False]] * 3), "cpu", "/tmp", "gn8639")
    assert res["findings"] == []


def test_a_gradient_across_a_tie_is_a_deviation_only_at_a_few_elements():
    # fuzz graph 257 (seed 77): graphfuser's fp16 log_softmax rounded one value onto the row's
    # maximum (within one ulp of eager's), so amax split the gradient over a tie eager did not have
    from graphfuser.fuzz.grads import check_grads

    xe, xg = torch.randn(1000, requires_grad=True), torch.randn(1000, requires_grad=True)
    with torch.no_grad():
        xg.copy_(xe)

    def cmp(g, e, r, go=0.0):
        return compare_tensor(g, e, r, 1.2e-7, check_strides=False)

    few = torch.ones(1000)
    few[7] = -1.0
    many = torch.where(torch.arange(1000) % 10 == 0, -1.0, 1.0)
    for ops, scale, want in ((["amax"], few, "deviation"), (["mul"], few, "category"), (["amax"], many, "category")):
        got = check_grads({"seed": 1, "inputs": [{"name": "x0"}], "ops": ops}, 0, [xg * scale], [xe * 1.0],
                          [xg], [xe], lambda: None, cmp)
        assert len(got) == 1 and want in got[0], (ops, got)


def test_rounded_pipeline_reference_knows_an_amplified_last_ulp():
    # fuzz graph 6476 (seed 9292): acos(erf(x)) with erf(x) = 1 - 2.8e-8, which a correctly rounded
    # float32 erf makes 1.0 (graphfuser: acos gives 0); eager's erf gave the float below 1 (acos:
    # 3.45e-4); the float64 reference held graphfuser's 0 to be wrong (here: erf(3.95) = 1 - 2.3e-8)
    from graphfuser.fuzz.reference import RoundedIntermediates

    x = torch.tensor([3.95, 0.5])
    with RoundedIntermediates():
        r = torch.acos(torch.erf(x)).double()
    z = torch.acos(torch.erf(x.double()))
    assert r[0] == 0 and z[0] > 2e-4 and abs(r[1] - z[1]) < 1e-7
    g, e = torch.tensor([0.0, float(z[1])]), torch.tensor([3.0e-4, float(z[1])])
    assert compare_tensor(g, e, z, 1.2e-7)[0] == "wrong_value"
    assert compare_tensor(g, e, r, 1.2e-7) is None
    assert compare_tensor(torch.tensor([7e-4, float(z[1])]), e, r, 1.2e-7)[0] == "wrong_value"


def test_rounded_pipeline_reference_leaves_views_in_place_and_random_ops_to_eager():
    from graphfuser.fuzz.reference import RoundedIntermediates

    x = torch.tensor([1.0, 2.0, 3.0])
    torch.manual_seed(5)
    want = torch.rand_like(x)
    torch.manual_seed(5)
    with RoundedIntermediates():
        v = x[1:]
        x.add_(0.5)
        y = torch.rand_like(x)
        m = torch.max(x.view(3, 1) * 1.0, 1)
    assert v.data_ptr() == x.data_ptr() + 4 and torch.equal(v, torch.tensor([2.5, 3.5]))
    assert torch.equal(y, want) and type(m).__name__ == "max" and m.values.dtype == torch.float32


def test_empty_group_norm_weight_gradient_is_a_deviation():
    # fuzz graph 2867 of seed 11111 (and 3704 of seed 10808): a group norm of empty groups
    # ([2, 7, 0, 1]); eager's weight gradient is NaN (0 * the NaN statistics), graphfuser's 0
    from graphfuser.fuzz.grads import _empty_statistics, check_grads

    def cmp(g, e, r, go=0.0):
        return compare_tensor(g, e, r, 1.2e-7, check_strides=False)

    for shape, ops, want in (((2, 7, 0, 1), ["group_norm"], "deviation"), ((2, 7, 1, 1), ["group_norm"], "category"),
                             ((2, 7, 0, 1), ["mul"], "category")):
        we, wg = torch.randn(7, requires_grad=True), torch.randn(7, requires_grad=True)
        x = torch.empty(shape)
        got = check_grads({"seed": 1, "inputs": [{"name": "x0"}, {"name": "x1"}], "ops": ops}, 0,
                          [wg * 0.0], [we * float("nan")], [x, wg], [x, we], lambda: None, cmp)
        assert len(got) == 1 and want in got[0], (shape, ops, got)
    case = {"ops": ["group_norm"]}
    g, e = torch.zeros(3), torch.full((3,), float("nan"))
    assert _empty_statistics(case, [torch.empty(2, 0)], g, e)
    assert not _empty_statistics(case, [torch.empty(2, 0)], torch.ones(3), e)     # not 0: a failure


def test_welford_inf_is_matched_narrowly():
    # fuzz graph 284 of seed 8787: a training batch norm over a channel holding -inf (fp16, the
    # column expanded): eager's CUDA running mean is NaN (Welford's inf - inf), graphfuser's -inf,
    # which eager's CPU kernel gives too
    from graphfuser.fuzz.known import welford_inf
    from graphfuser.fuzz.oracle import compare_tensor

    inf, nan = float("inf"), float("nan")
    e = torch.tensor([0.25, nan, 1.0])

    def judge(g2):
        return compare_tensor(g2, e, None, 1e-3, check_strides=False)

    assert welford_inf(["batch_norm", "cos"], torch.tensor([0.25, -inf, 1.0]), e, judge)
    assert not welford_inf(["layer_norm"], torch.tensor([0.25, -inf, 1.0]), e, judge)      # no running stats
    assert not welford_inf(["batch_norm"], torch.tensor([0.5, -inf, 1.0]), e, judge)       # another difference
    assert not welford_inf(["batch_norm"], torch.tensor([0.25, 3.0, 1.0]), e, judge)       # finite where eager NaN
    # fuzz graph 1379 of CUDA seed 9191: std_mean's mean of a segment holding -inf, eager's CUDA
    # Welford -inf (the inf last in its thread's order), graphfuser's NaN (eager's CPU value there)
    e2 = torch.tensor([0.25, -inf, 1.0])

    def judge2(g2):
        return compare_tensor(g2, e2, None, 1e-3, check_strides=False)

    g2 = torch.tensor([0.25, nan, 1.0])
    assert welford_inf(["std_mean", "add"], g2, e2, judge2)
    assert not welford_inf(["mean"], g2, e2, judge2)                                       # a plain mean: -inf
    assert not welford_inf(["batch_norm"], g2, e2, judge2)                                 # the other direction only
    assert not welford_inf(["var_mean"], torch.tensor([0.5, nan, 1.0]), e2, judge2)        # another difference


@pytest.mark.parametrize("how", ["linear", "addmm"])
def test_generated_linears_with_biases_match_eager(monkeypatch, how):
    """The generator's linears with a bias (F.linear; GPT-2's Conv1D, an addmm of the flattened
    input unflattened back), under grad, with the CUDA-only route of their bias gradient taken
    on the CPU too (``--cuda-decisions``): no finding."""
    from graphfuser.fuzz import campaign
    from graphfuser.fuzz.worker import take_cuda_decisions_on_the_cpu
    from graphfuser.passes import bias

    monkeypatch.setattr(bias, "ROUTE_DEVICES", bias.ROUTE_DEVICES)
    monkeypatch.setattr(bias, "HALF_CONV_DEVICES", bias.HALF_CONV_DEVICES)
    take_cuda_decisions_on_the_cpu()
    assert "cpu" in bias.ROUTE_DEVICES
    cases = [c for c in campaign.cases_at(34601, list(range(60)), 8, None) if how in c["ops"]]
    assert cases
    for case in cases[:3]:
        res = run_case(case, "cpu", "/tmp", f"linear_{how}")
        assert not res["findings"], (case["source"], res["findings"])


def test_layer_norm_overflow_row_is_matched_narrowly():
    # fuzz graph 636 of CPU seed 34442 (torch.compile): a float32 layer norm over a row of 7
    # holding 3e38 twice, then log: eager's CPU kernel NaN for so short a row, graphfuser the
    # bias (and its log), as eager gives for rows of its vector width or more
    from graphfuser.fuzz.known import layer_norm_overflow_row
    from graphfuser.fuzz.oracle import compare_tensor

    nan = float("nan")
    e = torch.tensor([0.25, nan, 1.0])

    def judge(g2):
        return compare_tensor(g2, e, None, 1e-3, check_strides=False)

    huge = [torch.tensor([0.5, 3e38, 3e38, 1.0])]
    g = torch.tensor([0.25, -4.2, 1.0])
    assert layer_norm_overflow_row(["layer_norm", "log"], huge, g, e, judge)
    assert not layer_norm_overflow_row(["rms_norm", "log"], huge, g, e, judge)                  # no layer norm
    assert not layer_norm_overflow_row(["layer_norm"], [torch.tensor([0.5, 1e10])], g, e, judge)   # no overflow
    assert not layer_norm_overflow_row(["layer_norm"], huge, torch.tensor([0.5, -4.2, 1.0]), e, judge)  # elsewhere
    assert not layer_norm_overflow_row(["layer_norm"], huge, g.to("meta"), e.to("meta"), judge)  # not the CPU


def test_layer_norm_inf_grad_is_matched_narrowly():
    """Fuzz graph 186 of CPU seed 34701: a layer norm whose weight holds -inf (and graph 1306 of
    seed 34717: an upstream gradient divided by 0). Eager's CPU backward gives NaN across the row;
    graphfuser an inf where its two infinite sums agree in sign. Only inf-for-NaN differences of a
    CPU graph with a layer norm are that deviation."""
    from graphfuser.fuzz.known import layer_norm_inf_grad
    from graphfuser.fuzz.oracle import compare_tensor

    inf, nan = float("inf"), float("nan")
    # eager's own backward of such a row
    x = torch.tensor([[-2.3, -0.8, 0.5, 1.4]], requires_grad=True)
    w = torch.tensor([-0.8, -inf, 0.5, 1.3])
    torch.nn.functional.layer_norm(x, [4], w).backward(torch.tensor([[0.3, -1.1, 0.7, 2.0]]))
    assert bool(x.grad.isnan().all())
    e = torch.tensor([nan, nan, 1.0])

    def judge(g2):
        return compare_tensor(g2, e, None, 1e-3, check_strides=False)

    args = [torch.tensor([0.5, -inf, 1.0])]
    g = torch.tensor([-inf, nan, 1.0])
    assert layer_norm_inf_grad(["layer_norm", "mul"], args, g, e, judge)
    assert not layer_norm_inf_grad(["rms_norm"], args, g, e, judge)                          # no layer norm
    assert not layer_norm_inf_grad(["layer_norm"], args, torch.tensor([-4.0, nan, 1.0]), e, judge)  # finite
    assert not layer_norm_inf_grad(["layer_norm"], args, torch.tensor([-inf, nan, 2.0]), e, judge)  # elsewhere
    assert not layer_norm_inf_grad(["layer_norm"], args, g.to("meta"), e.to("meta"), judge)  # no values
    # a group norm, whose eager backward builds dx from the two sums on either device (CUDA seed
    # 36401, graph 469: an upstream gradient of -inf into a group of 4)
    xg = torch.tensor([[0.3, -1.2, 0.9, 2.2]], requires_grad=True)
    torch.nn.functional.group_norm(xg, 1).backward(torch.tensor([[0.5, -inf, 1.0, 0.25]]))
    assert bool(xg.grad.isnan().all())
    assert layer_norm_inf_grad(["group_norm", "leaky_relu"], args, g, e, judge)
