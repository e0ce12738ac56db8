"""CUDA launchers are generated Python: they must compile for every shape of group, without a GPU."""
import pytest
import torch

from graphfuser.executor.compiled import CompiledGroup, _launcher_source, magic_divisor
from graphfuser.ir import parse_graph
from graphfuser.ir.kir import Load

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
    # a rotary backward: the [2, 1] mask is flipped with the intermediate it selects in, so it is
    # read stepping back by 1 along the size-2 dim, and it broadcasts along the innermost one
    "flipped_mask": '''graph(%k : Long(2, 1, strides=[1, 1], requires_grad=0, device=cuda:0),
      %g : BFloat16(2, 4, 16, 2, 32, strides=[4096, 64, 256, 32, 1], requires_grad=0, device=cuda:0),
      %s : Float(1, 1, 16, 2, 32, strides=[1024, 1024, 64, 32, 1], requires_grad=0, device=cuda:0)):
  %zero : int = prim::Constant[value=0]()
  %d : int[] = prim::Constant[value=[-2]]()
  %m : Bool(2, 1, strides=[1, 1], requires_grad=0, device=cuda:0) = aten::eq(%k, %zero)
  %p : Float(2, 4, 16, 2, 32, strides=[4096, 64, 256, 32, 1], requires_grad=0, device=cuda:0) = aten::mul(%g, %s)
  %n : Float(2, 4, 16, 2, 32, strides=[4096, 64, 256, 32, 1], requires_grad=0, device=cuda:0) = aten::neg(%p)
  %w : Float(2, 4, 16, 2, 32, strides=[4096, 64, 256, 32, 1], requires_grad=0, device=cuda:0) = aten::where(%m, %n, %p)
  %f : Float(2, 4, 16, 2, 32, strides=[4096, 64, 256, 32, 1], requires_grad=0, device=cuda:0) = aten::flip(%w, %d)
  return (%f)''',
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


def test_vectorizing_ignores_the_strides_of_tensors_broadcast_along_the_innermost_dim():
    """A tensor broadcast along the innermost root is read once per vector, at the offset every
    lane shares: the launcher's vector check asks the strides of the others only (a rotary
    backward's flipped mask, stepping back by 1, kept its kernel scalar on an H200). Nor does it
    ask those of a parameter the kernel never reads (the unflipped twins of flipped inputs)."""
    import re

    from graphfuser.codegen.cstyle import stride_args

    cg = CompiledGroup(parse_graph(GROUPS["flipped_mask"]), "cuda", torch.device("cuda:0"), "k_mask")
    k = cg.kernel
    src = _launcher_source(cg)
    (vec,) = [ln for ln in src.splitlines() if ln.strip().startswith("vec =")]
    asked = {int(q) for q in re.findall(r"q(\d+) % \d+ == 0", vec)}
    args = list(enumerate(stride_args(k)))
    inner_bcast = {s for s, (p, _) in args if k.tensors[p].dim_kinds[-1] == "bcast"}
    assert inner_bcast, "the mask has stride arguments (flipped along its size-2 dim)"
    loaded = {e.tensor for e in k.exprs() if isinstance(e, Load)}
    unread = {s for s, (p, _) in args if not k.tensors[p].is_output and p not in loaded}
    assert unread, "the flipped inputs' unflipped parameters are never read"
    body = cg.source[cg.source.index("k_mask_v_i32("):]
    assert all(re.search(rf"\b{k.tensors[p].name}\s*[\[+]", body.split("\n}\n")[0]) is None
               for s, (p, _) in args if s in unread)
    assert asked == {s for s, _ in args} - inner_bcast - unread, vec
