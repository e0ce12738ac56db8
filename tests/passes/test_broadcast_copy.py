"""Copies of broadcast views (graphfuser/passes/broadcast_copy.py): a reshape that copies an
expanded view (grouped-query attention's repeat_kv) reads a fused ``graphfuser::dense_copy``
instead. Against eager over dtypes, layouts of the repeated tensor, sizes, non-finite values,
gradients and both entry points; reshapes that view and the knob keep eager's op."""
import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.codegen.pointwise import vector_width
from graphfuser.config import config
from graphfuser.executor.compiled import CompiledGroup
from graphfuser.frontend.dynamo import graphfuser_backend
from graphfuser.ir import parse_graph, print_graph
from helpers import cuda_compiles, fusion_groups


def repeat_kv(x, n: int):
    b, h, s, d = x.shape
    return x[:, :, None, :, :].expand(b, h, n, s, d).reshape(b, h * n, s, d)


def repeat_and_scale(k, v):
    return repeat_kv(k, 4) * 0.5, repeat_kv(v, 4)


def gqa_attention(q, k, v):
    return F.scaled_dot_product_attention(q, repeat_kv(k, 4), repeat_kv(v, 4), is_causal=True)


def repeat_only(k):
    return repeat_kv(k, 4)


def _kv(dtype=torch.float32, layout="dense", b=2, kv=2, s=64, d=64, fill="randn"):
    g = torch.Generator().manual_seed(s + d)
    x = torch.randn(b, s, kv, d, generator=g) * 3
    if fill == "nonfinite":
        x.view(-1)[::7] = float("inf")
        x.view(-1)[3::11] = float("nan")
        x.view(-1)[5::13] = -0.0
    x = x.to(dtype) if dtype.is_floating_point else (x * 10).to(dtype)
    if layout == "transposed":          # a projection's [B, S, H, D] viewed as [B, H, S, D]
        return x.transpose(1, 2)
    if layout == "sliced":
        return torch.cat([x, x], -1)[..., ::2].transpose(1, 2)
    return x.transpose(1, 2).contiguous()


def _count(g) -> int:
    """dense_copy nodes inside the fusion groups of ``g``."""
    return sum(1 for group in fusion_groups(g) for n in group.subgraph.all_nodes() if n.kind == "graphfuser::dense_copy")


def _copies(sf, *args) -> int:
    return _count(sf.graph_for(*args))


@pytest.mark.parametrize("dtype, layout, size",
                         [(dt, lay, (64, 64)) for dt in (torch.float32, torch.float64, torch.bfloat16, torch.float16,
                                                         torch.int64, torch.bool) for lay in ("dense", "transposed")]
                         + [(torch.float32, "sliced", (64, 64)), (torch.bfloat16, "sliced", (3, 5)),
                            (torch.float32, "transposed", (3, 5)), (torch.float16, "dense", (1, 8))])
def test_repeated_heads_are_one_fused_copy(dtype, layout, size):
    k = _kv(dtype, layout, s=size[0], d=size[1])
    want = repeat_only(k)
    with config.override(disable=["fallback"]):
        sf = graphfuser.script(repeat_only)
        for _ in range(3):
            got = sf(k)
    assert torch.equal(got, want) and got.stride() == want.stride()
    assert _copies(sf, k) == 1
    (group,) = [g for g in fusion_groups(sf.graph_for(k))]
    assert [n.kind for n in group.subgraph.block.nodes] == ["graphfuser::dense_copy"]


@pytest.mark.parametrize("layout", ["dense", "transposed"])
def test_non_finite_values_and_negative_zeros_copy_bit_for_bit(layout):
    k = _kv(torch.float32, layout, fill="nonfinite")
    want = repeat_only(k)
    sf = graphfuser.script(repeat_only)
    for _ in range(3):
        got = sf(k)
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(torch.nan_to_num(got), torch.nan_to_num(want))
    assert torch.equal(torch.signbit(got), torch.signbit(want))


def test_the_copy_joins_the_ops_after_the_reshape_only_through_its_view():
    k, v = _kv(layout="transposed"), _kv(layout="dense")
    sf = graphfuser.script(repeat_and_scale)
    for _ in range(3):
        got = sf(k, v)
    for g, w in zip(got, repeat_and_scale(k, v)):
        assert torch.equal(g, w) and g.stride() == w.stride()
    assert _copies(sf, k, v) == 2


def test_gradients_sum_over_the_repeats():
    q = torch.randn(2, 8, 64, 64, requires_grad=True)
    k = _kv(layout="transposed").detach().requires_grad_()
    v = _kv(layout="dense").detach().requires_grad_()
    sf = graphfuser.script(gqa_attention)
    for _ in range(3):
        out = sf(q, k, v)
        grads = torch.autograd.grad(out.square().sum(), (q, k, v))
    want = gqa_attention(q, k, v)
    wgrads = torch.autograd.grad(want.square().sum(), (q, k, v))
    torch.testing.assert_close(out, want)
    for g, w in zip(grads, wgrads):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    assert _copies(sf, q, k, v) == 2


def test_through_torch_compile():
    q, k, v = torch.randn(2, 8, 64, 64), _kv(layout="transposed"), _kv(layout="dense")
    torch._dynamo.reset()
    f = torch.compile(gqa_attention, backend=graphfuser_backend)
    with torch.no_grad(), config.override(disable=["fallback"]):
        for _ in range(3):
            torch.testing.assert_close(f(q, k, v), gqa_attention(q, k, v), rtol=1e-5, atol=1e-5)
    assert _count(graphfuser.last_executed_optimized_graph()) == 2


@pytest.mark.parametrize("case", ["one_kv_head", "knob"])
def test_reshapes_that_view_and_the_knob_keep_eagers_reshape(case):
    k = _kv(kv=1) if case == "one_kv_head" else _kv()
    with config.override(disable=["broadcast_copies"] if case == "knob" else []):
        sf = graphfuser.script(repeat_only)
        for _ in range(3):
            got = sf(k)
    want = repeat_only(k)
    assert torch.equal(got, want) and got.stride() == want.stride()
    assert _copies(sf, k) == 0


def _cuda_group() -> CompiledGroup:
    """The copy's group of a bf16 transposed [2, 2, 64, 64], lowered for CUDA (no GPU needed)."""
    k = _kv(torch.bfloat16, "transposed")
    sf = graphfuser.script(repeat_only)
    for _ in range(3):
        sf(k)
    (group,) = fusion_groups(sf.graph_for(k))
    sub = parse_graph(print_graph(group.subgraph).replace("device=cpu", "device=cuda:0"))
    return CompiledGroup(sub, "cuda", torch.device("cuda", 0), "k")


def test_the_cuda_kernel_reads_the_repeated_tensor_in_vectors():
    """The expanded view is an argument only for its sizes: the copy's CUDA variant loads the
    tensor with its size-1 dim in 16-byte vectors; each variant compiles with NVRTC."""
    cg = _cuda_group()
    assert vector_width(cg.kernel) == 8
    assert "gf_load<8>(b_t0" in cg.source and "b_t1" not in cg.source
    from graphfuser.runtime import nvrtc

    ok, why = nvrtc.available()
    if not ok:
        pytest.skip(why)
    for src, (fname, *_rest) in zip(cg.variant_sources, cg.variants):
        assert cuda_compiles(src, fname, 90)


def _flat_repeat(x):
    return x.unsqueeze(2).expand(-1, -1, 3).flatten(1, 2)


@pytest.mark.parametrize("first, later", [((0, 1), (2, 1)), ((4, 2), (4, 1)), ((4, 2), (0, 2)), ((4, 2), (5, 7))])
def test_later_calls_view_or_copy_as_eager(first, later):
    """CPU fuzz graph 274 of seed 36514: profiled on empty rows, every reshape is 'dense'; a later
    [2, 1] input's flatten views (strides (1, 0)). Profiled where it copies, a later size-1 dim
    (a view in eager) misses the guard and gets eager's view; other sizes keep the fused copy."""
    sf = graphfuser.script(_flat_repeat)
    for shape in [first] * 3 + [later] * 3:
        x = torch.randn(*shape)
        got, want = sf(x), _flat_repeat(x)
        assert torch.equal(got, want) and got.stride() == want.stride(), (shape, got.stride(), want.stride())


def test_the_launcher_takes_the_vector_variant():
    """The expanded view's own strides (1 along the head dim, 0 along the repeats) take no part
    in the launcher's vector test: the 16-byte variant runs (H200: the scalar one had run)."""
    from graphfuser.executor.compiled import _launcher_source

    cg = _cuda_group()
    vec_line = next(line for line in _launcher_source(cg).splitlines() if line.strip().startswith("vec ="))
    assert "p1" not in vec_line and "p0" in vec_line and "p2" in vec_line, vec_line
