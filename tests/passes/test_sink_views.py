"""sink_views: a permute / transpose / unsqueeze between pointwise ops no longer splits the group;
values, dtypes, shapes and strides equal eager's over layouts, broadcasting and new sizes."""
import pytest
import torch

import graphfuser
from graphfuser.frontend.dynamo import graphfuser_backend
from tests.helpers import DEVICES, check, fusion_groups, make_input


def layer_scale_residual(x, gamma, o):
    return x + (gamma * o).permute(0, 3, 1, 2)


def transpose_chain(a, b):
    return torch.relu((a * 2.0 + b).transpose(0, 1)) - 1.0


def unsqueeze_chain(a, s):
    return (a.sigmoid() * s).unsqueeze(1) * 3.0


def through_cast(a):
    return (a.float() * 2.0).permute(1, 0) + 1.0


def zero_dim_operand(a, t):
    return (a * t).transpose(-1, -2) + 1


def two_uses(a):
    p = a * 2.0
    return p.permute(1, 0) + 1.0, p


def _groups_hold(sf, *kinds):
    groups = fusion_groups(sf._optimized)
    inside = [[n.kind for n in g.subgraph.block.nodes] for g in groups]
    assert any(all(k in ks for k in kinds) for ks in inside), str(sf._optimized)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cl", [False, True])
def test_layer_scale_before_residual(device, cl):
    x = make_input(2, 8, 5, 3, device=device)
    o = make_input(2, 5, 3, 8, device=device)
    if cl:
        x = x.contiguous(memory_format=torch.channels_last)
    sf = check(layer_scale_residual, x, make_input(8, device=device), o)
    _groups_hold(sf, "aten::mul", "aten::add")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64])
@pytest.mark.parametrize("layout", ["dense", "transposed", "sliced"])
def test_transpose_between_pointwise(device, dtype, layout):
    a = make_input(6, 7, dtype=dtype, layout=layout, device=device)
    b = make_input(7, dtype=dtype, device=device)
    sf = check(transpose_chain, a, b)
    _groups_hold(sf, "aten::mul", "aten::relu", "aten::sub")


@pytest.mark.parametrize("device", DEVICES)
def test_unsqueeze_and_cast(device):
    sf = check(unsqueeze_chain, make_input(4, 9, device=device), make_input(9, device=device))
    _groups_hold(sf, "aten::sigmoid", "aten::mul")
    sf = check(through_cast, make_input(5, 3, dtype=torch.float16, device=device))
    _groups_hold(sf, "aten::to", "aten::mul", "aten::add")


@pytest.mark.parametrize("device", DEVICES)
def test_zero_dim_operand_keeps_promotion(device):
    a = make_input(3, 4, dtype=torch.float16, device=device)
    check(zero_dim_operand, a, torch.tensor(2.5, dtype=torch.float64, device=device))


def test_shared_result_is_not_recomputed():
    sf = check(two_uses, make_input(4, 6), fused=None)
    assert "aten::permute" in str(sf._optimized)


def test_new_sizes_after_profiling():
    sf = graphfuser.script(layer_scale_residual)
    for n, h in ((2, 5), (2, 5), (3, 4), (1, 7), (3, 4)):
        x, gamma, o = torch.randn(n, 8, h, 3), torch.randn(8), torch.randn(n, h, 3, 8)
        out = sf(x, gamma, o)
        ref = layer_scale_residual(x, gamma, o)
        torch.testing.assert_close(out, ref)
        assert out.stride() == ref.stride()


def cast_viewed_into_log_softmax(x):
    # a language model's loss: logits made float32, viewed as rows, log-softmax over the vocabulary
    return torch.log_softmax(x.float().view(-1, x.shape[-1]), -1)


@pytest.mark.parametrize("device", DEVICES)
def test_view_of_a_cast_moves_above_it_into_the_consumer_group(device):
    sf = check(cast_viewed_into_log_softmax, make_input(3, 5, 7, dtype=torch.bfloat16, device=device))
    _groups_hold(sf, "aten::to", "aten::log_softmax")
    for shape in ((2, 4, 7), (1, 3, 11)):               # new sizes reuse the program
        x = make_input(*shape, dtype=torch.bfloat16, device=device)
        out, ref = sf(x), cast_viewed_into_log_softmax(x)
        torch.testing.assert_close(out, ref)
        assert out.stride() == ref.stride()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("entry", ["script", "compile"])
def test_view_of_a_cast_of_padded_logits_moves_above_it(device, entry):
    """A padded language model head (passes/gemm_pad.py) hands the loss logits whose rows are
    longer than the vocabulary: ``.float()`` of them is dense, ``x`` itself is not. The view
    still moves onto ``x`` (it can view it), and the cast joins the log-softmax's group."""
    base = make_input(2, 5, 16, dtype=torch.bfloat16, device=device)
    x = base[..., :11]
    if entry == "script":
        sf = check(cast_viewed_into_log_softmax, x)
        _groups_hold(sf, "aten::to", "aten::log_softmax")
        run = sf
    else:
        torch._dynamo.reset()
        run = torch.compile(cast_viewed_into_log_softmax, backend=graphfuser_backend, dynamic=False)
        for _ in range(4):
            torch.testing.assert_close(run(x), cast_viewed_into_log_softmax(x))
        g = graphfuser.last_executed_optimized_graph()
        inside = [[n.kind for n in grp.subgraph.block.nodes] for grp in fusion_groups(g)]
        assert any("aten::to" in ks for ks in inside), str(g)
    dense = base[..., :11].contiguous()
    torch.testing.assert_close(run(dense), cast_viewed_into_log_softmax(dense))
    flipped = make_input(2, 5, 11, dtype=torch.bfloat16, device=device).transpose(0, 1)
    for fn in (cast_viewed_into_log_softmax, run):      # the cast keeps the transposed strides
        with pytest.raises(RuntimeError, match="view size is not compatible|Cannot view"):
            fn(flipped)


def scaled_then_flattened(x, s: float):
    return (x * s).view(-1).exp()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("entry", ["script", "compile"])
def test_a_moved_view_raises_where_eagers_view_raises(device, entry):
    """``(x * s).view(-1)`` becomes ``reshape(x, -1) * s``: for a transposed ``x`` eager's view
    of the product (transposed too) raises, where a reshape of ``x`` copies (fuzz graph 820 of
    CPU seed 34745, a layout flip after profiling). The moved view raises eager's error; where
    the product is dense, as for a padded ``x``, it views as eager's does."""
    x = make_input(4, 6, device=device)
    if entry == "script":
        run = check(scaled_then_flattened, x, 0.5)
        _groups_hold(run, "aten::mul", "aten::exp")
    else:
        torch._dynamo.reset()
        run = torch.compile(scaled_then_flattened, backend=graphfuser_backend, dynamic=False)
        for _ in range(4):
            torch.testing.assert_close(run(x, 0.5), scaled_then_flattened(x, 0.5))
    flipped = make_input(6, 4, device=device).t()
    with pytest.raises(RuntimeError, match="view size is not compatible|Cannot view"):
        scaled_then_flattened(flipped, 0.5)
    with pytest.raises(RuntimeError, match="view size is not compatible|Cannot view"):
        run(flipped, 0.5)
    padded = make_input(4, 8, device=device)[:, :6]
    torch.testing.assert_close(run(padded, 0.5), scaled_then_flattened(padded, 0.5))


def _lgamma_then_write(x):
    v0 = torch.lgamma(x)
    x.contiguous().mul_(2)          # writes x itself (contiguous returns it)
    v2 = v0.reshape(-1)
    return torch.log1p(v2) * 2.0


@pytest.mark.parametrize("device", DEVICES)
def test_reshape_does_not_move_a_producer_past_a_write(device):
    """``reshape(f(x))`` becomes ``f(reshape(x))`` made where the reshape was: an in-place write
    to ``x`` in between would then be read (lgamma of the doubled x: fuzz graph 1679 of CPU
    seed 34311). Such a producer stays where it is."""
    sf = graphfuser.script(_lgamma_then_write)
    for _ in range(4):
        a = torch.full((3,), 7.0, device=device)
        b = a.clone()
        torch.testing.assert_close(sf(a), _lgamma_then_write(b))
        torch.testing.assert_close(a, b)


def layer_norm_2d_then_cast(x, w, b):
    # timm's LayerNorm2d (permute, layer norm, permute back) before a half-precision consumer
    y = torch.nn.functional.layer_norm(x.permute(0, 2, 3, 1), [x.shape[1]], w, b, 1e-6).permute(0, 3, 1, 2)
    return y.to(torch.bfloat16) * 2


def softmax_transposed_then_cast(x):
    return torch.softmax(x, -1).transpose(0, 1).to(torch.float64).unsqueeze(0)


def softmax_viewed_twice(x):
    y = torch.softmax(x, -1).transpose(0, 1)
    return y.to(torch.float64), y


def same_dtype_cast(x):
    return torch.softmax(x, -1).transpose(0, 1).to(torch.float32) + 1


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["dense", "channels_last"])
def test_cast_of_a_view_of_a_layer_norm_moves_above_the_view(device, layout):
    """``cast(view(y))`` of a normalization's ``y`` becomes ``view(cast(y))``: the cast joins
    the layer norm's group (it ran as a copy of its own after ConvNeXt's downsampling norms)."""
    x = torch.randn(2, 8, 5, 6, device=device)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    w, b = torch.randn(8, device=device), torch.randn(8, device=device)
    sf = check(layer_norm_2d_then_cast, x, w, b)
    _groups_hold(sf, "aten::layer_norm", "aten::to")
    out, ref = sf(x, w, b), layer_norm_2d_then_cast(x, w, b)
    assert out.stride() == ref.stride() and out.dtype == ref.dtype


@pytest.mark.parametrize("device", DEVICES)
def test_cast_of_a_transposed_softmax(device):
    sf = check(softmax_transposed_then_cast, make_input(6, 9, device=device))
    _groups_hold(sf, "aten::softmax", "aten::to")
    x = make_input(6, 9, device=device)
    assert sf(x).stride() == softmax_transposed_then_cast(x).stride()


def test_cast_stays_where_the_view_has_other_readers_or_the_dtype_is_kept():
    for fn in (softmax_viewed_twice, same_dtype_cast):
        sf = check(fn, make_input(6, 9), fused=None)
        for n in sf._optimized.all_nodes():
            if n.kind.endswith("FusionGroup"):
                kinds = [m.kind for m in n.subgraph.block.nodes]
                assert not ("aten::softmax" in kinds and "aten::to" in kinds), kinds


def flattened_then_cast(x, y):
    # the rotary rewrite's ending (passes/rotary.py): a float32 group result flattened back to the
    # head width, then cast to bf16 for attention under autocast
    return (x * y + 1.0).flatten(-2, -1).to(torch.bfloat16)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("grad", [False, True])
def test_cast_of_a_flattened_pointwise_result_joins_its_group(device, grad):
    x = make_input(2, 3, 4, 2, 8, device=device).requires_grad_(grad)
    y = make_input(1, 1, 4, 2, 8, device=device)
    sf = check(flattened_then_cast, x, y)
    _groups_hold(sf, "aten::mul", "aten::to")
    out, ref = sf(x, y), flattened_then_cast(x, y)
    assert out.dtype == ref.dtype == torch.bfloat16 and out.stride() == ref.stride()
    if grad:
        g = torch.randn_like(ref)
        (a,) = torch.autograd.grad(out, x, g)
        (b,) = torch.autograd.grad(ref, x, g)
        torch.testing.assert_close(a, b)
