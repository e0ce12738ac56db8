"""relu6 / hardswish / hardsigmoid / mish / masked_fill rows: fused results equal eager's, NaN
and inf included, over dtypes, layouts and broadcast masks, on every backend."""
import pytest
import torch
import torch.nn.functional as F

from tests.helpers import DEVICES, check, make_input

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def _special(x: torch.Tensor) -> torch.Tensor:
    x = x.clone()
    flat = x.view(-1) if x.is_contiguous() else None
    if flat is not None and flat.numel() >= 6:
        flat[:6] = torch.tensor([float("nan"), float("inf"), -float("inf"), -3.0, 3.0, 30.0], dtype=x.dtype)
    return x


def acts(x):
    return F.hardswish(x * 2.0) + F.hardsigmoid(x) + F.relu6(x * 4.0) + F.mish(x)


def relu6_int(x):
    return F.relu6(x * 2)


def se_gate(x, s):
    return x * F.hardsigmoid(s)


def mask_softmax(x, m):
    return x.masked_fill(m, float("-inf")).softmax(-1)


def mask_chain(x, m):
    return (x * 2).masked_fill(m, 0.5) + 1


def mask_tensor_value(x, m, v):
    return (x + 1).masked_fill(m, v) * 2


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("layout", ["dense", "transposed", "sliced"])
def test_activations(device, dtype, layout):
    x = make_input(17, 33, dtype=dtype, layout=layout, device=device)
    if layout == "dense":
        x = _special(x)
    check(acts, x)


@pytest.mark.parametrize("device", DEVICES)
def test_relu6_integers(device):
    check(relu6_int, torch.arange(-20, 20, device=device).reshape(4, 10))


@pytest.mark.parametrize("device", DEVICES)
def test_squeeze_excite_gate_broadcast(device):
    x = make_input(2, 16, 7, 7, device=device)
    s = make_input(2, 16, 1, 1, device=device)
    check(se_gate, x, s)
    check(se_gate, x.contiguous(memory_format=torch.channels_last), s)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_masked_fill(device, dtype):
    x = make_input(8, 13, dtype=dtype, device=device)
    m = torch.rand(8, 13, device=device) > 0.5
    check(mask_chain, x, m[0], fused=None if dtype == torch.bool else True)
    v = torch.tensor(-2.5, device=device)
    check(mask_tensor_value, x, m, v, fused=None if dtype == torch.bool else True)


@pytest.mark.parametrize("device", DEVICES)
def test_masked_fill_attention_mask(device):
    x = make_input(2, 4, 9, 9, device=device)
    causal = torch.ones(9, 9, device=device, dtype=torch.bool).triu(1)
    check(mask_softmax, x, causal)


def test_masked_fill_value_with_dims_raises_like_eager():
    import graphfuser

    sf = graphfuser.script(mask_tensor_value)
    x, m = torch.randn(3, 4), torch.rand(3, 4) > 0.5
    for _ in range(3):
        sf(x, m, torch.tensor(1.0))
    with pytest.raises(RuntimeError, match="0-dimensional value tensor"):
        sf(x, m, torch.tensor([1.0]))
