"""Bias decomposition: the bias add leaves linear / conv and fuses with what follows. Automatic
where the only consumer is fusible (folded back where no group took it, or under autocast);
PYTORCH_NVFUSER_ENABLE=linear_decomposition,conv_decomposition splits every bias; results equal eager's."""
from typing import Optional

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import graphfuser
from graphfuser.config import config
from tests.helpers import check, fusion_groups


class LinearGelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 32)

    def forward(self, x):
        return F.gelu(self.fc(x)) * 2.0


class ConvRelu(nn.Module):
    def __init__(self, conv):
        super().__init__()
        self.conv = conv

    def forward(self, x):
        return torch.relu(self.conv(x) + 1.0)


@pytest.fixture(autouse=True)
def _inference():
    with torch.no_grad():
        yield


def _group_kinds(sf):
    return [m.kind for n in sf._optimized.all_nodes() if n.kind.endswith("FusionGroup")
            for m in n.subgraph.block.nodes]


def _conv_biases(sf):
    """The bias argument kind of every conv / linear left in the optimized graph."""
    g = sf._optimized
    return [n.inputs[2].type.name if n.inputs[2].node is None or n.inputs[2].node.kind != "prim::Constant"
            else "None" for n in g.all_nodes() if n.kind in ("aten::linear", "aten::conv1d", "aten::conv2d", "aten::conv3d")]


def test_automatic_split_fuses_the_bias_with_gelu():
    sf = check(LinearGelu().eval(), torch.randn(4, 16))
    assert "aten::add" in _group_kinds(sf) and _conv_biases(sf) == ["None"]


def test_automatic_split_off_keeps_the_bias():
    with config.override(disable=["bias_decomposition"]):
        sf = check(LinearGelu().eval(), torch.randn(4, 16))
    assert "aten::add" not in _group_kinds(sf) and _conv_biases(sf) != ["None"]


class VggBlock(nn.Module):
    """vgg / alexnet: conv(bias) -> relu(inplace) -> maxpool, linear -> relu(inplace) -> dropout -> linear."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(nn.Linear(8 * 3 * 3, 16), nn.ReLU(inplace=True), nn.Dropout(), nn.Linear(16, 5))

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


def test_vgg_bias_relu_fuses_and_the_last_linear_keeps_its_bias():
    m = VggBlock().eval()
    sf = check(m, torch.randn(2, 3, 6, 6), min_groups=2)
    kinds = _group_kinds(sf)
    assert kinds.count("aten::add") == 2 and kinds.count("aten::relu") == 2
    # conv and first linear lost their bias to a group; the last linear (no consumer) kept it
    assert _conv_biases(sf)[-1] != "None" and _conv_biases(sf)[:2] == ["None", "None"]
    check(m, torch.randn(3, 3, 7, 6), min_groups=2)


def test_unfused_split_bias_is_folded_back():
    m = VggBlock().eval()
    with config.override(fuse_cpu=False):
        sf = check(m, torch.randn(2, 3, 6, 6), fused=False)
    assert "aten::add" not in str(sf._optimized) and "None" not in _conv_biases(sf)


def _under_autocast(m, x, calls=3, **tol):
    """``graphfuser.script(m)`` called under CPU bf16 autocast, each call against eager's (dtype
    and values); returns the specialization for that autocast state."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = m(x)
        sf = graphfuser.script(m)
        for _ in range(calls):
            got = sf(x)
            assert got.dtype == want.dtype
            torch.testing.assert_close(got, want, **tol)
        return sf._specialized()


def test_autocast_folds_the_bias_back():
    inner = _under_autocast(VggBlock().eval(), torch.randn(2, 3, 6, 6))
    assert "None" not in _conv_biases(inner)


def test_bias_set_to_none_later_is_never_wrong():
    """The split treats a module's Optional bias as fixed; set to None after profiling, the call
    runs the unoptimized graph and profiles again (graphfuser reads the live module, as eager)."""
    m = VggBlock().eval()
    x = torch.randn(2, 3, 6, 6)
    sf = check(m, x, min_groups=2)
    m.features[0].bias = None
    for _ in range(4):
        torch.testing.assert_close(sf(x), m(x))
    assert sf._optimized is not None and fusion_groups(sf._optimized)
    assert _conv_biases(sf)[0] == "Tensor?"


def test_linear_decomposition_fuses_bias_with_gelu():
    m = LinearGelu().eval()
    with config.override(enable=["linear_decomposition"]):
        sf = check(m, torch.randn(4, 16))
        sf3 = check(m, torch.randn(2, 3, 16))
    assert "aten::add" in _group_kinds(sf) and "aten::gelu" in _group_kinds(sf)
    assert "aten::add" in _group_kinds(sf3)


@pytest.mark.parametrize("conv,shape", [(nn.Conv1d(3, 8, 3), (2, 3, 9)), (nn.Conv2d(3, 8, 3, padding=1), (2, 3, 7, 5)),
                                         (nn.Conv3d(2, 4, 1), (1, 2, 3, 4, 5))])
def test_conv_decomposition(conv, shape):
    m = ConvRelu(conv).eval()
    with config.override(enable=["conv_decomposition"]):
        sf = check(m, torch.randn(*shape))
    assert _group_kinds(sf).count("aten::add") == 2 and _conv_biases(sf) == ["None"]


def test_conv_without_bias_is_left_alone():
    m = ConvRelu(nn.Conv2d(3, 8, 3, bias=False)).eval()
    with config.override(enable=["conv_decomposition"]):
        sf = check(m, torch.randn(2, 3, 6, 6))
    assert "aten::conv2d" in str(sf._optimized)


class SqueezeExcite(nn.Module):
    def __init__(self, c=16):
        super().__init__()
        self.fc1 = nn.Conv2d(c, 4, 1)
        self.fc2 = nn.Conv2d(4, c, 1)

    def forward(self, x):
        s = F.adaptive_avg_pool2d(x, 1)
        s = F.hardsigmoid(self.fc2(F.relu(self.fc1(s))))
        return x * s


class Head(nn.Module):
    def forward(self, x):
        return torch.flatten(F.adaptive_avg_pool2d(torch.relu(x * 2.0), 1), 1)


class PoolModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d((1, 1))

    def forward(self, x):
        return torch.flatten(self.pool(torch.relu(x * 2.0)), 1)


@pytest.mark.parametrize("cl", [False, True])
def test_global_pool_is_a_fused_mean(cl):
    x = torch.randn(2, 16, 7, 5)
    if cl:
        x = x.contiguous(memory_format=torch.channels_last)
    sf = check(Head().eval(), x)
    assert "aten::mean" in _group_kinds(sf) and "adaptive_avg_pool2d" not in str(sf._optimized)
    check(SqueezeExcite().eval(), x)
    sf = check(PoolModule().eval(), x, fused=None)
    assert "adaptive_avg_pool2d" not in str(sf._optimized)


def test_pools_to_other_sizes_are_kept():
    def f(x):
        return F.adaptive_avg_pool2d(x * 2.0, [2, 2]) + F.adaptive_avg_pool1d(x.flatten(2), 1).unsqueeze(-1)

    sf = check(f, torch.randn(2, 3, 6, 6), fused=None)
    assert "adaptive_avg_pool2d" in str(sf._optimized)


def _gn1(x, w, b):
    return F.group_norm(x.sin(), 1, w, b, 1e-5).relu()


def _gn2(x, w, b):
    return F.group_norm(x.sin(), 2, w, b, 1e-5).relu()


def _gn3(x, w, b):
    return F.group_norm(x.sin(), 3, w, b, 1e-5).relu()


def _gn1_nb(x, w):
    return F.group_norm(x.sin(), 1, w, None, 1e-5).relu()


def _gn2_nb(x, w):
    return F.group_norm(x.sin(), 2, w, None, 1e-5).relu()


def _gn3_nb(x, w):
    return F.group_norm(x.sin(), 3, w, None, 1e-5).relu()


def _gn2_optional(x, w: Optional[torch.Tensor], b: Optional[torch.Tensor]):
    return F.group_norm(x.sin(), 2, w, b, 1e-5)


def _outcome(f, *args):
    try:
        return "ok", f(*args)
    except Exception as e:  # noqa: BLE001 - compared with eager's
        return "error", str(e).splitlines()[0]


def _same_outcomes(fn, sf, args, calls=4):
    """Over ``calls`` calls, graphfuser raises eager's error or returns eager's values."""
    for _ in range(calls):
        e, g_ = _outcome(fn, *args), _outcome(sf, *args)
        assert e[0] == g_[0], (e, g_)
        if e[0] == "error":
            assert e[1] == g_[1]
        else:
            torch.testing.assert_close(g_[1], e[1], equal_nan=True, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("groups", [1, 2, 3])
@pytest.mark.parametrize("xshape,xdt,wshape,wdt,bshape,bdt", [
    ((4, 6, 5), torch.float64, (6,), torch.float32, None, None),          # mixed dtypes (CPU rule)
    ((4, 6, 5), torch.float32, (6,), torch.float64, (6,), torch.float64),
    ((4, 6, 5), torch.bfloat16, (6,), torch.float32, (6,), torch.bfloat16),  # one float32, one not
    ((4, 6, 5), torch.float16, (6,), torch.bfloat16, None, None),
    ((4, 6, 5), torch.float32, (3,), torch.float32, None, None),          # weight of G, not C, elements
    ((4, 6, 5), torch.float32, (6,), torch.float32, (2,), torch.float32),
    ((4, 6, 5), torch.float32, (2, 3), torch.float32, None, None),        # a 2-D weight of C elements
    ((1, 0), torch.float32, (2,), torch.float32, None, None),             # empty input, weight of 2
    ((4, 6), torch.float32, (6,), torch.float32, None, None),             # valid
    ((4, 6, 2, 3), torch.bfloat16, (6,), torch.float32, (6,), torch.float32),  # valid mixed precision
])
def test_group_norm_keeps_eagers_errors(groups, xshape, xdt, wshape, wdt, bshape, bdt):
    # num_groups > 1 is decomposed before profiling into an instance norm of a grouped view, which
    # checks nothing: a check node raises eager's error (C % G, weight / bias of C elements, dtypes)
    fn = [[_gn1_nb, _gn2_nb, _gn3_nb], [_gn1, _gn2, _gn3]][bshape is not None][groups - 1]
    sf = graphfuser.script(fn)
    gen = torch.Generator().manual_seed(0)
    args = [torch.randn(xshape, generator=gen).to(xdt), torch.randn(wshape, generator=gen).to(wdt)]
    if bshape:
        args.append(torch.randn(bshape, generator=gen).to(bdt))
    _same_outcomes(fn, sf, args)


def test_group_norm_check_runs_on_the_host_and_keeps_fusion():
    x, w = torch.randn(4, 6, 5), torch.randn(6)
    sf = graphfuser.script(_gn3_nb)
    for _ in range(3):
        sf(x, w)
    text = str(sf.graph_for(x, w))
    assert "graphfuser::group_norm_check" in text and "FusionGroup" in text


@pytest.mark.parametrize("with_w,with_b", [(True, True), (False, True), (True, False), (False, False)])
def test_group_norm_with_optional_weight_and_bias_uses_them(with_w, with_b):
    # an Optional[Tensor] weight / bias is known only at run time: not decomposed (was: dropped)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(4, 6, 2, 3, generator=gen)
    w = torch.randn(6, generator=gen) if with_w else None
    b = torch.randn(6, generator=gen) if with_b else None
    check(_gn2_optional, x, w, b, fused=None)


@pytest.mark.cuda
@pytest.mark.parametrize("groups", [2, 3])
@pytest.mark.parametrize("xdt,wdt,wshape", [(torch.float32, torch.float64, (6,)), (torch.float16, torch.bfloat16, (6,)),
                                           (torch.float32, torch.float32, (3,)), (torch.bfloat16, torch.float32, (6,))])
def test_group_norm_keeps_eagers_errors_on_cuda(groups, xdt, wdt, wshape):
    fn = [_gn2_nb, _gn3_nb][groups - 2]
    sf = graphfuser.script(fn)
    x, w = torch.randn(4, 6, 5, device="cuda").to(xdt), torch.randn(wshape, device="cuda").to(wdt)
    for _ in range(4):
        e, g_ = _outcome(fn, x, w), _outcome(sf, x, w)
        assert e[0] == g_[0], (e, g_)
        if e[0] == "ok":
            torch.testing.assert_close(g_[1], e[1], atol=2e-2, rtol=2e-2)


@pytest.mark.cuda
@pytest.mark.parametrize("groups", [1, 2, 3])
@pytest.mark.parametrize("xshape", [(4, 6, 5), (4, 6), (4, 6, 2, 3), (2, 6, 1, 1)])
@pytest.mark.parametrize("xdt,wdt,bdt", [(torch.bfloat16, torch.float32, torch.float32),
                                         (torch.float16, torch.float32, None),
                                         (torch.bfloat16, torch.bfloat16, torch.float32),
                                         (torch.float32, torch.float32, torch.float64),
                                         (torch.float16, torch.float16, torch.float16)])
def test_group_norm_mixed_dtypes_on_cuda_as_eager(groups, xshape, xdt, wdt, bdt):
    # eager CUDA reads weight and bias as the input's dtype where the spatial size is above 1
    # (a bfloat16 input with float32 parameters raises), and takes them where it is 1
    fn = [[_gn1_nb, _gn2_nb, _gn3_nb], [_gn1, _gn2, _gn3]][bdt is not None][groups - 1]
    sf = graphfuser.script(fn)
    gen = torch.Generator().manual_seed(2)
    args = [torch.randn(xshape, generator=gen).to(xdt).cuda(), torch.randn(6, generator=gen).to(wdt).cuda()]
    if bdt is not None:
        args.append(torch.randn(6, generator=gen).to(bdt).cuda())
    _same_outcomes(fn, sf, args)


class ConvPermuteNorm(nn.Module):
    """ConvNeXt's block head: depthwise conv (bias) -> permute to channels last -> layer norm."""

    def __init__(self, c=16):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = nn.LayerNorm(c, eps=1e-6)

    def forward(self, x):
        return self.norm(self.conv(x).permute(0, 2, 3, 1)) * 2.0


class ConvPermuteMid(nn.Module):
    """The channel dim third after the permute: the bias goes as [C, 1]."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(16, 16, 3, padding=1)

    def forward(self, x):
        return F.layer_norm(self.conv(x).permute(0, 2, 1, 3), [x.shape[-1]]) + 1.0


class Conv1dPermuteGelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(8, 12, 3, padding=1)

    def forward(self, x):
        return F.gelu(self.conv(x).permute(0, 2, 1))


def _group_with(sf, *kinds):
    return [n for n in sf._optimized.all_nodes() if n.kind.endswith("FusionGroup")
            and all(k in [m.kind for m in n.subgraph.block.nodes] for k in kinds)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_conv_bias_split_past_a_permute_joins_the_layer_norm(dtype):
    m = ConvPermuteNorm().eval().to(dtype)
    for shape in ((2, 16, 9, 11), (3, 16, 5, 5)):
        sf = check(m, torch.randn(shape, dtype=dtype))
        assert _conv_biases(sf) == ["None"] and _group_with(sf, "aten::add", "aten::layer_norm")
    x = torch.randn(2, 16, 9, 11, dtype=dtype).contiguous(memory_format=torch.channels_last)
    check(m, x)
    # the channel dim elsewhere after the permute: the bias is unsqueezed for its place
    sf = check(ConvPermuteMid().eval().to(dtype), torch.randn(2, 16, 4, 12, dtype=dtype))
    assert _conv_biases(sf) == ["None"] and _group_with(sf, "aten::add", "aten::layer_norm")



class Permute(nn.Module):
    """torchvision's ``Permute``: the dims are a module attribute, a run-time list in the
    scripted graph (torchvision's ConvNeXt blocks: conv, ``Permute([0, 2, 3, 1])``, layer norm)."""

    def __init__(self, dims):
        super().__init__()
        self.dims = dims

    def forward(self, x):
        return torch.permute(x, self.dims)


class TorchvisionBlockHead(nn.Module):
    def __init__(self, dims=(0, 2, 3, 1), c=16):
        super().__init__()
        self.block = nn.Sequential(nn.Conv2d(c, c, 7, padding=3, groups=c), Permute(list(dims)),
                                   nn.LayerNorm(c, eps=1e-6))

    def forward(self, x):
        return self.block(x) * 2.0


@pytest.mark.parametrize("dims", [(0, 2, 3, 1), (0, 2, 1, 3)])
def test_conv_bias_split_past_a_permute_by_module_dims(dims):
    """The bias is viewed [1, C, 1, 1] and permuted by the same run-time dims, then added in the
    layer norm's group; the conv keeps no bias."""
    m = TorchvisionBlockHead(dims).eval()
    x = torch.randn(2, 16, 9, 16)
    sf = check(m, x)
    assert _conv_biases(sf) == ["None"] and _group_with(sf, "aten::add", "aten::layer_norm"), str(sf._optimized)
    assert any(n.kind == "aten::permute" and n.inputs[1].node is not None and n.inputs[1].node.kind == "prim::GetAttr"
               and n.inputs[0].node is not None and n.inputs[0].node.kind == "aten::view"
               for n in sf._optimized.all_nodes())

def test_conv1d_bias_split_past_a_permute():
    sf = check(Conv1dPermuteGelu().eval(), torch.randn(3, 8, 10))
    assert _conv_biases(sf) == ["None"] and _group_with(sf, "aten::add", "aten::gelu")


class ConvPermuteTwice(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        y = self.conv(x).permute(0, 2, 3, 1)
        return torch.relu(y), y.sum()


def test_permute_with_two_consumers_keeps_the_bias():
    sf = check(ConvPermuteTwice().eval(), torch.randn(2, 4, 5, 5), fused=None)
    assert _conv_biases(sf) != ["None"]


def test_conv_bias_split_past_a_permute_through_torch_compile():
    m = ConvPermuteNorm().eval()
    x = torch.randn(2, 16, 9, 11)
    c = torch.compile(m, backend=graphfuser.graphfuser_backend)
    for _ in range(4):
        got = c(x)
    torch.testing.assert_close(got, m(x))
    g = graphfuser.last_executed_optimized_graph()
    convs = [n for n in g.all_nodes() if n.kind == "aten::conv2d"]
    assert convs and all(n.inputs[2].type.name == "NoneType" for n in convs), str(g)


def test_autocast_conv_bias_is_cast_and_split(monkeypatch):
    """A half conv under autocast (CUDA's case, run here on the CPU): the split add reads the
    bias cast to the conv's dtype, as the conv would have cast it; the result keeps eager's dtype."""
    from graphfuser.passes import bias as bias_pass

    monkeypatch.setattr(bias_pass, "HALF_CONV_DEVICES", ("cuda", "cpu"))
    inner = _under_autocast(ConvPermuteNorm().eval(), torch.randn(2, 16, 9, 11), calls=4, rtol=3e-2, atol=3e-2)
    g = str(inner._optimized)
    assert _conv_biases(inner) == ["None"] and "aten::to" in g, g


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_conv_bias_is_cast_and_split_on_cuda(dtype):
    m = ConvPermuteNorm(96).eval().cuda()
    x = torch.randn(4, 96, 14, 14, device="cuda")
    with torch.autocast("cuda", dtype=dtype):
        want = m(x)
        for f in (graphfuser.script(m), torch.compile(m, backend=graphfuser.graphfuser_backend)):
            for _ in range(4):
                got = f(x)
            assert got.dtype == want.dtype
            torch.testing.assert_close(got.float(), want.float(), rtol=3e-2, atol=3e-2)
        inner = graphfuser.script(m)
        for _ in range(4):
            inner(x)
        inner = inner._specialized()
    assert _conv_biases(inner) == ["None"] and _group_with(inner, "aten::add", "aten::layer_norm")


def test_unfused_bias_split_past_a_permute_is_folded_back():
    with config.override(fuse_cpu=False):
        sf = check(ConvPermuteNorm().eval(), torch.randn(2, 16, 6, 6), fused=False)
    assert "aten::add" not in str(sf._optimized) and _conv_biases(sf) != ["None"]


def test_conv_bias_split_past_a_permute_under_grad():
    """Training: the split bias's gradient (the add's, summed over batch and space) and every
    other gradient as eager's. (float64: the conv's gradients cancel a layer norm's large
    upstream gradient, so float32 runs differ by 1e-4 of 7e-3 with or without the split.)"""
    import copy

    torch.manual_seed(0)
    m = ConvPermuteNorm().double()
    ref = copy.deepcopy(m)
    x = torch.randn(2, 16, 7, 9, dtype=torch.float64)
    with torch.enable_grad():
        sf = graphfuser.script(m)
        for _ in range(4):
            m.zero_grad()
            xg = x.clone().requires_grad_()
            sf(xg).square().sum().backward()
        xr = x.clone().requires_grad_()
        ref(xr).square().sum().backward()
    torch.testing.assert_close(xg.grad, xr.grad, rtol=1e-9, atol=1e-11)
    for (name, p), q in zip(m.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-9, atol=1e-11, msg=lambda s: f"{name}: {s}")
    assert _conv_biases(sf) == ["None"]


def test_the_linear_bias_knob_takes_its_values():
    from graphfuser.config import ConfigError
    from graphfuser.passes import bias as bias_pass

    for value, expected in ((True, True), (False, False)):
        with config.override(cuda={"linear_bias_split": value}):
            assert bias_pass.gemm_without_bias_is_faster(None) is expected
    with pytest.raises(ConfigError, match="linear_bias_split must be auto, true or false"):
        config.set(cuda={"linear_bias_split": "sometimes"})
    assert config.cuda["linear_bias_split"] == "auto"


@pytest.mark.cuda
@pytest.mark.parametrize("split", [True, False, "auto"])
def test_cuda_inference_linear_bias_splits_where_its_gemm_is_faster(split):
    """A CUDA inference linear's bias joins its GELU's group where the GEMM without it is
    faster (``auto``: measured on the profiled sizes) or the knob says so; results as eager's
    either way."""
    from graphfuser.passes import bias as bias_pass

    m = LinearGelu().cuda().eval()
    x = torch.randn(64, 7, 16, device="cuda")
    bias_pass._GEMM_CHOICE.clear()
    with config.override(cuda={"linear_bias_split": split}), torch.no_grad():
        sf = graphfuser.script(m)
        for _ in range(4):
            torch.testing.assert_close(sf(x), m(x), rtol=1e-5, atol=1e-5)
    kinds = [n.kind for g in fusion_groups(sf._optimized) for n in g.subgraph.all_nodes()]
    expect = bias_pass._GEMM_CHOICE[next(iter(bias_pass._GEMM_CHOICE))] if split == "auto" else split
    if split == "auto":
        assert len(bias_pass._GEMM_CHOICE) == 1
    assert "aten::gelu" in kinds and ("aten::add" in kinds) is expect


class LinearPermute(nn.Module):
    """timm's ConvNeXt MLP tail: a linear's result permuted back to channels first, then scaled.
    Its channel dim is the linear's last, not a conv's dim 1."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 6)

    def forward(self, x):
        return self.fc(x).permute(0, 3, 1, 2) * 2.0


@pytest.mark.parametrize("front", ["script", "compile"])
@pytest.mark.parametrize("grad", [False, True])
def test_linear_bias_split_past_a_permute_lands_on_the_channel_dim(front, grad):
    # the height equals the channels (6): a bias unsqueezed for a conv's channel place broadcast
    # along the height instead, a wrong value with no error
    torch.manual_seed(0)
    m = LinearPermute()
    x = torch.randn(2, 6, 6, 16)
    f = graphfuser.script(m) if front == "script" else torch.compile(m, backend=graphfuser.graphfuser_backend)
    with torch.set_grad_enabled(grad):
        for _ in range(4):
            torch.testing.assert_close(f(x), m(x), rtol=1e-5, atol=1e-5)
    if not grad:
        g = graphfuser.last_executed_optimized_graph()
        assert any(n.kind == "aten::linear" and n.inputs[2].type.name == "NoneType" for n in g.all_nodes()), str(g)
