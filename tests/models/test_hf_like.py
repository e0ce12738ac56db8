"""GPT-2-, BERT- and Llama-like models through ``torch.compile(backend=graphfuser)`` on the CPU:
inference at two shapes and training gradients against eager, with fusion groups."""
from __future__ import annotations

import copy
import re

import pytest
import torch

import graphfuser
from graphfuser.frontend.dynamo import graphfuser_backend
from graphfuser.runtime import cache

from hf_like import MODELS, Config, inputs


# one layer: a second one adds Dynamo tracing time (the CI budget), not coverage
SMALL = Config(layers=1)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def first(out):
    return out[0] if isinstance(out, tuple) else out


def groups(g) -> int:
    return len(set(re.findall(r"prim::CpuFusionGroup_(\d+)", str(g)))) if g is not None else 0


@pytest.mark.parametrize("name", list(MODELS))
def test_inference_at_two_shapes(name):
    torch.manual_seed(0)
    m = MODELS[name](SMALL).eval()
    backend_calls = []

    def backend(gm, example_inputs, **kw):
        backend_calls.append(gm)
        return graphfuser_backend(gm, example_inputs, **kw)

    c = torch.compile(m, backend=backend)
    with torch.no_grad():
        for batch, seq in ((2, 8), (3, 13)):
            ids, mask = inputs(batch, seq)
            for _ in range(4):                   # profiling (the attention rewrite adds one call), then fused
                torch.testing.assert_close(c(ids, mask), m(ids, mask))
            assert groups(graphfuser.last_executed_optimized_graph()) >= 3
            if name == "llama" and batch == 2:
                # the first shape's graph has fixed sizes: its rotary embeddings lose their cat
                # (passes/rotary.py); the later shapes' graph has symbolic ones and keeps it
                g = str(graphfuser.last_executed_optimized_graph()).split("\nwith ")[0]
                assert g.count("aten::unflatten(") >= 6 and g.count("aten::cat(") <= 1, g
        compiles, graphs = cache.STATS["compiles"], len(backend_calls)
        ids, mask = inputs(4, 21)                # a third shape: no new graph, no new kernel
        for _ in range(3):
            torch.testing.assert_close(c(ids, mask), m(ids, mask))
    assert (cache.STATS["compiles"], len(backend_calls)) == (compiles, graphs)


@pytest.mark.parametrize("name", list(MODELS))
def test_training_gradients(name):
    torch.manual_seed(0)
    m = MODELS[name](Config(layers=1, dropout=0.0)).train()
    ref = copy.deepcopy(m)
    c = torch.compile(m, backend=graphfuser_backend)
    for step in range(5):        # profiling (an attention rewrite adds one call), then fused
        ids, mask = inputs(2, 8, seed=step)
        out = first(c(ids, mask))
        g = str(graphfuser.last_executed_optimized_graph())     # the forward's (before backward runs)
        expected = first(ref(ids, mask))
        torch.testing.assert_close(out, expected)
        out.float().pow(2).mean().backward()
        expected.float().pow(2).mean().backward()
        for (pname, p), q in zip(m.named_parameters(), ref.parameters()):
            assert (p.grad is None) == (q.grad is None), pname
            if p.grad is not None:
                torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6, msg=pname)
        m.zero_grad(set_to_none=True)
        ref.zero_grad(set_to_none=True)
    assert groups(g) >= 3 and "prim::DifferentiableGraph" in g
    # the backward graphs are fused too (the last graph run is a backward graph: counting its
    # groups alone once made a tool report one group for a training step)
    from graphfuser.autodiff import function as adf
    from graphfuser.executor.fusion import live_fusion_groups
    backward = sum(sum(1 for n in dg.backward._optimized.all_nodes() if n.kind.endswith("FusionGroup"))
                   for dg in adf.live_groups() if dg.backward._optimized is not None)
    assert backward >= 1
    assert live_fusion_groups() > groups(str(graphfuser.last_executed_optimized_graph()))


@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_training_with_dropout_takes_column_sums_beside_the_masks(name):
    """With dropout on, the layer-norm backwards after a residual dropout redraw its mask; their weight and
    bias gradients are column sums of those row kernels (passes/column_sums.py). The same steps
    with the merge off (the same seeds draw the same masks) give the same gradients."""
    from graphfuser.autodiff import function as adf
    from graphfuser.codegen.reduction.lower import lower_reduction_group
    from graphfuser.config import config
    from graphfuser.ops.axes import needs_axes

    def grads(disable):
        torch._dynamo.reset()
        earlier = {id(dg) for dg in adf.live_groups()}
        torch.manual_seed(0)
        m = MODELS[name](Config(layers=1, dropout=0.2)).train()
        c = torch.compile(m, backend=graphfuser_backend)
        out = []
        with config.override(disable=disable):
            for step in range(5):
                ids, mask = inputs(2, 8, seed=step)
                torch.manual_seed(100 + step)
                first(c(ids, mask)).float().pow(2).mean().backward()
                out.append([p.grad.clone() for p in m.parameters() if p.grad is not None])
                m.zero_grad(set_to_none=True)
        merged = 0
        for dg in adf.live_groups():
            if id(dg) in earlier or dg.backward._optimized is None:
                continue
            for n in dg.backward._optimized.all_nodes():
                if n.kind.endswith("FusionGroup") and needs_axes(n.subgraph.block.nodes):
                    k, _ = lower_reduction_group(n.subgraph)
                    merged += k.has_random() and k.has_columns()
        return out, merged

    got, merged = grads([])
    want, unmerged = grads(["column_sums"])
    assert merged >= 1 and unmerged == 0, (merged, unmerged)
    for a, b in zip(got, want):
        for x, y in zip(a, b):
            torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6)
