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
