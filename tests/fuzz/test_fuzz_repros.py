"""Repros the fuzzer found (logs/fuzz-*.md), each with its class's generalization: every call is
compared with eager, outputs and the inputs after the call (in-place writes)."""

import pytest
import torch
import torch.nn.functional as F

import graphfuser


def _run(fn, make, calls=5):
    sf = graphfuser.script(fn)
    for _ in range(calls):
        a, b = make(), make()
        out_e, out_g = fn(*a), sf(*b)
        for e, g in zip(out_e if isinstance(out_e, tuple) else (out_e,),
                        out_g if isinstance(out_g, tuple) else (out_g,)):
            assert g.dtype == e.dtype and g.shape == e.shape
            torch.testing.assert_close(g, e, equal_nan=True)
        for x, y in zip(a, b):
            if isinstance(x, torch.Tensor):
                torch.testing.assert_close(y, x, equal_nan=True)
    return sf


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int32, torch.int64, torch.float32])
def test_number_minus_integer_tensor_promotes_first(dtype):
    # TorchScript's __rsub__ is neg(self) + other: an unsigned tensor would wrap (0.0 - uint8(1) = 255)
    def f(x, s: float):
        return s - x, 2 - x, -x + s, (s - x) * 2.0

    lo = 0 if dtype == torch.uint8 else -128 if dtype == torch.int8 else -3
    _run(f, lambda: (torch.tensor([1, 0, lo, 3], dtype=dtype), 0.5))
    _run(f, lambda: (torch.tensor(1, dtype=dtype), 0.0))


def _no_dim_amax(x):
    v = torch.amax(x, [], keepdim=True)
    w = torch.ne(v, float("inf"))
    v.exp_()
    return w, v


def _floor_of_int(x):
    v0 = torch.floor(x)
    v1 = x * v0.size(-1)
    v2 = torch.amin(v1, [-1], keepdim=False)
    v4 = F.dropout(v0, 0.5, False)
    v4.mul_(2)
    return v2, v0


def _identity_sum(x):
    v = x.sum(-1, keepdim=True)
    v.add_(1.0)
    return v, x * 2.0


@pytest.mark.parametrize("fn,make", [
    (_no_dim_amax, lambda: (torch.tensor(3.0),)),
    (_floor_of_int, lambda: (torch.arange(16, dtype=torch.int32).reshape(16, 1),)),
    (_identity_sum, lambda: (torch.arange(4.0).reshape(4, 1) - 1.5,)),
])
def test_identity_computed_by_a_reduction_group_is_a_new_tensor(fn, make):
    # eager allocates for a reduction over no (or size-1) dims and floor of an int; an in-place
    # write to the result must not reach the input
    _run(fn, make)


@pytest.mark.parametrize("n", [1, 2])
def test_sum_to_size_of_its_own_shape_aliases_its_input(n):
    def f(x, n: int):
        v = x.sum_to_size([n, 16])
        v.sub_(-1.5)
        x.sigmoid_()
        return torch.trunc(v)

    def g(x):
        x.mul_(1e30)
        v = x.sum_to_size([1])
        v.clamp_(min=float("nan"))
        return v, x + 1.0

    _run(f, lambda: (torch.ones(16, n).t(), n))
    _run(g, lambda: (torch.zeros(1, dtype=torch.float64),))


@pytest.mark.parametrize("view", ["v0.unsqueeze(0)", "v0.unsqueeze(0).permute(0)", "v0.unsqueeze(0).unsqueeze(1).transpose(0, 1)"])
def test_view_of_a_pointwise_op_on_0_dim_inputs_keeps_its_dims(view):
    import importlib.util
    import os
    import sys
    import tempfile

    src = f"""import torch
def f(x, y):
    v0 = 1 + y
    v1 = {view}
    v1.mul_(2)
    return v1, x + 1.0
"""
    path = os.path.join(tempfile.mkdtemp(prefix="gf_repro_"), "m.py")
    with open(path, "w") as fh:
        fh.write(src)
    spec = importlib.util.spec_from_file_location(f"gf_repro_{abs(hash(view))}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    _run(mod.f, lambda: (torch.arange(3.0), torch.tensor(2.0)), calls=6)


def _unused_batch_norm(x, rm, rv):
    v = F.batch_norm(x, rm, rv, None, None, True, 0.1, 1e-5)
    return x * 2.0


def _unused_instance_norm(x, rm, rv):
    v = F.instance_norm(x, rm, rv, None, None, True, 0.1, 1e-5)
    return x.relu()


@pytest.mark.parametrize("fn", [_unused_batch_norm, _unused_instance_norm])
def test_unused_norm_in_training_still_updates_running_stats(fn):
    # the schema marks no argument as written, but eager updates running_mean / running_var
    x = torch.arange(24.0).reshape(2, 3, 4) / 7.0
    _run(fn, lambda: (x.clone(), torch.zeros(3), torch.ones(3)))


def _detach_out(x, s: int):
    v0 = torch.mean(x, None, keepdim=False, dtype=torch.float64)
    v0.sub_(s)
    v1 = torch.detach(x)
    return torch.atan2(v1, v0) * x.size(-1), v1


def _detach_of_detach(x, s: int):
    return (x * 2.0).relu(), x.detach().detach()


@pytest.mark.parametrize("fn", [_detach_out, _detach_of_detach])
@pytest.mark.parametrize("layout", ["sliced", "transposed", "dense"])
@pytest.mark.parametrize("grad", [False, True])
def test_detach_output_is_a_view_of_its_input(fn, layout, grad):
    # eager's detach returns a view (the input's strides and storage, no grad): so does the group
    def make():
        base = torch.arange(3 * 8 * 8, dtype=torch.float32).reshape(3, 8, 8) / 50.0
        x = {"sliced": base[..., ::2], "transposed": base.transpose(1, 2), "dense": base}[layout]
        return (x.clone() if layout == "dense" else x).requires_grad_(grad), 1

    sf = _run(fn, make)
    x, s = make()
    out_e, out_g = fn(x, s)[1], sf(x, s)[1]
    assert out_g.stride() == out_e.stride() and out_g.data_ptr() == x.data_ptr()
    assert not out_g.requires_grad


def _bn_train(x, rm, rv):
    return F.batch_norm(x, rm, rv, None, None, True, 0.1, 1e-5).relu()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_batch_norm_running_stats_of_an_empty_batch_are_left_alone(dtype):
    # eager returns early for an empty input; the split-off update must not write NaN stats
    sizes = iter([4, 4, 4, 4, 4, 4, 0, 0, 0, 0, 3, 3])     # make() runs twice per call
    pdt = torch.float64 if dtype == torch.float64 else torch.float32

    def make():
        n = next(sizes)
        x = (torch.arange(n * 3 * 5, dtype=torch.float64).reshape(n, 3, 5).sin() * 3).to(dtype)
        return x, torch.linspace(-1, 1, 3, dtype=pdt), torch.linspace(0.5, 2, 3, dtype=pdt)

    _run(_bn_train, make, calls=6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_batch_norm_running_stats_of_half_input_are_float_statistics(dtype):
    # eager's batch statistics of fp16 / bf16 input are float: the running mean is not rounded
    def make():
        x = (torch.arange(2 * 3 * 7, dtype=torch.float64).reshape(2, 3, 7).cos() * 1.37 + 0.3).to(dtype)
        return x, torch.full((3,), -0.74), torch.full((3,), 0.6)

    sf = graphfuser.script(_bn_train)
    for _ in range(5):
        a, b = make(), make()
        _bn_train(*a), sf(*b)
        assert torch.equal(a[1], b[1]) or torch.allclose(a[1], b[1], rtol=2e-7, atol=0)
        torch.testing.assert_close(b[2], a[2], rtol=2e-7, atol=1e-7)


@pytest.mark.parametrize("layout", ["dense", "transposed", "channels_last"])
def test_batch_norm_running_variance_update_follows_eager_per_layout(layout):
    # eager's CPU update of float32 running stats is double on its generic path (an input neither
    # contiguous nor channels-last) and float on its contiguous ones: a batch variance past
    # float's range (1e77) beside a running variance of -inf gives -inf on the first, NaN on the
    # others, where graphfuser gave NaN for both (fuzz graph 730 of CPU seed 34313, transposed)
    def make():
        x = torch.randn(2, 3, 4, 5, generator=torch.Generator().manual_seed(0))
        x[0, 1, 0, :2] = torch.tensor([3e38, -3e38])
        if layout == "transposed":
            x = x.transpose(2, 3).contiguous().transpose(2, 3)
        elif layout == "channels_last":
            x = x.contiguous(memory_format=torch.channels_last)
        return x, torch.zeros(3), torch.tensor([1.0, -float("inf"), 2.0])

    sf = graphfuser.script(_bn_train)
    for _ in range(5):
        a, b = make(), make()
        _bn_train(*a), sf(*b)
        torch.testing.assert_close(b[2], a[2], equal_nan=True)
        # (the running mean of the channel holding +-3e38: eager's float sum loses the small
        # values beside them to rounding, graphfuser's compensated one keeps them: 0.0077 / 0.016)
        torch.testing.assert_close(b[1], a[1], rtol=0, atol=0.01)
    assert "FusionGroup" in str(graphfuser.last_executed_optimized_graph())


def _softmax_and_weight_exp(x, w):
    return F.softmax(torch.fmin(w, x), dim=3).log_softmax(3), torch.exp(w)


@pytest.mark.parametrize("shape", [(3, 7, 0, 33), (0, 7, 2, 33)])
def test_reduction_group_output_without_the_empty_axis_is_written(shape):
    # exp(w) [33] shares the softmax's group; with an empty batch no kernel iteration writes it
    _run(_softmax_and_weight_exp, lambda: (torch.full(shape, 0.25), torch.linspace(0.1, 1.1, 33)))


def _bn_eval_grad_stats(x, rm, rv, w):
    return F.batch_norm(x, rm, rv, w, None, False, 0.1, 1e-5) * 2.0


def _bn_train_grad_stats(x, rm, rv, w):
    return F.batch_norm(x, rm, rv, w, None, True, 0.1, 1e-5) * 2.0


@pytest.mark.parametrize("fn", [_bn_eval_grad_stats, _bn_train_grad_stats])
@pytest.mark.parametrize("n", [0, 2])
def test_running_stats_that_require_grad_follow_eager(fn, n):
    # eager raises for a non-empty input (not differentiable for running_mean) and returns an
    # output without grad for an empty one: the group must not make one that requires grad
    def make():
        return (torch.ones(n, 1, 5, 3), torch.zeros(1).requires_grad_(), torch.ones(1), torch.ones(1))

    sf = graphfuser.script(fn)
    for _ in range(4):
        try:
            e = fn(*make())
        except RuntimeError as err:
            with pytest.raises(RuntimeError, match="not differentiable"):
                sf(*make())
            assert "not differentiable" in str(err)
            continue
        g = sf(*make())
        assert g.requires_grad == e.requires_grad and g.shape == e.shape


def _instance_norm_bias(x, b):
    return F.instance_norm(torch.sinh(x * 0.5), None, None, None, b, True, 0.1, 1e-5)


def _instance_norm_plain(x, b):
    return F.instance_norm(torch.sinh(x * 0.5), None, None, None, None, True, 0.1, 1e-5) + b[0]


@pytest.mark.parametrize("fn", [_instance_norm_bias, _instance_norm_plain])
def test_norm_of_an_empty_batch_runs_eager_and_raises_its_error(fn):
    # eager's instance norm of an empty batch with a weight or bias raises IndexError
    sizes = iter([3] * 8 + [0] * 6)
    sf = graphfuser.script(fn)
    for _ in range(7):
        n = next(sizes)
        next(sizes)
        x, b = torch.linspace(-1, 1, n * 7 * 16).reshape(n, 7, 16), torch.linspace(0, 1, 7)
        try:
            e = fn(x, b)
        except IndexError:
            with pytest.raises(IndexError):
                sf(x, b)
            continue
        torch.testing.assert_close(sf(x, b), e)


def _alias_write_after_min(x0, x2):
    v0 = torch.minimum(x2, x0)
    v1 = v0.to(v0.dtype)
    v1.mul_(2)
    return v1


def test_respecialization_profiles_on_copies():
    # a guard miss re-profiles the group's template, which writes an alias of its input in
    # place: run on the call's own tensors it doubled the returned output a second time
    calls = iter([False] * 8 + [True] * 6)

    def make():
        t = next(calls)
        base = torch.arange(99, dtype=torch.int32).reshape(1, 33, 3) % 5 + 1
        x0 = base.transpose(1, 2).contiguous().transpose(1, 2) if t else base
        return x0, torch.tensor(1e4, dtype=torch.float64)

    _run(_alias_write_after_min, make, calls=7)


def _lone_nan_bounds(x):
    a = x.clamp(None, float("nan"))
    b = torch.clamp(x * 2.0, min=float("nan"))
    c = torch.clamp_min(x + 1.0, float("nan"))
    d = torch.clamp(x - 1.0, -0.5, float("nan"))
    return a + 1.0, b, c, d


def _lone_nan_bounds_copy(x):
    a = x.clamp(None, float("nan"))
    b = torch.clamp(x * 3.0, min=float("nan"))
    c = torch.clamp_min(x + 2.0, float("nan"))
    d = torch.clamp(x - 2.0, -0.5, float("nan"))
    return a - 1.0, b, c, d


def test_clamp_with_a_lone_nan_bound_follows_this_torch():
    # eager's clamp with one NaN number bound returns NaN in this torch, the input unchanged
    # before pytorch#172200; clamp_min and two-sided clamp propagate it in every version
    x = torch.tensor([1.0, float("nan"), -2.0, 0.25])
    _run(_lone_nan_bounds, lambda: (x.clone(),))


def test_clamp_with_a_lone_nan_bound_on_a_torch_that_ignores_it(monkeypatch):
    from graphfuser.ops import pointwise

    monkeypatch.setattr(pointwise, "_LONE_NAN", False)
    x = torch.tensor([1.0, float("nan"), -2.0, 0.25])
    sf = graphfuser.script(_lone_nan_bounds_copy)
    for _ in range(4):
        a, b, c, d = sf(x.clone())
    torch.testing.assert_close(a, x - 1.0, equal_nan=True)
    torch.testing.assert_close(b, x * 3.0, equal_nan=True)
    assert c.isnan().all() and d.isnan().all()


def _ln_big_mean(x, w, b):
    return F.layer_norm(x * 1.0, [x.shape[-1]], w, b, 1e-5)


@pytest.mark.parametrize("shape", [(33, 528), (4, 31), (2, 4096)])
def test_layer_norm_of_huge_mean_data_is_near_the_float64_result(shape):
    # x - mean rounds mean at 1e4 (ulp 1e-3) against a spread of 1e-2: (x - k) - s1 / N does not
    g = torch.Generator().manual_seed(5)
    x = 1e4 + 1e-2 * torch.randn(*shape, generator=g)
    w, b = torch.randn(shape[-1], generator=g), torch.randn(shape[-1], generator=g)
    sf = graphfuser.script(_ln_big_mean)
    for _ in range(4):
        got = sf(x, w, b)
    ref = _ln_big_mean(x.double(), w.double(), b.double())
    err = (got.double() - ref).abs().max().item()
    eager_err = (_ln_big_mean(x, w, b).double() - ref).abs().max().item()
    assert err < 1e-3 and err < eager_err / 10, (err, eager_err)


def _recompute_after_sub(x0, x1):
    v0 = -3 * x0
    v1 = torch.maximum(v0, x1)
    x0.sub_(x0)
    return torch.amin(v0, [], keepdim=True)


def _recompute_after_copy(x0, x1):
    v0 = torch.abs(x0) * 2.0
    v1 = v0 + x1
    x0.copy_(x1)
    return torch.sum(v0, [1]), v1


def _recompute_after_view_write(x0, x1):
    v0 = torch.exp(x0 * 0.5)
    v1 = torch.minimum(v0, x1)
    x0.view(-1).fill_(0.0)
    return v0.mean(-1), v1


def _recompute_var_mean_after_add(x0, x1):
    v0 = torch.trunc(x0 * 4.0)
    v1 = x0.reshape(-1)
    x0.add_(1)
    v2 = F.relu6(v0)
    v3, v4 = torch.var_mean(v0, [2], unbiased=False, keepdim=False)
    return v4, v1


def _recompute_after_write_in_if(x0, x1, flag: bool):
    v0 = x0 * x1
    v1 = v0 - 1.0
    if flag:
        x1.mul_(0.0)
    return v0.amax([0]), v1


@pytest.mark.parametrize("fn", [_recompute_after_sub, _recompute_after_copy, _recompute_after_view_write,
                                _recompute_var_mean_after_add])
def test_reduction_does_not_recompute_its_chain_after_an_in_place_write(fn):
    # a lone reduction may recompute the pointwise chain it reads (partition's reduction_split);
    # an in-place write between the chain and the reduction makes that copy read written data
    _run(fn, lambda: (torch.arange(1.0, 17.0).reshape(1, 4, 4), torch.zeros(1, 4, 4)), calls=6)
    _run(fn, _pairs(lambda g: (torch.randn(5, 3, 7, generator=g), torch.randn(5, 3, 7, generator=g))), calls=6)


def test_reduction_does_not_recompute_its_chain_after_a_write_in_a_branch():
    _run(_recompute_after_write_in_if,
         _pairs(lambda g: (torch.randn(6, 5, generator=g), torch.randn(6, 5, generator=g), True)), calls=6)


def _pairs(make):
    """A maker for ``_run`` whose two calls per round (eager's, graphfuser's) get equal random data."""
    count = [0]

    def pair():
        count[0] += 1
        return make(torch.Generator().manual_seed((count[0] - 1) // 2))
    return pair


def _int_isinf_of_amin(x):
    return torch.amin(x, [], keepdim=False).isinf()


def _int_isfinite_of_sum(x):
    return x.sum(-1).isfinite(), torch.isnan(x.amax(0))


@pytest.mark.parametrize("fn", [_int_isinf_of_amin, _int_isfinite_of_sum])
@pytest.mark.parametrize("dtype", [torch.int8, torch.int64, torch.bool])
def test_float_class_of_an_integer_reduction_compiles(fn, dtype):
    # isinf / isnan / isfinite of an integer are constants; the reduction feeding one must still
    # lower (was: "reduced loop axes without a reduction", a compile fallback)
    from graphfuser.config import config

    x = torch.arange(32).reshape(4, 8)[:, ::2].to(dtype)
    with config.override(disable=["fallback"]):
        _run(fn, lambda: (x.clone(),), calls=4)


def _bn_train_then_writes(x0, x1, x2, x3):
    v0 = F.batch_norm(x1, x2, x3, None, None, True, 0.1, 0.1)
    x0.mul_(1)
    v0.add_(-1.5)
    v1 = torch._log_softmax(v0, 0, False)
    x0.fill_(0)
    return v1, v0


@pytest.mark.parametrize("n", [0, 3])
def test_respecialization_of_a_group_whose_input_requires_grad(n):
    # a layout change re-profiles the template on copies of the call's inputs; a copy of an
    # input that requires grad was a leaf, and the template's in-place write into it raised
    # "a leaf Variable that requires grad is being used in an in-place operation"
    calls = iter([False] * 8 + [True] * 6)

    def make():
        cl = next(calls)
        torch.manual_seed(0)
        x1 = torch.randn(n, 16, 33, dtype=torch.float64)
        if cl:
            x1 = x1.transpose(1, 2).contiguous().transpose(1, 2)
        return (torch.randn(1, 16, 33), x1.requires_grad_(), torch.randn(16, dtype=torch.float64),
                torch.rand(16, dtype=torch.float64) + 0.5)

    _run(_bn_train_then_writes, make, calls=7)


def _sum_to_own_size(x):
    v0 = x <= 1e30
    return x.sum_to_size([33]), v0


def _sum_to_own_size_2d(x):
    return x.sum_to_size([4, 33]), x.sum_to_size([4, 33]) * 1.0, x.sum_to_size([1, 33]) + 1.0


@pytest.mark.parametrize("fn", [_sum_to_own_size, _sum_to_own_size_2d])
def test_sum_to_size_to_its_own_shape_returns_the_input(fn):
    # eager returns ``self`` for a sum_to_size to its own shape: the output is the input (strides
    # included, a write into one is seen in the other), never a fused copy
    rank = 1 if fn is _sum_to_own_size else 2

    def make():
        torch.manual_seed(0)
        base = torch.randn(4, 66) if rank == 2 else torch.randn(66)
        return (base[..., ::2],)

    sf = _run(fn, make)
    x = make()[0]
    out_g, out_e = sf(x), fn(x)
    assert out_g[0].stride() == out_e[0].stride() == x.stride()
    assert out_g[0].data_ptr() == x.data_ptr()
