"""The row copy (graphfuser/runtime/row_copy.py): a gradient copied into a padded result's view
gives ``copy_``'s values, and the cases it does not take are left to ``copy_``."""
import pytest
import torch

from graphfuser.runtime.row_copy import copy_rows, rows

pytestmark = pytest.mark.cuda


def _padded(shape, pad, dtype):
    base = torch.zeros(*shape[:-1], shape[-1] + pad, dtype=dtype, device="cuda")
    return base, base[..., :shape[-1]]


def _source(shape, dtype):
    x = torch.randn(shape, device="cuda") * 100
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.int16, torch.int32])
@pytest.mark.parametrize("shape,pad", [((4096, 50257), 7), ((8, 512, 50257), 7), ((3, 1), 7), ((5, 9), 7),
                                       ((2, 3, 2047), 1), ((7, 4099), 5), ((1, 13), 3)])
def test_rows_into_a_padded_view(dtype, shape, pad):
    src = _source(shape, dtype)
    pad = pad + (-(shape[-1] + pad)) % (16 // src.element_size())     # a 16-byte pitch
    base, dst = _padded(shape, pad, dtype)
    assert copy_rows(dst, src)          # (every source here has rows of an odd pitch)
    torch.cuda.synchronize()
    assert torch.equal(dst, src)
    assert not base[..., shape[-1]:].any()          # the padding stays as it was


def test_cases_left_to_copy():
    src = _source((64, 33), torch.bfloat16)
    _, dst = _padded((64, 33), 7, torch.bfloat16)
    assert not copy_rows(dst, src.float())                      # a dtype change
    assert not copy_rows(dst[:, 1:], src[:, 1:])                # a misaligned destination
    assert not copy_rows(dst, src.t().contiguous().t())         # a column-major source
    assert not copy_rows(torch.empty(64, 33, dtype=torch.bfloat16, device="cuda"), src)   # odd destination pitch
    assert not copy_rows(dst.double(), src.double())            # 8-byte elements
    assert not copy_rows(dst[:0], src[:0])
    assert rows(dst) == (64, 33, 40) and rows(src) == (64, 33, 33)
