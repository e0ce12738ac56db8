"""CUDA launchers are generated Python: they must compile for every shape of group, without a GPU."""
import pytest
import torch

from graphfuser.executor.compiled import CompiledGroup, _launcher_source, magic_divisor
from graphfuser.ir import parse_graph

GROUPS = {
    "flat": '''graph(%x : Float(4096, strides=[1], requires_grad=0, device=cuda:0)):
  %one : int = prim::Constant[value=1]()
  %c : float = prim::Constant[value=1.]()
  %a : Float(4096, strides=[1], requires_grad=0, device=cuda:0) = aten::add(%x, %c, %one)
  %b : Float(4096, strides=[1], requires_grad=0, device=cuda:0) = aten::relu(%a)
  return (%b)''',
    "broadcast": '''graph(%x : Float(4, 1, 8, strides=[8, 8, 1], requires_grad=0, device=cuda:0),
      %y : BFloat16(4, 6, 8, strides=[48, 8, 1], requires_grad=0, device=cuda:0), %s : float):
  %one : int = prim::Constant[value=1]()
  %a : Float(4, 6, 8, strides=[48, 8, 1], requires_grad=0, device=cuda:0) = aten::add(%x, %y, %one)
  %c : Half(4, 6, 8, strides=[48, 8, 1], requires_grad=0, device=cuda:0) = aten::mul(%a, %s)
  return (%c)''',
    "strided_inner": '''graph(%x : Float(8, 16, strides=[1, 8], requires_grad=0, device=cuda:0),
      %y : Float(8, 16, strides=[16, 1], requires_grad=0, device=cuda:0)):
  %one : int = prim::Constant[value=1]()
  %a : Float(8, 16, strides=[16, 1], requires_grad=0, device=cuda:0) = aten::add(%x, %y, %one)
  %b : Float(8, 16, strides=[16, 1], requires_grad=0, device=cuda:0) = aten::sigmoid(%a)
  return (%b, %a)''',
    # a flipped input (pointer to its last element, negated strides) and a flipped intermediate
    "flipped": '''graph(%x : BFloat16(4, 6, 2, 8, strides=[96, 16, 8, 1], requires_grad=0, device=cuda:0),
      %y : Float(6, 2, 8, strides=[16, 8, 1], requires_grad=0, device=cuda:0)):
  %one : int = prim::Constant[value=1]()
  %d : int[] = prim::Constant[value=[-2]]()
  %d0 : int[] = prim::Constant[value=[0, 2]]()
  %f : BFloat16(4, 6, 2, 8, strides=[96, 16, 8, 1], requires_grad=0, device=cuda:0) = aten::flip(%x, %d)
  %a : Float(4, 6, 2, 8, strides=[96, 16, 8, 1], requires_grad=0, device=cuda:0) = aten::mul(%f, %y)
  %g : Float(4, 6, 2, 8, strides=[96, 16, 8, 1], requires_grad=0, device=cuda:0) = aten::flip(%a, %d0)
  %b : Float(4, 6, 2, 8, strides=[96, 16, 8, 1], requires_grad=0, device=cuda:0) = aten::add(%g, %a, %one)
  return (%b)''',
}


@pytest.mark.parametrize("name", sorted(GROUPS))
def test_launcher_source_compiles(name):
    cg = CompiledGroup(parse_graph(GROUPS[name]), "cuda", torch.device("cuda:0"), f"k_{name}")
    src = _launcher_source(cg)
    compile(src, "<launcher>", "exec")
    assert "_l0(" in src
    assert len(cg.variant_sources) == len(cg.variants)      # one NVRTC program per variant
    for divs in cg.divisors:
        for d in divs:
            assert f"_magic({d})" in src


def test_magic_division_is_exact():
    import random

    rng = random.Random(0)
    cases = [(rng.randrange(0, 2 ** 31), rng.randrange(1, 2 ** 31)) for _ in range(20000)]
    cases += [(n, d) for d in range(1, 600) for n in (0, 1, d - 1, d, d + 1, 2 ** 31 - 1)]
    for n, d in cases:
        m, s = magic_divisor(d)
        assert ((((n * m) >> 32) + n) >> s) == n // d, (n, d)


@pytest.mark.parametrize("name", sorted(GROUPS))
def test_each_variant_compiles_on_its_own(name):
    """Variants are separate NVRTC programs (compiled on first use): each compiles alone."""
    from graphfuser.runtime import nvrtc

    ok, why = nvrtc.available()
    if not ok:
        pytest.skip(why)
    cg = CompiledGroup(parse_graph(GROUPS[name]), "cuda", torch.device("cuda:0"), f"k_{name}")
    for src, (fname, *_rest) in zip(cg.variant_sources, cg.variants):
        assert src.count("__global__") == 1
        cubin = nvrtc.compile_cubin(src, fname, 90)
        assert f".text.{fname}\0".encode() in cubin
