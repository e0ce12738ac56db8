"""Repros the fuzzer found (logs/fuzz-*.md), continued from ``test_fuzz_repros.py``: the same
rule, every call compared with eager, outputs and the inputs after the call."""
import math

import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.config import config

from helpers import DEVICES, run_fused
from test_fuzz_repros import _run


def _layer_norm_read_for_its_size(x0, x1):
    v0 = F.layer_norm(x1, [5], None, None, 1e-05)
    v1 = F.relu6(x1)
    return x0 * v0.size(-1), v1


def _rms_norm_read_for_its_size(x0, x1):
    v0 = F.rms_norm(x0, [5], x1, 0.1)
    v1 = torch.sigmoid(v0)
    return x0 * v1.size(-1)


@pytest.mark.parametrize("fn", [_layer_norm_read_for_its_size, _rms_norm_read_for_its_size])
def test_norm_read_only_for_its_size_keeps_eagers_shape_error(fn):
    # the shape read moved to the norm's input left the norm dead: a later call whose trailing
    # dim no longer matches normalized_shape returned a result where eager raises
    sizes = iter([5] * 8 + [0, 0, 15, 15])

    def make():
        n = next(sizes)
        if fn is _rms_norm_read_for_its_size:
            return torch.arange(n, dtype=torch.float32), torch.ones(5)
        return torch.arange(n, dtype=torch.int32), torch.linspace(-1, 1, n)

    sf = _run(fn, make, calls=4)
    for _ in range(2):
        a = make()
        with pytest.raises(RuntimeError, match="normalized_shape") as e_eager:
            fn(*a)
        with pytest.raises(RuntimeError, match="normalized_shape") as e_g:
            sf(*a)
        assert str(e_g.value) == str(e_eager.value)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_in_place_multiply_by_a_number_rounds_as_eager(dtype):
    # fuzz graph 5529 (seed 9494): the host program ran aten::mul_.Scalar, which rounds the
    # number to the tensor's dtype first (1e-6 becomes an fp16 subnormal); eager's x.mul_(1e-6)
    # multiplies in float
    def f(x, y):
        x.mul_(1e-06)
        y.mul_(0.1)
        return torch.rsqrt(y.float() + 2.0).frac()

    def make():
        g = torch.Generator().manual_seed(0)
        return torch.randn(64, generator=g).to(dtype), torch.randn(64, generator=g).to(dtype)

    _run(f, make)


def test_a_group_profiled_on_empty_inputs_respecializes_for_full_ones():
    # fuzz graphs 4283 and 9536 (seed 9595): profiled with batch 0 (a transposed input), the
    # group wrote later full outputs contiguous where eager follows the input's layout
    def f(x):
        return torch.erf(x), x.erfc()

    sf = graphfuser.script(f)
    for b in (0, 0, 0, 0, 2, 2, 3):
        x = torch.randn(b, 16, 33).transpose(1, 2)
        for g, e in zip(sf(x), f(x)):
            torch.testing.assert_close(g, e)
            if e.numel():
                assert g.stride() == e.stride()


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_with_mixed_dtypes_raises_as_eager(training):
    # fuzz graph 6670 (seed 9595): a float64 input with float32 running stats; eager's CPU kernel
    # raises "mixed dtype (CPU)" for a non-empty batch (an empty one returns)
    def f_train(x, rm, rv):
        return F.batch_norm(x.frac(), rm, rv, None, None, True, 0.1, 1e-05).tan()

    def f_eval(x, rm, rv):
        return F.batch_norm(x.frac(), rm, rv, None, None, False, 0.1, 1e-05).tan()

    f = f_train if training else f_eval
    sf = graphfuser.script(f)
    for b in (0, 0, 0, 0, 2, 3):
        args = (torch.randn(b, 16, dtype=torch.float64), torch.zeros(16), torch.ones(16))
        if b == 0:
            torch.testing.assert_close(sf(*args), f(*args))
            continue
        with pytest.raises(RuntimeError, match="mixed dtype"):
            f(*args)
        with pytest.raises(RuntimeError, match="mixed dtype"):
            sf(*args)
    # fp16 / bf16 input with float32 parameters is eager's allowed mix: still fused and right
    def g(x, rm, rv):
        return F.batch_norm(x * 2.0, rm, rv, None, None, True, 0.1, 1e-05) + 1.0

    _run(g, lambda: (torch.linspace(-3, 3, 64).reshape(4, 16).to(torch.bfloat16), torch.zeros(16), torch.ones(16)))


def _rows_and_columns(x):
    return torch.log_softmax(x * 2.0, 0), torch.sum(-x, [1], keepdim=True)


def test_row_group_with_column_sums_respecialized_for_strided_rows():
    # fuzz graph 1497 (seed 8585): log_softmax over dim 0 (rows contiguous in the profiled,
    # transposed input) with the column sums over dim 1 in its kernel; called with a row-major
    # input, the re-specialized group failed to compile ("column sums need a row kernel whose
    # reduced axes are the contiguous ones"). The partition now rejects it with that reason.
    from graphfuser.config import config

    sf = graphfuser.script(_rows_and_columns)
    g = torch.Generator().manual_seed(5)
    with config.override(disable=["fallback"]):
        for x in [torch.randn(6, 5, generator=g).t()] * 4 + [torch.randn(5, 6, generator=g)] * 3:
            for a, b in zip(sf(x), _rows_and_columns(x)):
                torch.testing.assert_close(a, b)
                assert a.stride() == b.stride()


def _sum_read_for_its_dtype(x):
    v0 = torch.sum(x, None, keepdim=False)
    return torch.rsub(x, 7, alpha=0.5).type_as(v0), torch.div(x, x)


@pytest.mark.parametrize("grad", [False, True])
def test_reduction_read_only_for_its_dtype(grad):
    # fuzz graph 7521 (seed 8787): a full sum whose result only gives type_as its dtype reaches no
    # output; the group's lowering raised "reduced loop axes without a reduction"
    from graphfuser.config import config

    sf = graphfuser.script(_sum_read_for_its_dtype)
    x = torch.randn(4, 5, 6, generator=torch.Generator().manual_seed(6)).bfloat16().requires_grad_(grad)
    with config.override(disable=["fallback"]):
        for _ in range(4):
            got, want = sf(x), _sum_read_for_its_dtype(x)
            for a, b in zip(got, want):
                torch.testing.assert_close(a, b)
    assert "CpuFusionGroup" in str(graphfuser.last_executed_optimized_graph())


def _tan_of_lgamma(x):
    return torch.tan(torch.lgamma(x) * 16.0), torch.lgamma(x * 1.0) + 0.0


def test_cpu_lgamma_is_correctly_rounded_as_eagers():
    # fuzz graph 3883 (seed 8787): glibc's lgammaf is a few ulps off where eager's (SLEEF's
    # vectorized lgammaf) is correctly rounded; tan near its pole made the ulp a 1e-4 error
    from helpers import check

    x = torch.tensor([-0.5496936440467834, -0.02689872495830059, 0.14279577136039734, 2.5, -2.5, 0.0, -3.0,
                      float("nan"), float("inf"), -float("inf"), 1e30, -1e-30])
    check(_tan_of_lgamma, x, rtol=1.3e-6, atol=1e-5)
    # over a spread of floats: bit-identical to eager wherever eager is correctly rounded
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(4000, generator=g) * 3, torch.rand(4000, generator=g) * 40 - 20,
                   torch.rand(2000, generator=g) * 0.1 - 0.05])
    got = graphfuser.script(_tan_of_lgamma)
    for _ in range(3):
        lg = got(x)[1]
    ref = torch.tensor([math.lgamma(v) for v in x.double().tolist()], dtype=torch.float64).float()
    eager = torch.lgamma(x)
    exact = eager == ref
    assert bool((lg[exact] == eager[exact]).all())
    assert bool((lg == ref).all())


def _divide_after_an_in_place_add(x0, x1):
    v0 = x0.t()
    x0.add_(1)
    return x0 // x0, v0


def test_a_call_that_raised_after_writing_an_input_is_not_run_again():
    # fuzz graph 1977 (seed 9595): uint8 255 + 1 wraps to 0 and 0 // 0 raises in eager; the host
    # program raised too, then ran the call again through TorchScript, whose add_ saw the first
    # run's write (1 // 1): no error, and the input written twice
    sf = graphfuser.script(_divide_after_an_in_place_add)
    for _ in range(3):
        x, y = torch.full((1, 5), 255, dtype=torch.uint8), torch.full((1, 5), 255, dtype=torch.uint8)
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            _divide_after_an_in_place_add(x, x)
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            sf(y, y)
        assert torch.equal(x, y)            # written once, as eager's
    ok = lambda: (torch.full((1, 5), 3, dtype=torch.uint8), torch.ones(1))      # noqa: E731
    _run(_divide_after_an_in_place_add, ok)


def _group_norm_of_no_channels_written_in_place(x0, x1, s0: float):
    v0 = F.group_norm(x1, 3, None, None, 0.1)
    v0.sub_(s0)
    x0.mul_(2)
    return torch.remainder(F.softplus(x1, 1.0, 1.0), float("nan")), v0


def test_an_empty_normalization_written_in_place_under_grad():
    # fuzz graph 2088 (seed 9595): the group norm of a [33, 0, 1] input ran its eager fallback,
    # which returned a view of its input from the group's autograd node; the sub_ on it raised
    # ("a view created inside a custom Function"), then the call ran again through TorchScript
    def make():
        return torch.zeros(33, 0, 1, dtype=torch.uint8), torch.zeros(33, 0, 1, requires_grad=True), 0.5

    sf = graphfuser.script(_group_norm_of_no_channels_written_in_place)
    with graphfuser.config.override(disable=["fallback"]):
        for _ in range(5):
            for g, e in zip(sf(*make()), _group_norm_of_no_channels_written_in_place(*make())):
                assert g.dtype == e.dtype and g.shape == e.shape


def _layer_norm_of_transposed_rows(x1, w, b):
    return F.layer_norm(x1, [7, 5], w, b, 1e-05) * 2.0


def test_layer_norm_gradients_of_rows_against_memory_order():
    # fuzz graph 5420 (seed 9595): a layer norm over [7, 5] of an input whose last two dims are
    # transposed; its weight gradient joined the row kernel and could not be stored ("column sum
    # spans reduced roots that do not coalesce"): the backward group ran eagerly
    g = torch.Generator().manual_seed(0)
    sf = graphfuser.script(_layer_norm_of_transposed_rows)
    with graphfuser.config.override(disable=["fallback"]):
        for n in (16, 16, 16, 16, 1, 1):
            x = torch.randn(n, 5, 5, 7, generator=g).transpose(2, 3)
            w, b = torch.randn(7, 5, generator=g), torch.randn(7, 5, generator=g)
            ins = [t.clone().requires_grad_() for t in (x, w, b)]
            ref = [t.clone().requires_grad_() for t in (x, w, b)]
            sf(*ins).square().sum().backward()
            _layer_norm_of_transposed_rows(*ref).square().sum().backward()
            for a, e in zip(ins, ref):
                torch.testing.assert_close(a.grad, e.grad, rtol=1e-4, atol=1e-4)



_EMPTY_BATCH_LERP = {
    "source": "import torch\n\n\ndef fn(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, x3: torch.Tensor):\n"
              "    v0 = torch.matmul(x0, x3.to(x0.dtype))\n    v0.clamp_(min=-1.0)\n"
              "    v1 = torch.lerp(x1, x1, x0)\n    v2 = x1.rsqrt()\n    return (v2, v1)\n",
    "inputs": [
        {"name": "x0", "kind": "tensor", "dtype": "bfloat16", "shape": ["B", 1, 1], "layout": "dense",
         "fill": "huge_mean", "requires_grad": True},
        {"name": "x1", "kind": "tensor", "dtype": "bfloat16", "shape": [0, 1], "layout": "expanded",
         "fill": "nan_inf", "requires_grad": True},
        {"name": "x2", "kind": "tensor", "dtype": "bool", "shape": [1, 0, 0], "layout": "dense",
         "fill": "nan_inf", "requires_grad": False},
        {"name": "x3", "kind": "tensor", "dtype": "float32", "shape": [1, 1], "layout": "dense",
         "fill": "edge", "requires_grad": True}],
    "calls": [[0, False]] * 7, "ops": ["inplace:clamp_", "lerp", "matmul", "rsqrt"], "seed": 24,
    "autocast": "bfloat16"}


def test_column_sums_of_empty_gradients_stay_apart_from_rows(tmp_path):
    # fuzz graph 983 (seed 33402): the backward of a lerp over a batch of 0 under bf16 autocast,
    # a row sum and a column sum of empty tensors in one group; the empty tensors' strides gave
    # the partition a contiguous row and the lowering none ("column sums need a row kernel whose
    # reduced axes are the contiguous ones"). Empty row inputs no longer take column sums.
    from graphfuser.config import config
    from graphfuser.fuzz.oracle import run_case

    with config.override(disable=["fallback"], repro_dir=str(tmp_path)):
        result = run_case(_EMPTY_BATCH_LERP, "cpu", str(tmp_path), "empty_lerp")
    assert result["findings"] == []


def _sum_to_half(x):
    return torch.sum(x * 1.0, [0], keepdim=True, dtype=torch.float16), torch.sum(x * 2.0, None, dtype=torch.bfloat16)


def _mean_to_half(x):
    return torch.mean(x * 1.0, None, keepdim=True, dtype=torch.float16)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_sum_with_a_half_dtype_converts_each_element_first(dtype):
    # eager's sum(x, dtype=float16) reduces x.to(float16): 1e5 and -1e5 become inf and -inf, the
    # sum NaN; the kernel summed them unrounded, in float32, to 3. mean(x, dtype=float16) converts
    # to float32 instead (eager's accumulator): 1 (looked at while judging fuzz graph 1908 of seed
    # 33411, whose float32 partial sums overflow in another order than eager's)
    from graphfuser.config import config

    x = torch.tensor([[1e5, 1.0], [-1e5, 2.0], [3.0, 1e39 if dtype == torch.float64 else 7e4]], dtype=dtype)
    with config.override(disable=["fallback"]):
        for fn in (_sum_to_half, _mean_to_half):
            sf = graphfuser.script(fn)
            for _ in range(4):
                got, ref = sf(x), fn(x)
                for g, r in zip(got if isinstance(got, tuple) else (got,), ref if isinstance(ref, tuple) else (ref,)):
                    torch.testing.assert_close(g, r, equal_nan=True)


def _var_then_matmul(x0, x1):
    v1 = torch.var(x0, [2, 3], unbiased=True, keepdim=True)
    return torch.matmul(v1, x1.to(v1.dtype)), 2 * x0


def test_var_backward_scales_an_fp16_gradient_before_doubling_it():
    # fuzz graph 139 (CPU seed 33433): the variance of constant fp16 rows gets a gradient of
    # 40000 through the matmul; 2 * 40000 is past fp16's range, and inf * (x - mean = 0) made the
    # input's gradient NaN where eager's (2 / dof) * grad * 0 is 0
    from graphfuser.config import config

    sf = graphfuser.script(_var_then_matmul)
    x1 = torch.tensor([[40000.0]])
    with config.override(disable=["fallback"]):
        for _ in range(4):
            xs = [torch.full((1, 2, 16, 1), 10000.0, dtype=torch.float16).expand(3, 2, 16, 1).detach()
                  .requires_grad_() for _ in range(2)]
            outs = sf(xs[0], x1), _var_then_matmul(xs[1], x1)
            grads = [torch.autograd.grad(o, x, [torch.ones_like(t) for t in o])[0] for o, x in zip(outs, xs)]
            assert not grads[0].isnan().any()
            torch.testing.assert_close(grads[0], grads[1])


def _row_value_stored_beside_a_softmax(x0, s0: bool):
    # pow(x, 0) * flag is a value of no element: a reduction kernel's lanes computed it from a
    # scalar they never declared (CPU fuzz graph 774 of seed 34401, a KeyError at compile)
    v0 = torch._log_softmax(x0, -3, False)
    v0.mul_(0.5)
    return torch.pow(x0, 0) * s0, v0


def _row_value_of_an_int_scalar(x0, k: int):
    return torch.softmax(x0, 1), torch.ones_like(x0) * k + 1


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(3, 7, 1), (5, 33, 8), (2, 64, 16)])
@pytest.mark.parametrize("fn,arg", [(_row_value_stored_beside_a_softmax, True),
                                    (_row_value_stored_beside_a_softmax, False),
                                    (_row_value_of_an_int_scalar, 3)])
def test_row_value_stored_to_a_full_output(device, shape, fn, arg):
    x = torch.randn(shape, device=device)
    run_fused(fn, x, arg, tol={})
    run_fused(fn, x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else x.transpose(0, 1), arg, tol={})


def _batch_norm_beside_round(x2, x3, x4, x5, x6, x7, x8):
    # CPU fuzz graph 829 of seed 34452: one group makes the batch norm's v0 (read only by a second
    # batch norm, for its running statistics) and round's v1; the loss reaches v1 alone
    v0 = F.batch_norm(x2, x3, x4, None, None, True, 0.1, 1e-12)
    v1 = x2.round()
    v3 = torch.matmul(torch.matmul(v1, x5), x6)
    F.batch_norm(v0, x7, x8, None, None, True, 0.1, 1e-05)
    v5 = v1.reshape(-1)
    v1.add_(1)
    return v5, v3


def test_zero_derivative_output_beside_an_undefined_gradient_gives_zeros():
    """Only ``round`` (derivative 0) lies between the output the loss reaches and the input:
    the input's gradient is zeros, as eager's; the group's full backward, run with zeros for the
    batch norm output's undefined gradient, had made it NaN (its statistics hold a NaN)."""
    nan, inf = float("nan"), float("inf")
    x2 = torch.tensor([[0.3, 0.2, 0.4], [nan, -1e4, nan], [inf, -inf, 1.5], [0.6, -1.0, 0.3],
                       [inf, -1e4, -0.7]]).t().contiguous().t().unsqueeze(-1)    # (5, 3, 1), strides (1, 5, 1)
    rest = lambda: (torch.tensor([0.8, -0.5, 0.0]), torch.tensor([0.9, 1.4, 0.6]), torch.zeros(1, 8),
                    torch.full((8, 1), 0.5), torch.zeros(6)[::2], torch.ones(6)[::2])
    sf = graphfuser.script(_batch_norm_beside_round)
    for _ in range(5):
        xe, xg = x2.clone().requires_grad_(), x2.clone().requires_grad_()
        oe, og = _batch_norm_beside_round(xe, *rest()), sf(xg, *rest())
        (oe[0].sum() + oe[1].nansum()).backward()
        (og[0].sum() + og[1].nansum()).backward()
        torch.testing.assert_close(og[0], oe[0], equal_nan=True)
        torch.testing.assert_close(xg.grad, xe.grad, equal_nan=True)



def _shape_of_a_layer_norm_beside_dead_readers(x0, x1, x2):
    # CPU fuzz graph 772 of seed 34701: the first layer norm's output is read for its size and
    # by an atan2 whose only reader, a second layer norm, is dead
    v0 = F.layer_norm(x0, [7], None, None, 1e-12)
    x1.neg_()
    v1 = x1 * v0.size(-1)
    v3 = torch.atan2(v0, v1)
    v5 = F.layer_norm(v3, [7], x2, None, 1e-05)
    return v1


def test_layer_norm_read_for_its_size_keeps_its_shape_check():
    """Eager's layer norm raises for an input whose last dim is not the normalized shape, even
    where only its size is read. The shape read had moved to the input while the (dead) atan2
    still read the output; then the atan2 and the layer norms went as dead code, and a batch of
    0 ran without the error."""
    fn = _shape_of_a_layer_norm_beside_dead_readers
    sf = graphfuser.script(fn)
    x2 = torch.randn(7)
    for _ in range(4):
        torch.testing.assert_close(sf(torch.randn(7), torch.tensor(0.5), x2), fn(torch.randn(7), torch.tensor(0.5), x2))
    with pytest.raises(RuntimeError, match="normalized_shape"):
        fn(torch.randn(0), torch.tensor(0.5), x2)
    with pytest.raises(RuntimeError, match="normalized_shape"):
        sf(torch.randn(0), torch.tensor(0.5), x2)


# a channel as in CPU fuzz graph 637 of seed 34722: 3e38 four times, then -inf four times, among
# ordinary values
_OVERFLOWING_CHANNEL = [0.5, 3e38, 3e38, 3e38, 3e38, -math.inf, -math.inf, -math.inf, -math.inf] + \
    [(-1.0) ** i * (0.25 + i / 64) for i in range(39)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("front", ["script", "compile"])
def test_batch_norm_running_mean_of_sums_past_float_on_the_cpu(front, dtype):
    """A training batch norm's running mean on the CPU, of a channel whose float sum passes float's
    range before it meets -inf: the float64 reference's mean is -inf (and eager's float32 one, by
    the order its vector lanes meet the values); float sums had made it NaN (inf + -inf). Summed
    in double, it is -inf (graphs 637 and 1354 of CPU seed 34722, float32 and bf16)."""
    def fn(x, rm, rv):
        return F.batch_norm(x, rm, rv, None, None, True, 0.1, 0.1)

    if front == "compile":
        from graphfuser.frontend.dynamo import graphfuser_backend

        torch._dynamo.reset()
        f = torch.compile(fn, backend=graphfuser_backend)
    else:
        f = graphfuser.script(fn)
    x = torch.randn(1, 2, 3, 16).to(dtype)
    stats = lambda: (torch.zeros(2, dtype=dtype), torch.ones(2, dtype=dtype))  # noqa: E731
    for _ in range(3):
        f(x, *stats())
    x[0, 1] = torch.tensor(_OVERFLOWING_CHANNEL).reshape(3, 16).to(dtype)
    rm, rv = stats()
    rme, rve = stats()
    f(x, rm, rv)
    fn(x, rme, rve)
    assert x[0, 1].double().mean().item() == -math.inf
    assert rm[1].item() == -math.inf
    torch.testing.assert_close(rm[0], rme[0])
    if dtype == torch.float32:
        torch.testing.assert_close(rm, rme, equal_nan=True)


def _sums_over_one(x):
    y = x * 2
    return (torch.sum(y, [-1], keepdim=True), torch.mean(y, [1]), torch.sum(y, [1, 2], keepdim=True),
            torch.rsqrt(torch.mean(y, [-1])))


@pytest.mark.parametrize("frontend", ["script", "compile"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("device", DEVICES)
def test_a_sum_over_size_one_dims_of_negative_zeros_is_positive_zero(device, dtype, frontend):
    """Fuzz graph 1435 of CPU seed 34722 (torch.compile): rsqrt of a mean over a dim of size 1
    of a batch norm's -0 (a constant channel, a negative weight) gave -inf where eager gives +inf
    (eager's sum starts from +0, and -0 + +0 is +0). A reduction over size-1 dims only is the
    identity in graphfuser's lowering; for a sum, plus +0. Zeros of both signs, NaN and inf rows
    beside them; the signs are compared, not only the values."""
    x = torch.tensor([[-0.0], [0.0], [float("nan")], [-float("inf")], [-1.5]], dtype=dtype, device=device)
    x = x.reshape(5, 1, 1).expand(5, 1, 1).contiguous()
    fn = _sums_over_one
    if frontend == "compile":
        from graphfuser.frontend.dynamo import graphfuser_backend
        torch._dynamo.reset()
        sf = torch.compile(fn, backend=graphfuser_backend)
    else:
        sf = graphfuser.script(fn)
    for _ in range(4):
        out = sf(x)
    for g, e in zip(out, fn(x)):
        torch.testing.assert_close(g, e, equal_nan=True)
        real = ~e.isnan()
        assert torch.equal(torch.signbit(g)[real], torch.signbit(e)[real]), (g, e)   # (a NaN's sign means nothing)


def _linear_permuted_with_a_cast_bias(x0, w, b, x4):
    v0 = x0.contiguous()
    x0.mul_(0.5)
    v1 = F.linear(x0, w.to(x0.dtype), b.to(x0.dtype)).permute(0, 3, 1, 2)
    v2 = F.linear(b, x4.to(b.dtype))
    b.add_(7)
    v3 = torch.var(v0, [2], unbiased=False, keepdim=True)
    return v1.log1p(), v2, v3


def test_a_split_bias_reshaped_by_a_later_pass_is_not_folded_back():
    """Fuzz graph 2906 of CPU seed 34725: the bias of ``linear(...).permute(0, 3, 1, 2)`` split
    off past the permute ([3] unsqueezed to [3, 1, 1]); sink_views then moved those unsqueezes
    above the bias's cast, so the cast's value became [3, 1, 1]. No group took the add, and
    folding it back put the [3, 1, 1] value into the linear: a broadcast error on the third
    call. The add now stays (unfused): every call matches eager."""
    def make():
        x0 = torch.randn(1, 7, 7, 5).transpose(-1, -2)
        return x0, torch.randn(3, 7), torch.randn(3), torch.randn(3, 3)

    sf = graphfuser.script(_linear_permuted_with_a_cast_bias)
    for _ in range(5):
        a, b = make(), None
        b = tuple(t.clone() for t in a)
        for g, e in zip(sf(*b), _linear_permuted_with_a_cast_bias(*a)):
            torch.testing.assert_close(g, e, equal_nan=True)
        for x, y in zip(a, b):
            torch.testing.assert_close(y, x)


def _batch_norm_of_an_empty_unsqueezed_input(x0, x2, x3, x4):
    v2 = x0.unsqueeze(0)
    x0.mul_(0.5)
    v4 = torch.log1p(v2)
    F.batch_norm(v4, x2, x3, None, x4, True, 0.1, 1e-12)
    v7 = x0.squeeze()
    v7.mul_(2)
    return 2.0 * v4, torch.lgamma(v7)


def test_training_batch_norm_of_an_empty_input_beside_stats_of_another_width():
    """Fuzz graph 1588 of CPU seed 34703: a training batch norm of a [1, B, 0, 5, 0] input (its
    channels are the batch) beside running stats of 33. Eager returns the empty input and checks
    nothing; graphfuser's split-off running-stats update broadcast 35 channels' statistics into
    the 33 stats and raised once B became 35 (a re-specialized layout). A batch norm profiled on
    an empty input is left as it is."""
    def make(batch, flip):
        x0 = torch.rand(batch, 0, 5, 0, dtype=torch.bfloat16)
        if flip:
            x0 = torch.rand(0, 0, 5, batch, dtype=torch.bfloat16).transpose(0, 3)
        return x0, torch.randn(33), torch.rand(33) + 0.5, torch.randn(33)

    sf = graphfuser.script(_batch_norm_of_an_empty_unsqueezed_input)
    for batch, flip in [(33, False)] * 4 + [(35, True)] * 3:
        a = make(batch, flip)
        b = tuple(t.clone() for t in a)
        for g, e in zip(sf(*b), _batch_norm_of_an_empty_unsqueezed_input(*a)):
            assert g.shape == e.shape and g.dtype == e.dtype
        for x, y in zip(a[1:], b[1:]):
            torch.testing.assert_close(y, x)


def _half_mean_used_twice(x0: torch.Tensor, s0: int):
    v1 = torch.mean(x0, None, keepdim=True, dtype=torch.float16)
    v3 = torch.where(x0 * x0.size(-1) > 0, v1, s0)
    return torch.addcmul(v3, x0, v1, value=-2.0)


@pytest.mark.parametrize("device", DEVICES)
def test_emulated_casts_round_the_gradient_of_a_half_intermediate(device):
    """Fuzz graph 274 of CUDA seed 36407: a float16 mean of float64 values near 1e4, used twice
    by float64 ops. Eager's engine casts the gradient each use returns to float16, where
    sum(-2 * x * g) overflows to -inf; graphfuser's fused backward keeps it in float64 (finite,
    the fp32-intermediates deviation) unless emulate_precision_casts is on, which now rounds the
    gradients of fp16 / bf16 intermediates as it rounds their values."""
    torch.manual_seed(0)
    x = (torch.randn(33, dtype=torch.float64, device=device) + 1e4).requires_grad_()
    (want,) = torch.autograd.grad(_half_mean_used_twice(x, 2).sum(), x)
    assert torch.isneginf(want).all()
    for emulate in (True, False):
        with config.override(emulate_precision_casts=emulate):
            sf = graphfuser.script(_half_mean_used_twice)
            for _ in range(5):
                (got,) = torch.autograd.grad(sf(x, 2).sum(), x)
        if emulate:
            torch.testing.assert_close(got, want)
        else:
            assert torch.isfinite(got).all()         # float64 throughout: no overflow


def test_an_integer_remainder_by_a_false_bool_raises_as_eager_without_torchscript(tmp_path):
    """Fuzz graph 172 of CPU seed 36532: ``(s0 + x) % s1`` of a 0-dim int8 ``x`` and ``s1`` False.
    Eager raises ZeroDivisionError; torch.jit.script's own function kills the process with
    SIGFPE. The host program raises eager's error and no longer hands the call to TorchScript's
    executor (run in a child process, which the signal would end)."""
    import subprocess
    import sys

    code = (
        "import torch, graphfuser\n"
        "def fn(x: torch.Tensor, s0: bool, s1: bool):\n"
        "    v1 = s0 + x\n"
        "    return v1 % s1\n"
        "sf = graphfuser.script(fn)\n"
        "x = torch.tensor(3, dtype=torch.int8)\n"
        "for _ in range(3):\n"
        "    try:\n"
        "        sf(x, False, False)\n"
        "    except RuntimeError as e:\n"
        "        assert 'ZeroDivisionError' in str(e), e\n"
        "    else:\n"
        "        raise SystemExit('no error')\n"
        "print('raised as eager')\n")
    script = tmp_path / "remainder_by_false.py"
    script.write_text(code)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "raised as eager" in out.stdout, (out.returncode, out.stderr[-800:])
