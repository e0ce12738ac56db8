"""On the GPU, row reductions with a tensor strided along the row (T5's position bias, permuted
from its embedding, beside dense attention scores): the dense tensors take vector accesses and
the strided one is gathered (or, an output, scattered) lane by lane (``vectors.py``). Against
eager over dtypes, row lengths that are and are not a multiple of the vector (the persistent,
multi-pass and ragged-tail variants), strided outputs, and rows holding -inf, inf and NaN."""
import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.config import config

from helpers import biased_scores_and_softmax, masked_softmax
from test_cuda_outer_split import launched

pytestmark = pytest.mark.cuda

TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=2e-2, atol=2e-2),
       torch.float16: dict(rtol=5e-3, atol=5e-3)}


def add_and_layer_norm(x, r, w, b):
    return F.layer_norm(r + x, [x.shape[-1]], w, b, 1e-5)


def _bias(B, H, Q, K, dtype):
    """A [B, H, Q, K] view of a [B, Q, K, H] tensor: strides (Q*K*H, 1, K*H, H)."""
    return torch.randn(B, Q, K, H, device="cuda", dtype=dtype).permute(0, 3, 1, 2)


def _run(fn, args, dtype, capsys, disable=()):
    want = fn(*args)
    with config.override(disable=["fallback", *disable], dump=["launch_param"]):
        sf = graphfuser.script(fn)
        for _ in range(3):
            got = sf(*args)
    names = launched(capsys.readouterr().out)
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    for g, w in zip(got, want):
        assert g.stride() == w.stride()
        torch.testing.assert_close(g, w, equal_nan=True, **TOL[dtype])
    return names


@pytest.mark.parametrize("scores_dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("bias_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("K", [512, 4096, 33, 1000, 8])
def test_dense_scores_plus_a_permuted_bias(scores_dtype, bias_dtype, K, capsys):
    B, H, Q = 2, 8, 16
    scores = torch.randn(B, H, Q, K, device="cuda", dtype=scores_dtype)
    bias = _bias(B, H, Q, K, bias_dtype)
    bias[0, :, 3] = float("-inf")           # a fully masked row: NaN, as eager's softmax
    bias[1, 2, 5, 0] = float("-inf")
    scores[1, 3, 7, 1] = float("nan")
    dtype = torch.promote_types(scores_dtype, bias_dtype)
    names = _run(masked_softmax, (scores, bias), dtype, capsys)
    assert names
    if K % (16 // dtype.itemsize) == 0 and K >= 64 and scores_dtype.itemsize > bias_dtype.itemsize:
        # vectors for the dense scores and the output, whatever the bias's strides (where the
        # scores are the wider tensor: vector_width(gather=True))
        assert all("_v1_" not in n for n in names), names


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("K", [512, 4096, 33, 1000])
def test_a_strided_output_is_scattered(dtype, K, capsys):
    bias = _bias(2, 8, 16, K, dtype)
    bias[1, 2, 5] = float("-inf")
    scores = torch.randn(2, 8, 16, K, device="cuda")      # float32: wider than the bias, so gathers
    names = _run(biased_scores_and_softmax, (bias, scores), dtype, capsys)
    assert names


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("C", [768, 4096, 100])
def test_a_layer_norm_of_a_strided_input(dtype, C, capsys):
    x = torch.randn(4, 64, C, device="cuda", dtype=dtype).permute(0, 2, 1).contiguous().permute(0, 2, 1)
    r = torch.randn(4, 64, C, device="cuda", dtype=dtype)
    x[1, 3] = float("inf")
    w, b = torch.randn(C, device="cuda", dtype=dtype), torch.randn(C, device="cuda", dtype=dtype)
    _run(add_and_layer_norm, (x, r, w, b), dtype, capsys)


def test_the_knob_keeps_scalar_accesses(capsys):
    scores = torch.randn(2, 8, 16, 512, device="cuda")
    bias = _bias(2, 8, 16, 512, torch.bfloat16)
    names = _run(masked_softmax, (scores, bias), torch.float32, capsys, disable=["vector_gather"])
    assert names and all("_v1_" in n for n in names), names
