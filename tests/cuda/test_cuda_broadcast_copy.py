"""On the GPU, grouped-query attention's repeated key / value heads as one fused copy
(graphfuser/passes/broadcast_copy.py): the vector variant runs where the head dim is a whole
number of 16-byte vectors and the repeated tensor's rows start aligned, the scalar one
elsewhere; values, strides and gradients are eager's."""
import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.config import config

from test_cuda_outer_split import launched

pytestmark = pytest.mark.cuda


def repeat_kv(x, n: int):
    b, h, s, d = x.shape
    return x[:, :, None, :, :].expand(b, h, n, s, d).reshape(b, h * n, s, d)


def repeat_only(k):
    return repeat_kv(k, 4)


def gqa_attention(q, k, v):
    return F.scaled_dot_product_attention(q, repeat_kv(k, 4), repeat_kv(v, 4), is_causal=True)


def _kv(dtype, layout, d=64, s=512):
    x = torch.randn(8, s, 4, d, device="cuda").to(dtype)
    x.view(-1)[::97] = float("nan")
    x = x.transpose(1, 2)
    return x if layout == "transposed" else x.contiguous()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("layout", ["dense", "transposed"])
@pytest.mark.parametrize("d", [64, 128, 60])
def test_repeated_heads(dtype, layout, d, capsys):
    k = _kv(dtype, layout, d)
    want = repeat_only(k)
    with config.override(disable=["fallback"], dump=["launch_param"]):
        sf = graphfuser.script(repeat_only)
        for _ in range(3):
            got = sf(k)
    names = launched(capsys.readouterr().out)
    assert got.stride() == want.stride()
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    assert names, "no fused copy ran"
    # dense, the head dim merges with the sequence into one contiguous run (512 * d elements)
    vectors = layout == "dense" or (d * dtype.itemsize) % 16 == 0
    assert any("_v_" in n for n in names) is vectors, names


def test_attention_gradients(capsys):
    q = torch.randn(8, 16, 512, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = _kv(torch.bfloat16, "transposed").nan_to_num().detach().requires_grad_()
    v = _kv(torch.bfloat16, "dense").nan_to_num().detach().requires_grad_()
    sf = graphfuser.script(gqa_attention)
    for _ in range(3):
        out = sf(q, k, v)
        grads = torch.autograd.grad(out.float().square().sum(), (q, k, v))
    want = gqa_attention(q, k, v)
    wgrads = torch.autograd.grad(want.float().square().sum(), (q, k, v))
    torch.testing.assert_close(out, want)
    for g, w in zip(grads, wgrads):
        torch.testing.assert_close(g, w, rtol=2e-2, atol=2e-2)
