"""Kernels (fusion groups run) of the forward and backward of the training benchmark's cases on
the CPU (group counts do not depend on the device): the pointwise cases take one kernel each way,
and reductions' gradients stay narrow until a pointwise op broadcasts them (no full-size mask
tensor from an explicit broadcast between two groups)."""
from __future__ import annotations

import pytest
import torch

import graphfuser
from graphfuser.config import config
from graphfuser.tools import bench_train as bt
from graphfuser.tools.zoo_train import fused_groups

BF = torch.bfloat16


def _r(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype).requires_grad_(True)


CASES = {
    # name: (fn, args, autocast, (forward groups, most backward groups))
    "sig_tanh": (bt.sig_tanh, lambda: (_r(4096), _r(4096)), None, (1, 1)),
    "bias_gelu": (bt.bias_gelu, lambda: (_r(64, 128, dtype=BF), _r(128, dtype=BF)), None, (1, 1)),
    "swiglu": (bt.swiglu, lambda: (_r(64, 128, dtype=BF), _r(64, 128, dtype=BF)), None, (1, 1)),
    # one kernel: the row kernel (recomputed forward, the dot reduction, dx) accumulates the
    # weight's column sum of grad * y per block of rows
    "rmsnorm": (lambda: bt.RMSNorm(128), lambda: (_r(64, 128, dtype=BF),), None, (1, 1)),
    # dropout inside the softmax kernel; the backward regenerates the mask in its one kernel
    "softmax_mask_dropout": (bt.softmax_mask_dropout,
                             lambda: (_r(4, 16, 33, dtype=BF), torch.rand(16, 33) > 0.9), None, (1, 1)),
    # the layer norm with its cast to bf16, the training dropout (nn.Dropout's flag is a constant of
    # the specialization) with the residual add; the bf16 GELU between the Linears is one op under
    # grad (its cast to bf16 is the identity) and runs eagerly (on CUDA it joins fc1's bias gradient,
    # graphfuser::bias_grad: passes/bias.py, tests/passes/test_bias_gradients.py)
    "mlp_autocast": (lambda: bt.MLPBlock(64, 256).train(), lambda: (_r(32, 64),), BF, (2, 2)),
}


def _counts(name):
    fn, make, ac, _ = CASES[name]
    fn = fn() if name in ("rmsnorm", "mlp_autocast") else fn
    args = make()
    sf = graphfuser.script(fn)
    ctx = torch.autocast("cpu", dtype=ac) if ac else torch.autocast("cpu", enabled=False)
    for _ in range(5):
        with ctx:
            out = sf(*args)
        out.float().sum().backward()
    with ctx:
        return fused_groups(sf), sf


@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_and_backward_group_counts(name):
    (fwd, bwd), _ = _counts(name)
    want_fwd, most_bwd = CASES[name][3]
    assert fwd == want_fwd and 1 <= bwd <= most_bwd, (fwd, bwd)


def test_rmsnorm_backward_writes_no_full_size_intermediate():
    """The row kernel writes dx and rstd only: grad * y, the weight gradient's summand, is
    recomputed by the column kernel instead of going through memory."""
    _, sf = _counts("rmsnorm")
    from graphfuser.autodiff.function import DifferentiableGroup

    for r in sf._runners.values():
        if isinstance(r, DifferentiableGroup):
            g = r.backward._optimized
            groups = [n for n in g.all_nodes() if n.kind.endswith("FusionGroup")]
            full = [o for n in groups for o in n.subgraph.outputs if tuple(o.type.sizes) == (64, 128)]
            assert len(full) == 1 and full[0].type.dtype == BF, str(g)
            assert not [n for n in g.all_nodes() if n.kind == "aten::sum_to_size"], str(g)


def test_reduction_gradient_is_not_broadcast_through_memory():
    """RMSNorm's backward writes no bool mask (the old where(x == x, g, g) broadcast)."""
    _, sf = _counts("rmsnorm")
    from graphfuser.autodiff.function import DifferentiableGroup

    for r in sf._runners.values():
        if isinstance(r, DifferentiableGroup):
            g = r.backward._optimized
            outs = [o for n in g.all_nodes() if n.kind.endswith("FusionGroup") for o in n.subgraph.outputs]
            assert not any(getattr(o.type, "dtype", None) == torch.bool for o in outs), str(g)


def test_layer_norm_backward_writes_only_dx_full_size():
    """LayerNorm's backward is one kernel: the row kernel writes dx and accumulates the weight
    and bias gradients' column sums (grad * xhat, grad) per block of rows (passes/column_sums.py),
    instead of a second kernel re-reading x and grad or reading full-size products."""
    from graphfuser.autodiff.function import DifferentiableGroup

    ln = torch.nn.LayerNorm(128)
    x = _r(64, 128, dtype=torch.float32)
    sf = graphfuser.script(ln)
    gout = torch.randn(64, 128)
    # a lone layer norm under grad runs eagerly (passes/lone_groups.py: lone_under_grad); single-node mode fuses it
    with config.override(single_node_mode=True):
        for _ in range(5):
            ln.zero_grad()
            x.grad = None
            sf(x).backward(gout)
    got = [x.grad.clone(), ln.weight.grad.clone(), ln.bias.grad.clone()]
    x.grad = None
    ln.zero_grad()
    ln(x).backward(gout)
    for g, r in zip(got, [x.grad, ln.weight.grad, ln.bias.grad]):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-4)
    (dg,) = [r for r in sf._runners.values() if isinstance(r, DifferentiableGroup)]
    g = dg.backward._optimized
    groups = [n for n in g.all_nodes() if n.kind.endswith("FusionGroup")]
    full = [o for n in groups for o in n.subgraph.outputs if tuple(o.type.sizes) == (64, 128)]
    assert len(groups) == 1 and len(full) == 1, str(g)


class _LayerNorm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln = torch.nn.LayerNorm(16)

    def forward(self, x):
        return self.ln(x)


class _Softmax(_LayerNorm):
    def forward(self, x):
        return torch.softmax(x, -1)


class _LayerNormRelu(_LayerNorm):
    def forward(self, x):
        return self.ln(x).relu()


_NORMS = {"layer_norm": _LayerNorm, "softmax": _Softmax, "layer_norm_relu": _LayerNormRelu}


@pytest.mark.parametrize("op", ["layer_norm", "softmax", "layer_norm_relu"])
def test_lone_normalization_under_grad_runs_eagerly(op):
    """A normalization alone in its group under grad (eager: one kernel forward, one autograd node
    backward) is left to eager; without grad, or with a neighbour in its group, it still fuses.
    Gradients match eager either way."""
    from graphfuser.autodiff.function import DifferentiableGroup

    m = _NORMS[op]()
    sf = graphfuser.script(m)
    x = _r(8, 16, dtype=torch.float32)
    gout = torch.randn(8, 16)
    for _ in range(4):
        m.zero_grad()
        x.grad = None
        sf(x).backward(gout)
    got = [x.grad.clone()] + [p.grad.clone() for p in m.parameters() if p.grad is not None]
    x.grad = None
    m.zero_grad()
    m(x).backward(gout)
    ref = [x.grad] + [p.grad for p in m.parameters() if p.grad is not None]
    assert len(got) == len(ref)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    groups = [r for r in sf._runners.values() if isinstance(r, DifferentiableGroup)]
    assert len(groups) == (1 if op == "layer_norm_relu" else 0)
    y = x.detach()
    with torch.no_grad():
        inf = graphfuser.script(_NORMS[op]())
        inf._module.load_state_dict(m.state_dict())
        for _ in range(3):
            out = inf(y)
        torch.testing.assert_close(out, m(y), rtol=1e-4, atol=1e-5)
        assert "FusionGroup" in str(inf.graph_for(y))


def test_one_op_with_identity_casts_runs_eagerly_under_grad(caplog):
    """A group of one op and casts to the dtype their input already has (autocast's casts around
    a bf16 GELU) computes what the op alone does: under grad it runs eagerly (one kernel and one
    C++ backward node either way); without grad, and with a real cast, it stays fused."""
    def gelu(x):
        return torch.nn.functional.gelu(x).to(torch.bfloat16)

    def gelu_f32(x):
        return torch.nn.functional.gelu(x).to(torch.float32)

    x = _r(64, 128, dtype=BF)
    sf = graphfuser.script(gelu)
    with config.override(log_level=">partition"):
        for _ in range(4):
            sf(x).float().sum().backward()
    assert fused_groups(sf) == (0, 0)
    log = "\n".join(r.getMessage() for r in caplog.records)
    assert "dropped single-node group aten::gelu" in log and "(and 1 identity casts / lists)" in log
    want = torch.autograd.grad(gelu(x).float().sum(), x)[0] * 4
    torch.testing.assert_close(x.grad, want)
    sn = graphfuser.script(gelu)
    with torch.no_grad():
        for _ in range(4):
            torch.testing.assert_close(sn(x), gelu(x))
    assert fused_groups(sn)[0] == 1
    sg = graphfuser.script(gelu_f32)
    for _ in range(4):
        sg(x).sum().backward()
    assert fused_groups(sg)[0] == 1
