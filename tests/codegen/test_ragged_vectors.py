"""Vector variants of inner CUDA reductions over rows that are no multiple of V long
(``codegen/reduction/vectors.py``): GPT-2's cross-entropy over 50257 logits a row, rows 50304
apart (a padded GEMM output, every row 16-byte aligned).

No GPU needed for the first half: the groups are profiled on the CPU and rendered for CUDA
(``helpers.on_cuda``); their multi-pass and split vector variants run whole vectors in the
loop and the row's partial last vector lane by lane after it, and compile with NVRTC; the
generated launcher takes them for aligned rows of any length (run here as Python with stand-ins
for the driver), the persistent vector variants for rows a multiple of V long only, and the
scalar variants where the row stride is odd.

The second half (``pytest.mark.cuda``, skipped without a GPU) runs softmax, log_softmax,
layer_norm, sum / amax / var over the last dim and a cross-entropy written as Hugging Face
writes it (forward and backward) against eager, at row lengths 1, 3, 7, 9, 4097 and 50257,
contiguous and as views of wider buffers, fp32 / bf16 / fp16, with NaN, inf, -inf and constant
rows; a few of those run on the CPU too (unchanged kernels: they check the cases themselves)."""
from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.codegen.cstyle import stride_args
from graphfuser.config import config
from graphfuser.executor.compiled_reduction import ReductionGroup, launcher_source
from graphfuser.executor.reduction_launch import cuda_choice
from graphfuser.frontend.dynamo import graphfuser_backend
from graphfuser.ops.axes import needs_axes
from graphfuser.runtime import nvrtc
from helpers import cuda_compiles, check, fusion_groups, make_input, on_cuda

def softmax(x):
    return torch.softmax(x * 1.0, -1)


def log_softmax(x):
    return torch.log_softmax(x * 1.0, -1)


def layer_norm(x, w, b):
    return F.layer_norm(x * 1.0, [x.shape[-1]], w, b, 1e-5)


def sum_last(x):
    return (x * 1.0).sum(-1)


def amax_last(x):
    return (x * 1.0).amax(-1)


def var_last(x):
    return (x * 1.0).var(-1)


def hf_loss(logits, labels):
    return F.cross_entropy(logits.float(), labels, ignore_index=-100)


def hf_loss_rows(logits, labels):
    return F.cross_entropy(logits.float(), labels, ignore_index=-100, reduction="none")


# -- groups rendered for CUDA from CPU-profiled graphs ----------------------------------------------
def _scripted_groups(fn, *args) -> list[ReductionGroup]:
    sf = graphfuser.script(fn)
    with config.override(disable=["fallback"]):
        for _ in range(3):
            sf(*args)
    return [ReductionGroup(on_cuda(g.subgraph), "cuda", torch.device("cuda", 0), f"k{i}")
            for i, g in enumerate(fusion_groups(sf._optimized))]


def _dynamo_groups(fn, logits, labels, backward=False) -> list[ReductionGroup]:
    """The reduction groups of ``fn`` through the Dynamo frontend (forward, then the backward's)."""
    torch._dynamo.reset()
    c = torch.compile(fn, backend=graphfuser_backend)
    graphs = []
    with config.override(disable=["fallback"]):
        for _ in range(4):
            x = logits.detach().requires_grad_(backward)
            out = c(x, labels)
            graphs = [graphfuser.last_executed_optimized_graph()]
            if backward:
                out.sum().backward()
                graphs.append(graphfuser.last_executed_optimized_graph())
    subs = [n.subgraph for g in graphs for n in fusion_groups(g) if needs_axes(n.subgraph.block.nodes)]
    return [ReductionGroup(on_cuda(sub), "cuda", torch.device("cuda", 0), f"k{i}") for i, sub in enumerate(subs)]


def _cases():
    x = make_input(6, 40, dtype=torch.bfloat16)
    w, b = make_input(40, dtype=torch.bfloat16), make_input(40, dtype=torch.bfloat16)
    return {"softmax": (softmax, x), "log_softmax": (log_softmax, x), "layer_norm": (layer_norm, x, w, b),
            "sum": (sum_last, x), "amax": (amax_last, x), "var": (var_last, x)}


def _group(name: str) -> ReductionGroup:
    fn, *args = _cases()[name]
    (cg,) = [cg for cg in _scripted_groups(fn, *args) if cg.kernel.kind == "inner"]
    return cg


def _loss_forward() -> ReductionGroup:
    """The fused forward of the loss, profiled on a view of a wider buffer as GPT-2's logits are."""
    logits = make_input(8, 72, dtype=torch.bfloat16)[:, :67]
    labels = torch.randint(0, 67, (8,))
    labels[::3] = -100
    (cg,) = [cg for cg in _dynamo_groups(hf_loss, logits, labels)
             if cg.kernel.kind == "inner" and cg.kernel.n_dims == 2]
    return cg


def _ragged(cg: ReductionGroup) -> list[str]:
    half = len(cg.variants) // 2
    return [v[2].tag for v, r in zip(cg.variants[:half], cg.ragged[:half]) if r]


def _check_sources(cg: ReductionGroup) -> None:
    """The ragged variants run whole vectors in the loop and the partial one after it, lane by
    lane; the persistent ones are as they were; every ragged variant compiles."""
    V = max(v[2].vector for v in cg.variants)
    assert V > 1
    half = len(cg.variants) // 2
    assert _ragged(cg) == [f"mp_v{V}", f"split_v{V}"] or _ragged(cg) == [f"mp_v{V}"], _ragged(cg)
    assert cg.ragged[:half] == cg.ragged[half:]
    for i, (src, v) in enumerate(zip(cg.variant_sources, cg.variants)):
        if not cg.ragged[i]:
            assert "gf_lanes" not in src, v[0]
            continue
        body = src.split("__global__")[1]
        assert re.search(rf"\) \* {V}\) \+ {V} <= n\d+\) {{", body), v[0]       # whole vectors only
        assert re.search(rf"< (n\d+) && \1 - \(.*\) < {V}\) {{", body), v[0]        # the partial one
        assert "if (v < gf_lanes) {" in body and f"gf_load<{V}>(" in body
        for tail in body.split(" gf_lanes = ")[1:]:          # (up to the next pass's loop or combine)
            tail = re.split(r"#pragma unroll 4|gf_block_|gf_grid_", tail)[0]
            assert "if (v < gf_lanes) {" in tail and "gf_load<" not in tail and "gf_store<" not in tail, tail
        if nvrtc.available()[0]:
            cuda_compiles(src, v[0], 90, ("--fmad=false",) if cg.exact_products else ())


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "layer_norm", "sum", "amax", "var"])
def test_ragged_variants_render_and_compile(name):
    cg = _group(name)
    _check_sources(cg)
    compile(launcher_source(cg), "<launcher>", "exec")


def test_loss_forward_and_backward_render_and_compile():
    logits = make_input(8, 72, dtype=torch.bfloat16)[:, :67]
    labels = torch.randint(0, 67, (8,))
    labels[::3] = -100
    groups = [cg for cg in _dynamo_groups(hf_loss, logits, labels, backward=True) if cg.kernel.kind == "inner"]
    assert len(groups) >= 2
    for cg in groups:
        if max(v[2].vector for v in cg.variants) > 1:
            _check_sources(cg)
        compile(launcher_source(cg), "<launcher>", "exec")


def test_online_softmax_advances_once_per_vector():
    """The multi-pass variant's fused max / sum: one ``gf_online_vec`` per whole vector (one exp
    per element and one per vector), the element-wise update (two exps) in the tail only."""
    for cg in (_group("softmax"), _loss_forward()):
        V = max(v[2].vector for v in cg.variants)
        (src,) = [s for s, v in zip(cg.variant_sources, cg.variants) if v[0].endswith(f"_mp_v{V}_i32")]
        body = src.split("__global__")[1]
        loop, tail = body.split("const int gf_lanes")[0], body.split("const int gf_lanes")[1]
        assert f"gf_online_vec<{V}>(acc" in loop and "o0 == acc" not in loop
        assert "gf_online_vec" not in tail and "o0 == acc" in tail


# -- the launcher's choice, run as Python --------------------------------------------------------
from test_reduction_grid import SMS, _Fn  # noqa: E402 (the launcher tests' variant stand-in)


def _choose(cg: ReductionGroup, rows: int, n: int, row_stride: int, aligned: bool = True) -> str:
    """The tag of the variant the launcher takes for ``rows`` rows of ``n`` elements ``row_stride``
    apart (each tensor of the row layout; the others dense)."""
    k = cg.kernel
    assert k.n_dims == 2
    ptrs = [0 if aligned else 2] * len(k.tensors)
    strides = [row_stride if k.tensors[p].dim_kinds[r] == "strided" and r == 0 else 1 for p, r in stride_args(k)]
    a = tuple(ptrs) + (rows, n) + tuple(strides)
    ns = {"rows": rows, "nr": n, "n0": rows, "n1": n, "a": a, "_sms": SMS,
          "_fns": [_Fn(i) for i in range(len(cg.variants))], "_load": None,
          "_scratch": lambda *x: (0, 0, None), "_stream": lambda i: None, "_devidx": 0}
    exec("\n".join(cuda_choice(cg, len(a))), ns)
    return cg.variants[ns["f"].i][2].tag


def test_gpt2_loss_rows_take_the_vector_variant():
    """[4096, 50257] bf16 logits 50304 apart: the vector multi-pass variant (it had run the scalar
    one, 2-byte loads); an odd row stride leaves every row start misaligned: the scalar one."""
    cg = _loss_forward()
    V = max(v[2].vector for v in cg.variants)
    assert V == 4             # (the label column compares an int32 index: 16-byte int32 vectors)
    assert _choose(cg, 4096, 50257, 50304) == f"mp_v{V}"
    assert _choose(cg, 4096, 50257, 50257) == "mp_v1"
    assert _choose(cg, 4096, 50257, 50304, aligned=False) == "mp_v1"
    assert _choose(cg, 4, 50257, 50304) == f"split_v{V}"       # few rows: split across blocks
    assert _choose(cg, 4, 50257, 50257) == "split_v1"


@pytest.mark.parametrize("name", ["softmax", "layer_norm", "sum"])
def test_persistent_vector_variants_take_whole_rows_only(name):
    """Rows a multiple of V long take the variants they took; others, aligned, the vector
    multi-pass / split ones where the scalar persistent ones cannot hold the row (more than
    2048 elements), else the scalar persistent ones."""
    cg = _group(name)
    V = max(v[2].vector for v in cg.variants)
    launcher = "\n".join(cuda_choice(cg, 0))
    assert f"whole = n1 % {V} == 0" in launcher and "vec = vec and (whole or nr > 2048)" in launcher
    for r in range(V):
        n = 4096 + r
        tag = _choose(cg, 1000, n, n + (-n) % 8)
        if r == 0:
            assert tag.startswith("p") and tag.endswith(f"_v{V}"), tag
        else:
            assert tag == f"mp_v{V}", (n, tag)
    for n in (1, 3, 9, 1001, 2047):
        tag = _choose(cg, 1000, n, n + (-n) % 8)
        assert tag.endswith("_v1") and tag.startswith("p"), (n, tag)
    assert _choose(cg, 1000, 2049, 2056) == f"mp_v{V}"
    assert _choose(cg, 1000, 4097, 4097) == "mp_v1"         # odd row stride: misaligned rows


def test_random_draws_keep_whole_rows():
    """Kernels drawing random numbers share one Philox block among four lanes whose first linear
    index is a multiple of 4: their vectors keep rows a multiple of V long."""
    def drop_softmax(x):
        return F.dropout(torch.softmax(x * 1.0, -1), 0.1, True)

    (cg,) = [cg for cg in _scripted_groups(drop_softmax, make_input(6, 40)) if cg.kernel.kind == "inner"]
    assert not any(cg.ragged)
    V = max(v[2].vector for v in cg.variants)
    assert f"vec = n1 % {V} == 0 and " in "\n".join(cuda_choice(cg, 0))


def test_vectors_over_two_reduced_roots_keep_whole_rows():
    """A sum over two reduced dims that do not merge (a view's last dim): a vector walks the
    merged index, so a last dim that is no multiple of V would put one vector on two rows."""
    def sum_two(x):
        return (x * 1.0).sum([1, 2])

    x = make_input(4, 5, 16)[:, :, :8]
    (cg,) = [cg for cg in _scripted_groups(sum_two, x) if cg.kernel.kind == "inner"]
    assert len(cg.kernel.red_roots) == 2 and not any(cg.ragged)
    V = max(v[2].vector for v in cg.variants)
    assert f"vec = n2 % {V} == 0 and " in "\n".join(cuda_choice(cg, 0))


# -- against eager ----------------------------------------------------------------------------------
LENGTHS = [1, 3, 7, 9, 4097, 50257]
TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.bfloat16: dict(rtol=4e-2, atol=4e-2),
       torch.float16: dict(rtol=1e-2, atol=1e-2)}
CUDA = pytest.param("cuda", marks=pytest.mark.cuda, id="cuda")


def rows(r: int, n: int, dtype: torch.dtype, layout: str, device: str) -> torch.Tensor:
    """``r`` rows of ``n`` elements, contiguous or (``padded``) a view of a buffer whose rows are a
    multiple of 8 elements wide; row 0 ends in NaN, row 1 in +inf, row 2 holds -inf (last
    element included), row 3 is constant, row 4 all -inf (rows past ``r`` left out)."""
    width = n if layout == "contiguous" else (n + 7) // 8 * 8 + 8
    g = torch.Generator().manual_seed(n * 7 + r)
    buf = torch.randn(r, width, generator=g, dtype=torch.float64) * 3
    x = buf[:, :n]
    special = [(0, -1, float("nan")), (1, -1, float("inf")), (2, -1, -float("inf")), (2, 0, -float("inf"))]
    for i, j, v in special:
        if i < r:
            x[i, j] = v
    if r > 3:
        x[3] = 0.75
    if r > 4:
        x[4] = -float("inf")
    return buf.to(dtype).to(device)[:, :n]


def _fn_args(fn, x):
    if fn is layer_norm:
        n = x.shape[-1]
        g = torch.Generator().manual_seed(n)
        w = (torch.rand(n, generator=g) + 0.5).to(x.dtype).to(x.device)
        b = torch.randn(n, generator=g).to(x.dtype).to(x.device)
        return (x, w, b)
    return (x,)


FNS = [softmax, log_softmax, layer_norm, sum_last, amax_last, var_last]


def _run(fn, n: int, dtype: torch.dtype, layout: str, device: str, r: int) -> None:
    x = rows(r, n, dtype, layout, device)
    # (a last dim of 1 profiles as a broadcast dim: no reduction to fuse, eager's values all the same)
    check(fn, *_fn_args(fn, x), fused=True if n > 1 else None, **TOL[dtype])


@pytest.mark.parametrize("layout", ["padded", "contiguous"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("fn", FNS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("device", [CUDA])
def test_rows_of_any_length_match_eager(fn, n, dtype, layout, device):
    _run(fn, n, dtype, layout, device, 40 if n > 9 else 300)


@pytest.mark.parametrize("fn", FNS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("device", ["cpu", CUDA])
def test_rows_of_any_length_match_eager_smoke(fn, device):
    _run(fn, 4097, torch.bfloat16, "padded", device, 7)
    _run(fn, 9, torch.float32, "padded", device, 6)


@pytest.mark.parametrize("fn", [softmax, layer_norm, sum_last, amax_last], ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("rows_, n", [(6, 50257), (300, 50257), (3, 200003)])
@pytest.mark.parametrize("device", [CUDA])
def test_long_rows_split_and_multipass(fn, dtype, rows_, n, device):
    """Few long rows split across blocks (with grid barriers for the several-pass kernels), many
    take the multi-pass variant; both with a partial last vector."""
    _run(fn, n, dtype, "padded", device, rows_)


@pytest.mark.parametrize("r", range(8))
@pytest.mark.parametrize("fn", [softmax, log_softmax, layer_norm, sum_last], ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("device", [CUDA])
def test_every_partial_vector_width(fn, dtype, r, device):
    """Rows of 4096 + r elements: a partial last vector of each width (V = 4 or 8)."""
    _run(fn, 4096 + r, dtype, "padded", device, 20)


def loss_rows(r: int, n: int, dtype: torch.dtype, layout: str, specials: bool) -> tuple:
    """(buffer, labels) of a loss case on the CPU: ``r`` rows of ``n`` logits (the buffer's first
    ``n`` columns), some rows ignored; row 2 holds -inf (first and last logit), row 3 a ramp,
    row 4 -inf but its label's logit; with ``specials`` rows 0 and 1 end in NaN and +inf."""
    width = n if layout == "contiguous" else (n + 7) // 8 * 8 + 8
    g = torch.Generator().manual_seed(n * 5 + r)
    buf = torch.randn(r, width, generator=g, dtype=torch.float64) * 3
    y = torch.randint(0, n, (r,), generator=g)
    y[5::4] = -100
    x = buf[:, :n]
    if n >= 3 and r > 4:
        x[2, 0] = x[2, -1] = -float("inf")
        y[2] = n // 2
        x[3] = torch.linspace(-5, 5, n, dtype=torch.float64)
        x[4] = -float("inf")
        y[4] = n // 3
        x[4, n // 3] = 0.5
    if specials and r > 1:
        x[0, -1], x[1, -1] = float("nan"), float("inf")
    return buf.to(dtype), y


@pytest.mark.parametrize("layout", ["padded", "contiguous"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("r, n", [(64, 1), (64, 3), (64, 7), (64, 9), (64, 4097), (256, 50257), (4, 50257)])
@pytest.mark.parametrize("fn", [hf_loss, hf_loss_rows], ids=["mean", "none"])
@pytest.mark.parametrize("device", [CUDA])
def test_cross_entropy_matches_eager(fn, dtype, r, n, layout, device):
    """The loss as Hugging Face writes it (float32 logits, ignore_index=-100, some labels ignored)
    and its gradient, through the Dynamo frontend, with the fallback raising."""
    _loss_case(fn, dtype, r, n, layout, device)


@pytest.mark.parametrize("device", ["cpu", CUDA])
def test_cross_entropy_matches_eager_smoke(device):
    _loss_case(hf_loss_rows, torch.bfloat16, 12, 4097, "padded", device)


def _loss_case(fn, dtype, r, n, layout, device):
    torch._dynamo.reset()
    c = torch.compile(fn, backend=graphfuser_backend)
    buf0, y = loss_rows(r, n, dtype, layout, specials=fn is hf_loss_rows)
    y = y.to(device)
    tol = dict(TOL[dtype], equal_nan=True)
    with config.override(disable=["fallback"]):
        for _ in range(4):
            buf = buf0.to(device).requires_grad_()
            ref_buf = buf0.to(device).requires_grad_()
            got = c(buf[:, :n], y)
            ref = fn(ref_buf[:, :n], y)
            torch.testing.assert_close(got, ref, **tol)
            gl = torch.ones_like(ref) if ref.dim() == 0 else \
                torch.rand(ref.shape, generator=torch.Generator().manual_seed(r)).to(device)
            got.backward(gl)
            ref.backward(gl)
            torch.testing.assert_close(buf.grad, ref_buf.grad, **tol)
    if n > 1:
        graph = graphfuser.last_executed_optimized_graph()
        assert fusion_groups(graph), str(graph)
