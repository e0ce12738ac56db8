"""simplify: constant Ifs, scalar comparisons and ``prim::unchecked_cast`` of constants fold, so
``F.softmax`` / ``F.log_softmax`` / ``nn.Softmax`` reach the partition with a constant ``dim``."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from graphfuser.ir import parse_graph, print_graph, verify
from graphfuser.passes import fold_constant_ifs
from helpers import check, make_input


def test_unchecked_cast_of_constant_folds():
    g = verify(parse_graph("""
graph(%x : Tensor):
  %n : NoneType = prim::Constant()
  %d : int = prim::Constant[value=-1]()
  %c : bool = aten::__is__(%d, %n)
  %dim : int = prim::If(%c)
    block0():
      %r : int = aten::dim(%x)
      -> (%r)
    block1():
      %k : int = prim::unchecked_cast(%d)
      -> (%k)
  %y : Tensor = aten::softmax(%x, %dim, %n)
  return (%y)
"""))
    text = print_graph(verify(fold_constant_ifs(g)))
    assert "prim::If" not in text and "unchecked_cast" not in text
    assert "aten::softmax(%x, %" in text


def _softmax(x):
    return F.softmax(x, dim=-1) + 1.0


def _log_softmax(x):
    return F.log_softmax(x, dim=1) * 2.0


def _softmax_positional(x):
    return F.softmax(x, 1).sigmoid()


def _softmax_dtype(x):
    return F.softmax(x, dim=-1, dtype=torch.float64)


FNS = [_softmax, _log_softmax, _softmax_positional,
       nn.Softmax(dim=1), nn.LogSoftmax(dim=1), nn.Softmax(dim=-1), nn.LogSoftmax(dim=-1)]


@pytest.mark.parametrize("fn", FNS, ids=lambda f: getattr(f, "__name__", repr(f)))
@pytest.mark.parametrize("layout", ["dense", "transposed", "sliced"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
def test_softmax_wrappers_fuse(fn, layout, dtype):
    check(fn, make_input(6, 17, dtype=dtype, layout=layout))


def test_softmax_with_dtype_fuses():
    check(_softmax_dtype, make_input(6, 17))


def _mask(x, count: int):
    m = x.new_zeros((6, 6))
    for h in ((0, -3), (-3, -1), (-1, None)):
        for w in ((0, -3), (-3, -1), (-1, None)):
            m[h[0]:h[1], w[0]:w[1]] = count
            count += 1
    return x + m


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32, torch.int64, torch.uint8, torch.bool])
def test_number_assignments_into_slices_become_fill(dtype):
    import graphfuser

    x = make_input(2, 6, 6).to(dtype) if dtype != torch.bool else make_input(2, 6, 6) > 0
    sf = graphfuser.script(_mask)
    for count in (0, 2, 240, 0):      # uint8: 240 + 8 fits
        want = _mask(x, count)
        got = sf(x, count)
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want)
    text = print_graph(sf._optimized)
    assert text.count("aten::fill_") == 9 and "aten::copy_" not in text and "aten::tensor" not in text


def test_copy_of_a_tensor_of_another_dtype_is_left_alone():
    g = verify(parse_graph("""
graph(%x : Float(4, strides=[1], requires_grad=0, device=cpu), %v : float):
  %f : bool = prim::Constant[value=0]()
  %n : NoneType = prim::Constant()
  %d : Device = prim::device(%x)
  %t : Tensor = aten::tensor(%v, %n, %d, %f)
  %y : Tensor = aten::copy_(%x, %t, %f)
  return (%y)"""))
    from graphfuser.passes import fill_numbers

    assert "aten::fill_" not in print_graph(fill_numbers(g))
