"""Rotary embeddings without their cat (graphfuser/passes/rotary.py): the rewritten graph's
results equal eager's (values and strides) across dtypes, layouts, odd sizes and non-finite
values; where the pattern, its types or its sizes (a scripted function's vary) do not fit, the
cat stays and the results are eager's too."""
import pytest
import torch

import graphfuser
from graphfuser.config import config
from graphfuser.frontend.dynamo import registered_backend
from helpers import TOLERANCES, fusion_groups


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope(q, k, cos, sin):
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def rope_swapped(q, k, cos, sin):
    # operands in the other order: sin * rotated + cos * q
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return sin * rotate_half(q) + cos * q, k


def _inputs(b=2, heads=4, kv=2, seq=8, dim=16, dtype=torch.float32, fill="randn", layout="transposed"):
    g = torch.Generator().manual_seed(b * 100 + seq * 10 + dim)
    q = torch.randn(b, seq, heads, dim, generator=g).to(dtype)
    k = torch.randn(b, seq, kv, dim, generator=g).to(dtype)
    if fill == "nonfinite":
        q.view(-1)[::7] = float("inf")
        q.view(-1)[3::11] = float("nan")
        k.view(-1)[::5] = -float("inf")
    q, k = (t.transpose(1, 2) for t in (q, k)) if layout == "transposed" else \
        (t.permute(0, 2, 1, 3).contiguous() for t in (q, k))
    cos = torch.randn(b, seq, dim, generator=g).to(dtype)
    sin = torch.randn(b, seq, dim, generator=g).to(dtype)
    return q, k, cos, sin


def _front(fn, front):
    if front == "compile":
        torch._dynamo.reset()
        return torch.compile(fn, backend=registered_backend())
    return graphfuser.script(fn)


def _graph(sf, front, args):
    return sf.graph_for(*args) if front == "script" else graphfuser.last_executed_optimized_graph()


def _check(sf, fn, args):
    for o, r in zip(sf(*args), fn(*args)):
        # fp16 / bf16: the group keeps fp32 intermediates where eager rounds each op's result
        torch.testing.assert_close(o, r, equal_nan=True, **TOLERANCES[o.dtype])
        assert o.dtype == r.dtype
        assert o.stride() == r.stride() or o.numel() == 0     # (an empty tensor's strides are no layout)


@pytest.mark.parametrize("front", ["script", "compile"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64], ids=str)
@pytest.mark.parametrize("fn", [rope, rope_swapped], ids=["q_cos", "sin_rot"])
def test_rotary_runs_without_its_cat_and_matches_eager(front, dtype, fn):
    sf = _front(fn, front)
    args = _inputs(dtype=dtype)
    with config.override(disable=["fallback"]), torch.no_grad():
        for _ in range(4):
            _check(sf, fn, args)
        g = _graph(sf, front, args)
        # a Dynamo graph has fixed sizes (Dynamo guards them); a scripted function's sizes vary
        # from call to call, and a width that is not 2 * h would make the split impossible. The
        # swapped sum's eager result follows the cat's contiguous layout, which the split form's
        # (following x) is not: it takes the rolled form, whose rotated half is contiguous too
        rewritten = front == "compile"
        assert ("aten::cat" not in str(g)) == rewritten, str(g)
        assert ("aten::roll" in str(g)) == (rewritten and fn is rope_swapped), str(g)
        assert fusion_groups(g)
        # new sizes (the kernels take sizes at run time), a contiguous layout, odd sizes, h = 1
        for more in (dict(b=3, seq=5), dict(layout="contiguous"), dict(b=1, heads=3, kv=1, seq=7, dim=2),
                     dict(fill="nonfinite"), dict(b=0)):
            a = _inputs(dtype=dtype, **more)
            _check(sf, fn, a)


@pytest.mark.parametrize("front", ["script", "compile"])
def test_cat_stays_where_the_types_do_not_fit(front):
    def rope_bcast(q, cos, sin):
        # cos / sin broadcast along the last dim: the split needs the full width
        return (q * cos) + (rotate_half(q) * sin)

    def rotate_third(q, cos, sin):
        x1, x2 = q[..., :3], q[..., 3:]
        return (q * cos) + (torch.cat((-x2, x1), -1) * sin)

    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 8, 8, generator=g)
    full = torch.randn(2, 1, 8, 8, generator=g)
    one = torch.randn(2, 1, 8, 1, generator=g)
    with config.override(disable=["fallback"]), torch.no_grad():
        for fn, args in ((rope_bcast, (q, one, one)), (rotate_third, (q, full, full))):
            sf = _front(fn, front)
            for _ in range(4):
                torch.testing.assert_close(sf(*args), fn(*args))
            assert "aten::cat" in str(_graph(sf, front, args))


def _unfused_kinds(g) -> set:
    """The op kinds of the optimized graph outside its fusion groups."""
    return {n.kind for n in g.all_nodes()}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("fill", ["randn", "nonfinite"])
@pytest.mark.parametrize("layout", ["transposed", "contiguous"])
@pytest.mark.parametrize("form", ["flip", "roll"])
def test_under_grad_the_rotated_half_is_a_flip(dtype, fill, layout, form):
    """Under grad the split's slices would send their gradients back through zero-filled copies:
    the rotated half is ``flip`` of the size-2 dim of ``x.unflatten(-1, [2, h])`` with its first
    half negated, an index remap in the group's kernel, whose gradient is a flip again, in the
    backward's kernel: no kernel of their own either way. With flip fusion off it is
    ``roll(x, h)``, through x's dense permutation where x is a transposed view. Values, strides
    and the gradients of q, k, cos and sin match eager's."""
    args = [a.detach().requires_grad_() for a in _inputs(dtype=dtype, fill=fill, layout=layout)]
    torch._dynamo.reset()
    sf = torch.compile(rope, backend=registered_backend())
    off = ["flip_fusion"] if form == "roll" else []
    ref = rope(*args)
    seeds = [torch.randn(o.shape, generator=torch.Generator().manual_seed(i)).to(dtype) for i, o in enumerate(ref)]
    with config.override(disable=["fallback"] + off):
        for _ in range(6):          # (the backward profiles once the forward is optimized)
            out = sf(*args)
            torch.autograd.grad(out, args, seeds)
        out = sf(*args)
        g = graphfuser.last_executed_optimized_graph()
        top, text = _unfused_kinds(g), str(g)
        assert "aten::cat" not in top, text
        if form == "flip":
            assert "aten::flip" in text and not top & {"aten::flip", "aten::roll"}, text
        else:
            assert "aten::roll" in top and "aten::flip" not in text, text
            # q and k are transposed views of dense tensors: the roll reads them through that
            # permutation (a roll of a strided tensor would copy it contiguous first)
            assert ("aten::permute" in top) == (layout == "transposed"), text
        with torch.profiler.profile() as prof:
            got = torch.autograd.grad(out, args, seeds)
    ran = {e.key for e in prof.key_averages()}
    assert "aten::flip" not in ran and ("aten::roll" in ran) == (form == "roll"), ran
    want = torch.autograd.grad(ref, args, seeds)
    for o, r in zip(list(out) + list(got), list(ref) + list(want)):
        torch.testing.assert_close(o, r, equal_nan=True, **TOLERANCES[o.dtype])
    for o, r in zip(out, ref):
        assert o.stride() == r.stride()


def test_cat_stays_with_the_knob():
    args = _inputs()
    with config.override(disable=["rotary_rewrite"]), torch.no_grad():
        sf = _front(rope, "compile")
        for _ in range(4):
            _check(sf, rope, args)
        assert "aten::cat" in str(graphfuser.last_executed_optimized_graph())
