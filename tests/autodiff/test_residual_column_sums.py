"""A transformer block's layer-norm backward takes the residual's gradient with it: the row kernel
that computes the input gradient from the saved statistics also adds the residual stream's
gradient and sums it over the rows for the projection's bias (``passes/column_sums.py``: a
column group that reads a full-size tensor the row group does not, and an autocast bias
gradient's ``sum -> to(bf16) -> to(float32)`` whose second cast runs after the kernel).

Before, the weight-gradient chain was recomputed in a column kernel of its own beside the bias
sum, which also took the tail of the input gradient (two full-size intermediates written by the
row kernel and read back): three kernels a layer norm where one does."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

import graphfuser
from graphfuser.autodiff.function import DifferentiableGroup
from graphfuser.config import config
from graphfuser.frontend.dynamo import graphfuser_backend


class Block(nn.Module):
    """timm's pre-norm block with the attention replaced by one projection."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.proj, self.fc1, self.fc2 = nn.Linear(c, c), nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.proj(self.n1(x))
        return x + self.fc2(nn.functional.gelu(self.fc1(self.n2(x))))


class Stack(nn.Module):
    def __init__(self, c: int = 48, depth: int = 3) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*[Block(c) for _ in range(depth)])
        self.norm = nn.LayerNorm(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.blocks(x))


def _train(model, x_of, autocast, steps=5, compiled=True):
    """Gradients after ``steps`` backward passes of ``sum(y^2)``, and the compiled functions."""
    fns = []

    def backend(gm, ex, **kw):
        fns.append(graphfuser_backend(gm, ex, **kw))
        return fns[-1]

    fn = torch.compile(model, backend=backend) if compiled else model
    for i in range(steps):
        model.zero_grad()
        with torch.autocast("cpu", torch.bfloat16, enabled=autocast):
            y = fn(x_of(i))
        y.float().square().sum().backward()
    return [p.grad.clone() for p in model.parameters()], fns


def _backward_groups(fns, subgraphs=False) -> list:
    """The op names of every backward fusion group of the compiled functions (or the groups'
    subgraphs)."""
    out = []
    for fn in fns:
        for sf in [fn] + list((fn._variants or {}).values()):
            for r in sf._runners.values():
                if isinstance(r, DifferentiableGroup) and r.backward._optimized is not None:
                    for n in r.backward._optimized.all_nodes():
                        if n.kind.endswith("FusionGroup") and subgraphs:
                            out.append(n.subgraph)
                        elif n.kind.endswith("FusionGroup"):
                            out.append([k.kind for k in n.subgraph.block.nodes if k.kind != "prim::Constant"])
    return out


def _inputs(dtype, n=4, t=37, c=48):
    g = torch.Generator().manual_seed(3)
    xs = [torch.randn(n, t, c, generator=g, dtype=dtype) * 3 + 5 for _ in range(5)]
    return lambda i: xs[i % len(xs)]


@pytest.fixture
def cuda_decisions(monkeypatch):
    """The rewrites made for CUDA devices, made on the CPU: a Linear's bias add joins its
    producer's group and its gradient is a sum in the backward (``passes/bias.py``)."""
    from graphfuser.fuzz.worker import take_cuda_decisions_on_the_cpu
    from graphfuser.passes import bias, row_layout, sdpa_bias, sdpa_math

    for mod, name in ((bias, "ROUTE_DEVICES"), (bias, "HALF_CONV_DEVICES"), (row_layout, "DEVICES"),
                      (sdpa_math, "DEVICES"), (sdpa_bias, "DEVICES")):
        monkeypatch.setattr(mod, name, getattr(mod, name))
    take_cuda_decisions_on_the_cpu()


def _rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


@pytest.mark.parametrize("statistics", [True, False], ids=["saved_statistics", "rebuilt_statistics"])
def test_one_kernel_per_layer_norm_backward_under_autocast(statistics, cuda_decisions):
    torch.manual_seed(0)
    model = Stack()
    ref = copy.deepcopy(model).double()
    truth, _ = _train(ref, lambda i: _inputs(torch.float64)(i), autocast=False, compiled=False)
    eager, _ = _train(copy.deepcopy(model), _inputs(torch.float32), autocast=True, compiled=False)
    with config.override(disable=[] if statistics else ["layer_norm_statistics"]):
        got, fns = _train(model, _inputs(torch.float32), autocast=True)
    groups = _backward_groups(fns)
    # column kernels left alone: fc1's bias gradients through the GELU (no row group there) and
    # (with saved statistics) the first layer norm's weight and bias gradients: its input needs
    # no gradient, so no row kernel computes one
    alone = [g for g in groups if "aten::mean" not in g and any(k in ("aten::sum", "aten::sum_to_size") for k in g)]
    assert len(alone) == 3 + statistics, [" ".join(k.split("::")[1] for k in g) for g in alone]
    assert sum(1 for g in alone if "aten::gelu" in g) == 3
    # every other layer norm's row kernel sums the residual's gradient for the projection's bias
    rows = [g for g in groups if "aten::mean" in g]
    # (rebuilt statistics: the first layer norm's weight gradient in a row kernel of its own)
    assert len(rows) == 6 + (not statistics) and sum(1 for g in rows if "aten::sum" in g) == 6
    if statistics:
        # the merged row kernels' CUDA renderings compile
        from grad_helpers import compile_as_cuda

        from graphfuser.executor.compiled_reduction import ReductionGroup, finalized_dtypes, launcher_source
        from graphfuser.ir import parse_graph, print_graph

        subs = [g for g in _backward_groups(fns, True) if "aten::mean" in str(g)]
        compile_as_cuda(subs, "residual_rows")
        # one launch finalizes the float32 weight and bias gradients and the bf16 bias gradient
        cg = ReductionGroup(parse_graph(print_graph(subs[1]).replace("device=cpu", "device=cuda:0")), "cuda",
                            torch.device("cuda:0"), "k")
        src = launcher_source(cg)
        assert src.count("_colsum.launch(") == 1 and ".sum(" not in src and "_zeros" not in src
        from graphfuser.executor.compiled_reduction import column_outputs

        assert sorted(map(str, finalized_dtypes(cg, column_outputs(cg)))) == \
            ["torch.bfloat16", "torch.float32", "torch.float32"]
    for a, b, t in zip(got, eager, truth):
        # autocast's own rounding: no further from float64's gradients than eager's, to a margin
        assert _rel(a, t) <= 1.25 * _rel(b, t) + 1e-3


def test_float64_gradients_match_eager(cuda_decisions):
    torch.manual_seed(1)
    model = Stack().double()
    eager, _ = _train(copy.deepcopy(model), _inputs(torch.float64), autocast=False, compiled=False)
    got, fns = _train(model, _inputs(torch.float64), autocast=False)
    assert _backward_groups(fns)
    for a, b in zip(got, eager):
        assert _rel(a, b) < 1e-9


def _norm_and_recast(x, g0, w, b):
    r = g0 + torch.nn.functional.layer_norm(x, [x.shape[-1]], w, b)
    return r, r.sum((0, 1)).to(torch.bfloat16).to(torch.float32)


def test_recast_column_sum_keeps_the_rounding():
    """``sum -> to(bf16) -> to(float32)`` joins the row kernel; the bf16 rounding stays."""
    g = torch.Generator().manual_seed(5)
    x, g0 = torch.randn(6, 9, 40, generator=g), torch.randn(6, 9, 40, generator=g) * 100
    w, b = torch.randn(40, generator=g), torch.randn(40, generator=g)
    sf = graphfuser.script(_norm_and_recast)
    with config.override(disable=["fallback"]):
        for _ in range(3):
            r, s = sf(x, g0, w, b)
    er, es = _norm_and_recast(x, g0, w, b)
    torch.testing.assert_close(r, er)
    assert s.dtype == torch.float32
    assert torch.equal(s, s.to(torch.bfloat16).float())        # rounded to bf16
    torch.testing.assert_close(s, es, rtol=2 ** -8, atol=0)    # one bf16 ulp: the sum's order
    groups = [n for n in graphfuser.last_executed_optimized_graph().all_nodes() if n.kind.endswith("FusionGroup")]
    assert len(groups) == 1
    kinds = [k.kind for k in groups[0].subgraph.block.nodes]
    assert "aten::layer_norm" in kinds and "aten::sum" in kinds
