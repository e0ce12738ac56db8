"""On the GPU, row reductions whose rows fill their blocks exactly (P vectors for each of a
multiple of 32 threads: softmax or layer norm over 2048..16384 columns) run the even-rows twin:
no bounds checks, one block a row, its row loop once (``reduction_launch._even_choice``). Against
eager over dtypes and the normalizations that take it, rows that are and are not even (the twin
and the variant with checks), few and many rows, and rows holding -inf, inf and NaN; and
``PYTORCH_NVFUSER_DISABLE=even_rows`` keeps the checked variant with the same answers."""
import pytest
import torch
import torch.nn.functional as F

from test_cuda_row_gather import _run

pytestmark = pytest.mark.cuda


def softmax(x, w, b):
    return torch.softmax(x, -1)


def log_softmax(x, w, b):
    return torch.log_softmax(x, -1)


def layer_norm(x, w, b):
    return F.layer_norm(x, [x.shape[-1]], w, b, 1e-5)


def rms_norm(x, w, b):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def add_layer_norm(x, w, b):
    return F.layer_norm(x + 1.5, [x.shape[-1]], w, b, 1e-5)


FNS = [softmax, log_softmax, layer_norm, rms_norm, add_layer_norm]


def _inputs(rows, C, dtype, special):
    x = torch.randn(rows, C, device="cuda", dtype=dtype) * 3
    if special and rows > 2:
        x[1, 7] = float("nan")
        x[2] = float("-inf") if dtype.is_floating_point else 0
        x[-1, -1] = float("inf")
    w = torch.randn(C, device="cuda", dtype=dtype)
    b = torch.randn(C, device="cuda", dtype=dtype)
    return x, w, b


@pytest.mark.parametrize("fn", FNS, ids=[f.__name__ for f in FNS])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16])
@pytest.mark.parametrize("C", [2048, 3072, 4096, 16384])
def test_even_rows_take_the_twin(fn, dtype, C, capsys):
    if dtype == torch.float32 and C == 16384:
        pytest.skip("4096 float32 vectors a row: the multi-pass variant, which has no twin")
    names = _run(fn, _inputs(1000, C, dtype, True), dtype, capsys)
    assert any("_e_i32" in n for n in names), names
    # the same answers from the variant with checks
    names = _run(fn, _inputs(1000, C, dtype, True), dtype, capsys, disable=["even_rows"])
    assert not any("_e_i" in n for n in names), names


@pytest.mark.parametrize("fn", FNS, ids=[f.__name__ for f in FNS])
@pytest.mark.parametrize("C", [4088, 4104, 2080, 1000])
def test_uneven_rows_keep_their_checks(fn, C, capsys):
    # one vector short of or past an even row, and rows no multiple of 32 threads
    names = _run(fn, _inputs(300, C, torch.bfloat16, True), torch.bfloat16, capsys)
    assert names and not any("_e_i" in n for n in names), names


@pytest.mark.parametrize("fn", [softmax, layer_norm], ids=["softmax", "layer_norm"])
@pytest.mark.parametrize("rows", [1, 3, 131, 70000])
def test_even_rows_at_any_row_count(fn, rows, capsys):
    names = _run(fn, _inputs(rows, 4096, torch.bfloat16, rows > 2), torch.bfloat16, capsys)
    assert any("_e_i32" in n for n in names), names


def test_even_rows_of_a_sliced_batch(capsys):
    # rows of a 3-d tensor, every other batch: the row stride is not the row length
    x = torch.randn(8, 64, 4096, device="cuda", dtype=torch.bfloat16)[::2]
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    names = _run(layer_norm, (x, w, w), torch.bfloat16, capsys)
    assert names

