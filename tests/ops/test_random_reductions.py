"""Random rows inside reduction kernels (softmax + mask + dropout, a layer norm of a dropout
residual) and the fused_rng knob: the numbers are those the fallback's torch implementation
(``ops/philox.py``) draws for the same (seed, offset), as in test_random.py."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.config import config
from graphfuser.ops.philox import philox_state, philox_words
from graphfuser.ops.random import dropout_mask

from tests.helpers import DEVICES, fusion_groups, make_input
from tests.ops.test_random import _scripted, _state


# -- random rows in reduction kernels, the fused_rng knob ----------------------------------------
def _softmax_mask_dropout(x, m):
    return F.dropout(F.softmax(x.masked_fill(m, float("-inf")), dim=-1), 0.2, True)


def _softmax_mid_dropout(x, m):
    return F.dropout(F.softmax(x.masked_fill(m, float("-inf")), dim=1), 0.3, True) * 2.0


def _train_softmax_dropout(fn, x, m, seed: int, device: str):
    """Script ``fn``, run it past profiling with the fallback disabled, then one seeded call:
    (scripted function, output, upstream gradient, the reference output and input gradient drawn
    from the same mask through torch ops)."""
    sf = graphfuser.script(fn)
    # (added to the knobs the caller set, not in their place; no training CUDA graphs: its capture
    # feeds the backward dense incoming gradients where `.sum()` gave expanded ones, and the
    # backward's second specialization is what this test would then count)
    with config.override(disable=[*config.disable, "fallback", "cuda_graphs_training"]):
        for _ in range(4):
            sf(x, m).float().sum().backward()
        x.grad = None
        torch.manual_seed(seed)
        out = sf(x, m)
        g = torch.randn_like(out)
        out.backward(g)
    seed_, off = _state(x, seed)
    keep = dropout_mask(x, 0.2 if fn is _softmax_mask_dropout else 0.3, seed_, off)
    x2 = x.detach().clone().requires_grad_(True)
    dim = -1 if fn is _softmax_mask_dropout else 1
    p = 0.2 if fn is _softmax_mask_dropout else 0.3
    ct = torch.float64 if x.dtype == torch.float64 else torch.float32
    ref = F.softmax(x2.to(ct).masked_fill(m, float("-inf")), dim=dim) * keep / (1 - p)
    if fn is _softmax_mid_dropout:
        ref = ref * 2.0
    ref.backward(g.to(ct))
    return sf, out, ref.to(x.dtype), x2.grad.to(x.dtype)


# pairwise over (softmax dim, dtype, layout): each pair of values in some case (the full product
# took 97 s of the CPU suite's time; float64: the other random tests)
@pytest.mark.parametrize("fn, dtype, layout",
                         [(_softmax_mid_dropout, torch.bfloat16, "dense"), (_softmax_mid_dropout, torch.float32, "transposed"),
                          (_softmax_mask_dropout, torch.bfloat16, "transposed"), (_softmax_mask_dropout, torch.float32, "dense")],
                         ids=["middle-bf16-dense", "middle-f32-transposed", "last-bf16-transposed", "last-f32-dense"])
def test_softmax_mask_dropout_one_kernel_each_way(fn, dtype, layout, monkeypatch):
    """The training benchmark's softmax + mask + dropout: the dropout fuses into the softmax
    kernel (its numbers keyed on the row-major index whatever the loop order), the backward is
    one kernel that regenerates the mask, nothing is saved but the inputs, and no Philox draw
    runs through the torch-op reference after profiling. The CUDA kernels compile."""
    import graphfuser.ops.philox as philox
    from graphfuser.tools.zoo_train import fused_groups
    from tests.autodiff.grad_helpers import compile_as_cuda, differentiable_groups

    torch.manual_seed(0)
    x = make_input(3, 6, 37, dtype=dtype, layout=layout).requires_grad_(True)
    m = torch.rand(6, 37) > 0.8
    draws = {"n": 0}
    words = philox.philox_words

    def counting(*a, **k):
        draws["n"] += 1
        return words(*a, **k)

    sf = graphfuser.script(fn)
    for _ in range(4):
        sf(x, m).float().sum().backward()
    monkeypatch.setattr(philox, "philox_words", counting)
    sf(x, m).float().sum().backward()
    assert draws["n"] == 0
    monkeypatch.setattr(philox, "philox_words", words)
    assert fused_groups(sf) == (1, 1)
    sf, out, ref, gref = _train_softmax_dropout(fn, x, m, 7, "cpu")
    tol = dict(rtol=3e-2, atol=3e-2) if dtype == torch.bfloat16 else {}
    torch.testing.assert_close(out, ref, **tol)
    torch.testing.assert_close(x.grad, gref, **tol)
    (dg,) = differentiable_groups(sf)
    # the backward reads the group's inputs and the gradient only: no saved intermediate, no mask
    ins = {v.name for v in dg.group.subgraph.inputs}
    assert all(v.name in ins or v.name.startswith("grad") for v in dg.plan.graph.inputs), str(dg.plan.graph)
    subs = [n.subgraph for n in sf._optimized.all_nodes() if n.kind.endswith("FusionGroup")]
    subs += [n.subgraph for n in dg.backward._optimized.all_nodes() if n.kind.endswith("FusionGroup")]
    ok, why = __import__("graphfuser.runtime.nvrtc", fromlist=["available"]).available()
    if ok:
        compile_as_cuda(subs, f"smd_{layout}")


def test_random_rows_need_their_output_to_walk_every_axis():
    """A dropout of a reduction's (narrow) result does not join the reduction kernel: its numbers
    are keyed on its own output's index, which does not walk the reduced axis."""
    def fn(x):
        return F.dropout(x.sum(-1, keepdim=True), 0.5, True) * x

    import warnings

    x = torch.randn(8, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # no group fails to compile and falls back
        sf, counts = _scripted(fn, x)
        sf(x)
    assert counts["fallback"] == 0
    groups = fusion_groups(sf._optimized)
    assert not any("aten::sum" in str(g.subgraph) and "graphfuser::dropout" in str(g.subgraph) for g in groups)


def test_dce_drops_unused_random_rows_but_not_the_generator_advance():
    """A random row's draws depend only on its (seed, offset) inputs: an unused one is dead (the
    backward's recomputed forward dropout was, and ran through the torch-op reference);
    ``philox_state`` advances torch's generator and stays."""
    from graphfuser.ir import parse_graph
    from graphfuser.passes.dce import dce
    from tests.helpers import FT

    g = parse_graph(f"""graph(%x : {FT(4, 8)}):
  %s : int, %o : int = graphfuser::philox_state(%x)
  %p : float = prim::Constant[value=0.5]()
  %y : {FT(4, 8)} = graphfuser::dropout(%x, %p, %s, %o)
  %z : {FT(4, 8)} = aten::relu(%x)
  return (%z)""")
    dce(g)
    text = str(g)
    assert "graphfuser::dropout" not in text and "graphfuser::philox_state" in text


def test_fused_rng_knob_keeps_eager_dropout():
    """``PYTORCH_NVFUSER_DISABLE=fused_rng``: random ops stay eager's (its generator, unfused)."""
    def fn(x):
        return F.dropout(x + 1.0, 0.5, True)

    x = torch.ones(64, 64)
    with config.override(disable=["fused_rng"]):
        sf = graphfuser.script(fn)
        for _ in range(4):
            out = sf(x)
    assert "graphfuser::" not in str(sf._optimized) and "aten::dropout" in str(sf._optimized)
    assert set(out.unique().tolist()) <= {0.0, 4.0}
    sf = graphfuser.script(fn)
    for _ in range(4):
        sf(x)
    assert "graphfuser::dropout" in str(sf._optimized)


@pytest.mark.cuda
@pytest.mark.parametrize("fn", [_softmax_mask_dropout, _softmax_mid_dropout], ids=["last", "middle"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_cuda_softmax_mask_dropout_fused(fn, dtype, monkeypatch):
    """On the GPU: the dropout inside the softmax kernel (persistent, multi-pass and vectorized
    variants, with and without unroll_with_rng) draws the reference numbers; gradients match."""
    import graphfuser.executor.compiled as compiled
    from graphfuser.tools.zoo_train import fused_groups

    for rows in (37, 512, 1030, 5000):     # register-persistent (scalar, vector), wider and multi-pass rows
        for disable in ([], ["unroll_with_rng"]):
            monkeypatch.setattr(compiled, "_MEMORY", {})
            torch.manual_seed(0)
            x = torch.randn(3, 6, rows, device="cuda", dtype=dtype, requires_grad=True)
            m = torch.rand(6, rows, device="cuda") > 0.8
            with config.override(disable=disable):
                sf, out, ref, gref = _train_softmax_dropout(fn, x, m, 9, "cuda")
                assert fused_groups(sf) == (1, 1)
            tol = dict(rtol=3e-2, atol=3e-2) if dtype == torch.bfloat16 else dict(rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(out, ref, **tol)
            torch.testing.assert_close(x.grad, gref, **tol)


# -- random numbers under a normalization's shift ---------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("layout", ["dense", "transposed"])
def test_layer_norm_of_a_dropout_residual(device, dtype, layout):
    """``layer_norm(r + dropout(x))`` in one kernel: the statistics' shift (the row's "first"
    value) holds a random number; it must be one value per row, not each element's own draw
    (it was: the mean and variance came out wrong). Forward and backward against the reference
    mask, with a large mean so that the shift matters."""
    def fn(x, r, w, b):
        y = r + F.dropout(x, 0.3, True)
        return y, F.layer_norm(y, [x.shape[-1]], w, b)

    x = (make_input(6, 5, 40, dtype=torch.float32, layout=layout, device=device) + 300.0).to(dtype)
    x.requires_grad_()
    r = torch.randn(6, 5, 40, dtype=dtype, device=device)
    w = torch.randn(40, dtype=dtype, device=device, requires_grad=True)
    b = torch.randn(40, dtype=dtype, device=device, requires_grad=True)
    sf = graphfuser.script(fn)
    for _ in range(4):
        sum(o.float().sum() for o in sf(x, r, w, b)).backward()
    torch.manual_seed(5)
    y, out = sf(x, r, w, b)
    g = torch.randn_like(out)
    grads = torch.autograd.grad(out, [x, w, b], g)
    seed, off = _state(x, 5)
    keep = dropout_mask(x, 0.3, seed, off)
    x2 = x.detach().double().requires_grad_()
    w2, b2 = w.detach().double().requires_grad_(), b.detach().double().requires_grad_()
    y2 = r.double() + x2 * keep / 0.7
    out2 = F.layer_norm(y2, [40], w2, b2)
    want = torch.autograd.grad(out2, [x2, w2, b2], g.double())
    tol = {torch.bfloat16: dict(rtol=5e-2, atol=1e-1)}.get(dtype, dict(rtol=1e-4, atol=1e-4))
    torch.testing.assert_close(y.double(), y2, **tol)
    torch.testing.assert_close(out.double(), out2, **tol)
    for got, ref in zip(grads, want):
        torch.testing.assert_close(got.double(), ref, **tol)
    groups = fusion_groups(sf._optimized)
    assert any("graphfuser::dropout" in str(gr.subgraph) and "aten::layer_norm" in str(gr.subgraph)
               for gr in groups), str(sf._optimized)
    # the weight and bias gradients are column sums of the backward kernel that redraws the mask
    # (passes/column_sums.py); on the CPU, one kernel each way
    from tests.autodiff.column_cases import backward_groups, column_kernels
    # (a backward specialization per pattern of incoming gradients: the call above gave none to y)
    assert any(k.has_random() and sum(t.partials for t in k.tensors) == 2 for k in column_kernels(sf))
    if device == "cpu":
        assert backward_groups(sf) == 1
    from graphfuser.runtime import nvrtc
    if device == "cpu" and layout == "dense" and nvrtc.available()[0]:
        # its CUDA rendering (each variant, the random draws beside the column partials) compiles
        from graphfuser.autodiff.function import DifferentiableGroup
        from tests.autodiff.grad_helpers import compile_as_cuda
        subs = [n.subgraph for r in sf._runners.values() if isinstance(r, DifferentiableGroup)
                for n in r.backward._optimized.all_nodes() if n.kind.endswith("FusionGroup")]
        compile_as_cuda(subs, "dropout_ln_cols")
