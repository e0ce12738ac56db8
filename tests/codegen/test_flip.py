"""``flip`` inside pointwise kernels (``ops/movement.py``, ``codegen/lower.py``'s ``_Flips``): a
flipped input is read through a pointer to its last element along the flipped dims and negated
strides; a flipped intermediate is its producers evaluated again with their loads flipped. Every
result equals eager's, across dtypes, layouts, odd and zero sizes and non-finite data;
gradients through a flip equal eager's. CUDA runs need a GPU; NVRTC compiles the CUDA source of a
flipped group without one (``tests/codegen/test_cuda_launcher.py``, group ``flipped``). Floating
results are compared within rounding (a kernel contracts a product and a sum into one fma): an
element read from the wrong place is off by its whole value."""
from __future__ import annotations

import pytest
import torch

import graphfuser
from graphfuser.config import config
from helpers import DEVICES, TOLERANCES, fusion_groups, make_input


def flip_input(x, y):
    return torch.flip(x, [1]) * y + x


def flip_intermediate(x, y):
    a = (x * y).neg()
    return torch.flip(a, [0, -1]) + a


def flip_twice(x, y):
    # a flip of a flip of the same dim reads the input where it is
    return torch.flip(torch.flip(x + 1, [2]) * y, [2]) - x


def flip_broadcast(x, b):
    # b broadcasts along the flipped dim 1 (size 1 there): its read is not flipped
    return torch.flip(x * b, [1, 2])


def flip_cast(x, y):
    return torch.flip(x.float(), [-1]) + y.float()


CASES = {"input": flip_input, "intermediate": flip_intermediate, "twice": flip_twice, "broadcast": flip_broadcast,
         "cast": flip_cast}
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32]


def _args(case: str, shape: tuple, dtype: torch.dtype, layout: str, device: str) -> tuple:
    x = make_input(*shape, dtype=dtype, layout=layout, device=device)
    if layout == "channels_last":
        x = make_input(*shape, dtype=dtype, device=device).contiguous(memory_format=torch.channels_last)
    if case == "broadcast":
        return x, make_input(shape[0], 1, shape[2], 1, dtype=dtype, device=device)
    if layout == "expanded":
        return x, make_input(1, shape[1], 1, shape[3], dtype=dtype, device=device).expand(shape)
    return x, make_input(*shape, dtype=dtype, device=device)


def _run(fn, args, runs: int = 4, off: tuple = ()):
    sf = graphfuser.script(fn)
    with config.override(disable=["fallback", *off]):
        for _ in range(runs):
            out = sf(*args)
    return sf, out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", ["dense", "transposed", "sliced", "expanded", "channels_last"])
def test_flip_matches_eager(device, case, dtype, layout):
    if case == "cast" and not dtype.is_floating_point:
        pytest.skip("a float cast of integers is covered by the float rows")
    fn = CASES[case]
    args = _args(case, (3, 5, 4, 6), dtype, layout, device)
    sf, out = _run(fn, args)
    assert fusion_groups(sf._optimized), str(sf._optimized)
    assert "aten::flip" not in {n.kind for n in sf._optimized.all_nodes()}, str(sf._optimized)
    ref = fn(*args)
    assert out.dtype == ref.dtype and out.shape == ref.shape and out.stride() == ref.stride()
    torch.testing.assert_close(out, ref, **TOLERANCES.get(ref.dtype, {}))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (3, 0, 4, 5), (7, 3, 1, 33), (2, 9, 5, 1), (1, 17, 3, 2)],
                         ids=str)
def test_odd_and_zero_sizes_and_non_finite_values(device, shape):
    x = make_input(*shape, device=device)
    x.view(-1)[::3] = float("nan")
    x.view(-1)[1::5] = -float("inf")
    y = make_input(*shape, device=device)
    for fn in CASES.values():
        args = (x, make_input(shape[0], 1, shape[2], 1, device=device)) if fn is flip_broadcast else (x, y)
        _, out = _run(fn, args)
        ref = fn(*args)
        assert out.shape == ref.shape
        torch.testing.assert_close(out, ref, equal_nan=True, msg=fn.__name__)


@pytest.mark.parametrize("device", DEVICES)
def test_a_new_size_and_layout_reuse_the_kernel_and_stay_right(device):
    """Sizes and strides are run-time arguments: the flipped pointer and strides follow them."""
    sf = graphfuser.script(flip_intermediate)
    for shape, layout in [((3, 5, 4, 6), "dense"), ((3, 5, 4, 6), "dense"), ((3, 5, 4, 6), "dense"),
                          ((8, 2, 3, 10), "dense"), ((4, 5, 7, 2), "sliced")]:
        args = _args("intermediate", shape, torch.float32, layout, device)
        torch.testing.assert_close(sf(*args), flip_intermediate(*args))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_gradients_through_a_flip_match_eager(device, dtype):
    """The gradient of a flip is a flip of the gradient: in the backward's kernel, fused."""
    from graphfuser.frontend.dynamo import graphfuser_backend

    def f(x, y):
        return (torch.flip(x * y, [1]).sigmoid() * torch.flip(y, [0, 2])).sum(-1)

    x = make_input(3, 5, 4, dtype=dtype, layout="transposed", device=device).requires_grad_()
    y = make_input(3, 5, 4, dtype=dtype, device=device).requires_grad_()
    torch._dynamo.reset()
    cf = torch.compile(f, backend=graphfuser_backend)
    seed = torch.randn(3, 5, dtype=dtype, device=device)
    with config.override(disable=["fallback"]):
        for _ in range(6):
            got = torch.autograd.grad(cf(x, y), (x, y), seed)
    want = torch.autograd.grad(f(x, y), (x, y), seed)
    tol = {"rtol": 1.6e-2, "atol": 1e-2} if dtype == torch.bfloat16 else {}
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, **tol)


def test_the_knob_keeps_flip_out_of_kernels():
    args = _args("input", (3, 5, 4, 6), torch.float32, "dense", "cpu")
    sf, out = _run(flip_input, args, off=("flip_fusion",))
    assert "aten::flip" in {n.kind for n in sf._optimized.all_nodes()}, str(sf._optimized)
    torch.testing.assert_close(out, flip_input(*args))


def test_a_flip_does_not_join_a_reduction_group():
    """A reduction kernel's loads address its axes through their own index plan: the flip stays
    out of that group (here: in a pointwise group of its own neighbours)."""
    def f(x):
        a = torch.flip(x.exp(), [1])
        return a.sum(-1), a * 2

    x = make_input(4, 6, 8)
    sf, out = _run(f, (x,))
    ref = f(x)
    for o, r in zip(out, ref):
        torch.testing.assert_close(o, r)
    for n in fusion_groups(sf._optimized):
        kinds = {m.kind for m in n.subgraph.block.nodes}
        assert not ("aten::flip" in kinds and "aten::sum" in kinds), str(n.subgraph)


def test_fusion_definition_has_flip():
    """``fd.ops.flip`` (the op table's row, as every row is there): an input and an intermediate."""
    from graphfuser.frontend import DataType, Fusion, FusionDefinition

    fs = Fusion()
    with FusionDefinition(fs) as fd:
        t0 = fd.define_tensor(2, DataType.Float)
        t2 = fd.ops.add(fd.ops.flip(t0, [1]), t0)
        fd.add_output(fd.ops.flip(fd.ops.mul(t2, t0), [0, 1]))
    for x in (torch.randn(3, 5), torch.randn(5, 3).t(), torch.randn(4, 14)[:, ::2]):
        for _ in range(3):
            (out,) = fs.execute([x])
        torch.testing.assert_close(out, ((x.flip(1) + x) * x).flip([0, 1]))


@pytest.mark.parametrize("layout", ["dense", "transposed"])
def test_large_flips_split_over_threads(layout):
    """Past the CPU's OpenMP threshold the iteration space is split in chunks; each chunk's
    flipped reads still step back from the last element."""
    args = _args("intermediate", (8, 33, 17, 40), torch.float32, layout, "cpu")
    assert args[0].numel() > config.cpu["omp_threshold"]
    sf, out = _run(flip_intermediate, args)
    assert fusion_groups(sf._optimized)
    torch.testing.assert_close(out, flip_intermediate(*args))
