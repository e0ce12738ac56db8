"""Batch norm in training: ``F.batch_norm(training=True)`` and ``nn.BatchNorm*d.train()`` fused with
the ReLU / residual add after them, the running stats (unbiased variance, momentum, the cumulative
average of ``momentum=None``) and ``num_batches_tracked`` updated in place as eager does, over
several steps; outputs, input / weight / bias gradients and buffers against eager; channels-last;
``track_running_stats=False``; eval after training; the forward and backward kernel counts."""
from __future__ import annotations

import copy
import logging

import pytest
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.config import config
from grad_helpers import GRAD_TOL, differentiable_groups
from helpers import fallback_counter, live_instances

BN_KINDS = {"aten::batch_norm", "graphfuser::batch_norm_train"}

# fp16 / bf16: eager rounds the batch statistics it returns to the input dtype only at the end
_TOL = {torch.float64: GRAD_TOL[torch.float64], torch.float32: dict(rtol=1e-4, atol=1e-5),
        torch.float16: dict(rtol=2e-2, atol=2e-2), torch.bfloat16: dict(rtol=8e-2, atol=8e-2)}


def bn_relu(x, w, b, rm, rv, r):
    y = F.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5)
    return (y + r).relu()


def bn_flag(x, w, b, rm, rv, training: bool):
    return F.batch_norm(x, rm, rv, w, b, training, 0.2, 1e-3).relu() * 2.0


class Block(torch.nn.Module):
    def __init__(self, dim: int = 2, c: int = 6, **kw) -> None:
        super().__init__()
        self.bn = {1: torch.nn.BatchNorm1d, 2: torch.nn.BatchNorm2d, 3: torch.nn.BatchNorm3d}[dim](c, **kw)

    def forward(self, x, r):
        return (self.bn(x) + r).relu()


def _x(shape, dtype=torch.float32, channels_last=False, seed=0):
    torch.manual_seed(seed)
    x = (torch.randn(shape, dtype=torch.float64) * 2.0 + 0.5).to(dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last if len(shape) == 4 else torch.channels_last_3d)
    return x.requires_grad_()


def _compare(step_e, step_f, steps: int, tol: dict) -> None:
    for k in range(steps):
        out_e, grads_e, bufs_e = step_e(k)
        out_f, grads_f, bufs_f = step_f(k)
        torch.testing.assert_close(out_f, out_e, **tol, msg=lambda m: f"step {k} output: {m}")
        for n, (gf, ge) in enumerate(zip(grads_f, grads_e)):
            torch.testing.assert_close(gf, ge, **tol, msg=lambda m: f"step {k} grad {n}: {m}")
        for n, (bf, be) in enumerate(zip(bufs_f, bufs_e)):
            torch.testing.assert_close(bf, be, **tol, msg=lambda m: f"step {k} buffer {n}: {m}")
            assert not bf.requires_grad and bf.grad_fn is None


def _function_run(fn, dtype, shape, channels_last=False, steps=5, extra=()):
    c = shape[1]
    x = _x(shape, dtype, channels_last)
    r = torch.randn(shape, dtype=dtype).requires_grad_()
    w = (torch.rand(c, dtype=dtype) + 0.5).requires_grad_()
    b = torch.randn(c, dtype=dtype).requires_grad_()
    stats = {k: (torch.randn(c, dtype=dtype) * 0.1, torch.rand(c, dtype=dtype) + 0.5) for k in ("e", "f")}
    stats["f"] = (stats["e"][0].clone(), stats["e"][1].clone())
    gys = [torch.randn(shape, dtype=dtype) for _ in range(steps)]
    sf = graphfuser.script(fn)

    def step(which, f):
        def run(k):
            rm, rv = stats[which]
            out = f(x, w, b, rm, rv, *(extra or (r,)))
            grads = torch.autograd.grad(out, [x, w, b] + ([] if extra else [r]), gys[k])
            return out, grads, (rm, rv)
        return run

    with config.override(disable=["fallback"]):
        _compare(step("e", fn), step("f", sf), steps, _TOL[dtype])
    return sf


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("channels_last", [False, True])
def test_functional_training(dtype, channels_last):
    sf = _function_run(bn_relu, dtype, (4, 6, 5, 3), channels_last)
    groups = [n for n in sf._optimized.all_nodes() if n.kind == "prim::CpuFusionGroup"]
    assert len(groups) == 1, str(sf._optimized)       # stats + normalize + add + relu + update
    kinds = [n.kind for n in groups[0].subgraph.nodes()]
    assert {"aten::batch_norm", "aten::relu", "aten::var", "aten::add"} <= set(kinds), kinds
    dgs = differentiable_groups(sf)
    assert len(dgs) == 1
    bwd = [n for n in dgs[0].backward._optimized.all_nodes() if n.kind == "prim::CpuFusionGroup"]
    assert len(bwd) == 1, str(dgs[0].backward._optimized)     # every sum reduces over N, H, W
    assert fallback_counter(sf)["fallback"] == 0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_functional_training_half(dtype):
    _function_run(bn_relu, dtype, (4, 6, 5, 3), True)


@pytest.mark.parametrize("shape", [(2, 3, 1, 1), (5, 1, 3, 2), (3, 7), (2, 5, 9), (3, 2, 3, 4, 5), (17, 33, 3, 5)])
def test_functional_training_shapes(shape):
    _function_run(bn_relu, torch.float64, shape)


def test_run_time_training_flag():
    """A flag that is an argument: the rewrite sits under prim::If(training); eval calls (flag
    False) use and keep the running stats."""
    for flag in (True, False):
        _function_run(bn_flag, torch.float32, (4, 6, 5, 3), steps=4, extra=(flag,))


def _module_run(make, shape, dtype=torch.float32, channels_last=False, steps=5, eval_after=True):
    torch.manual_seed(1)
    me = make().to(dtype)
    mf = copy.deepcopy(me)
    sf = graphfuser.script(mf)
    x = _x(shape, dtype, channels_last)
    r = torch.randn(shape, dtype=dtype)
    gys = [torch.randn(shape, dtype=dtype) for _ in range(steps)]

    def step(mod, call):
        def run(k):
            out = call(x, r)
            grads = torch.autograd.grad(out, [x] + list(mod.parameters()), gys[k])
            return out, grads, list(mod.buffers())
        return run

    with config.override(disable=["fallback"]):
        _compare(step(me, me), step(mf, sf), steps, _TOL[dtype])
        if eval_after:
            me.eval()
            mf.eval()
            _compare(step(me, me), step(mf, sf), 2, _TOL[dtype])
            me.train()
            mf.train()
            _compare(step(me, me), step(mf, sf), 2, _TOL[dtype])
    return sf


@pytest.mark.parametrize("kw", [{}, {"momentum": None}, {"momentum": 0.3, "eps": 1e-3}, {"affine": False},
                                {"track_running_stats": False}])
def test_module_training(kw):
    sf = _module_run(lambda: Block(2, **kw), (4, 6, 5, 3))
    assert differentiable_groups(sf)


@pytest.mark.parametrize("dim, shape, channels_last", [(1, (8, 6), False), (1, (4, 6, 7), False),
                                                       (2, (4, 6, 5, 3), True), (3, (2, 6, 3, 4, 5), True)])
def test_module_dims_and_layouts(dim, shape, channels_last):
    _module_run(lambda: Block(dim), shape, channels_last=channels_last)


def test_module_float64_momentum_none():
    _module_run(lambda: Block(2, momentum=None), (3, 6, 4, 4), dtype=torch.float64, steps=6)


def test_rewrite_is_logged(caplog, monkeypatch):
    monkeypatch.setenv("PYTORCH_JIT_LOG_LEVEL", ">graph_fuser")
    config.reload()
    with caplog.at_level(logging.INFO):
        _function_run(bn_relu, torch.float32, (4, 6, 5, 3), steps=3)
    assert "running-stats update split off (constant training flag)" in caplog.text, caplog.text


def test_sgd_steps_match_eager():
    """Conv -> BN (train) -> ReLU -> residual, a few SGD steps: losses, parameters and buffers."""
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(4, 4, 3, padding=1, bias=False)
            self.bn = torch.nn.BatchNorm2d(4)

        def forward(self, x):
            return (self.bn(self.conv(x)) + x).relu().mean()

    torch.manual_seed(0)
    me = Net()
    mf = copy.deepcopy(me)
    sf = graphfuser.script(mf)
    oe = torch.optim.SGD(me.parameters(), lr=0.1)
    of = torch.optim.SGD(mf.parameters(), lr=0.1)
    x = torch.randn(3, 4, 6, 6).contiguous(memory_format=torch.channels_last)
    with config.override(disable=["fallback"]):
        for _ in range(6):
            for mod, opt in ((me, oe), (sf, of)):
                opt.zero_grad()
                loss = mod(x)
                loss.backward()
                opt.step()
    for (n, pe), pf in zip(me.state_dict().items(), mf.state_dict().values()):
        torch.testing.assert_close(pf, pe, rtol=1e-4, atol=1e-5, msg=n)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_training_on_cuda(dtype):
    shape = (8, 16, 9, 7)
    for kw in ({}, {"momentum": None}, {"track_running_stats": False}):
        torch.manual_seed(1)
        me = Block(2, 16, **kw).cuda().to(dtype)
        mf = copy.deepcopy(me)
        mr = copy.deepcopy(me).double()
        sf = graphfuser.script(mf)
        x = _x(shape, dtype, True).detach().cuda().requires_grad_()
        xr = x.detach().double().requires_grad_()
        r = torch.randn(shape, dtype=dtype, device="cuda")
        with config.override(disable=["fallback"], enable=["cuda_batch_norm_training"]):
            for k in range(7):
                gy = torch.randn(shape, dtype=dtype, device="cuda")
                ye, yf = me(x, r), sf(x, r)
                ge = torch.autograd.grad(ye, [x] + list(me.parameters()), gy)
                gf = torch.autograd.grad(yf, [x] + list(mf.parameters()), gy)
                got, want = [yf, *gf, *mf.buffers()], [ye, *ge, *me.buffers()]
                if dtype == torch.float32:
                    for a, e in zip(got, want):
                        torch.testing.assert_close(a, e, **_TOL[dtype])
                    continue
                # fp16 / bf16: eager rounds the normalized values to the dtype before the residual
                # add and the ReLU, the fused kernels do not; where a sum lies within that rounding
                # of 0 the two ReLU masks differ, and a gradient with them by a whole |gy|. Both
                # are judged against a float64 run: the fused error at most eager's (plus an ulp).
                yr = mr(xr, r.double())
                gr = torch.autograd.grad(yr, [xr] + list(mr.parameters()), gy.double())
                for n, (a, e, ref) in enumerate(zip(got, want, [yr, *gr, *mr.buffers()])):
                    if not ref.is_floating_point():      # num_batches_tracked
                        assert torch.equal(a, e), (k, n)
                        continue
                    err_f, err_e = ((t.double() - ref).abs().max().item() for t in (a, e))
                    ulp = torch.finfo(dtype).eps * max(ref.abs().max().item(), 1.0)
                    assert err_f <= 2 * err_e + 2 * ulp, f"step {k} value {n}: fused error {err_f}, eager's {err_e}"
        assert differentiable_groups(sf)
    x = _x(shape, dtype, True).detach().cuda().requires_grad_()
    _ = x
    for dt in (dtype,):
        c = shape[1]
        w = torch.rand(c, dtype=dt, device="cuda").requires_grad_()
        b = torch.randn(c, dtype=dt, device="cuda").requires_grad_()
        rm_e, rv_e = torch.zeros(c, dtype=dt, device="cuda"), torch.ones(c, dtype=dt, device="cuda")
        rm_f, rv_f = rm_e.clone(), rv_e.clone()
        r = torch.randn(shape, dtype=dt, device="cuda")
        sf = graphfuser.script(bn_relu)
        with config.override(disable=["fallback"]):
            for _ in range(4):
                torch.testing.assert_close(sf(x, w, b, rm_f, rv_f, r), bn_relu(x, w, b, rm_e, rv_e, r), **_TOL[dt])
                torch.testing.assert_close(rm_f, rm_e, **_TOL[dt])
                torch.testing.assert_close(rv_f, rv_e, **_TOL[dt])
        groups = [n for n in sf._optimized.all_nodes() if n.kind == "prim::CudaFusionGroup"]
        assert len(groups) == 1, str(sf._optimized)


@pytest.mark.parametrize("shape", [(0, 6, 5, 3), (3, 6, 0, 3)])
@pytest.mark.parametrize("channels_last", [False, True])
def test_empty_batch_keeps_running_stats(shape, channels_last):
    """An empty batch: eager returns an empty output and leaves the running stats alone (the
    fused statistics would be NaN); the gradients of weight and bias are zeros."""
    sf = _function_run(bn_relu, torch.float32, shape, channels_last, steps=3)
    assert fallback_counter(sf)["fallback"] == 0


def bn_relu_only(x, w, b, rm, rv):
    return F.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5).relu()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_two_values_per_channel_half(dtype):
    """Two values per channel: xhat is +-1 and dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
    nearly vanishes. Every step after the forward's profiling calls (eager's own CPU kernel, whose
    fp16 dx is 4e-3 off here), the backward graph's own profiling calls (op by op) included,
    computes it in float as eager's CUDA kernel does: within a few float ulps of float64."""
    shape = (2, 3, 1, 1)
    torch.manual_seed(0)
    x = (torch.randn(shape, dtype=torch.float64) * 2.0 + 0.5).to(dtype).requires_grad_()
    w = (torch.rand(3) + 0.5).to(dtype).requires_grad_()
    b = torch.randn(3).to(dtype).requires_grad_()
    rm, rv = torch.zeros(3, dtype=dtype), torch.ones(3, dtype=dtype)
    sf = graphfuser.script(bn_relu_only)
    with config.override(disable=["fallback"]):
        for k in range(6):
            gy = torch.randn(shape).to(dtype)
            dx = torch.autograd.grad(sf(x, w, b, rm, rv), [x], gy)[0]
            xr = x.detach().double().requires_grad_()
            yr = F.batch_norm(xr, None, None, w.double(), b.double(), True, 0.1, 1e-5).relu()
            dr = torch.autograd.grad(yr, [xr], gy.double())[0]
            # fp16 before: 2.5e-3 (each mean rounded to fp16) where the values are ~1e-5
            assert k < config.profiling_runs or (dx.double() - dr).abs().max().item() < 1e-6, (k, dx, dr)
    assert differentiable_groups(sf)


def test_kernels_launched_every_step():
    """Once both have profiled (the forward for ``profiling_runs`` calls, then the backward
    graph for as many of its own), each step launches one forward and one backward kernel."""
    import contextlib
    import io

    x = _x((4, 6, 5, 3), channels_last=True)
    w, b = (torch.rand(6) + 0.5).requires_grad_(), torch.randn(6).requires_grad_()
    rm, rv, r = torch.zeros(6), torch.ones(6), torch.randn(4, 6, 5, 3)
    sf = graphfuser.script(bn_relu)
    runs = config.profiling_runs
    with config.override(disable=["fallback"], dump=["launch_param"]):
        for k in range(2 * runs + 2):
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                torch.autograd.grad(sf(x, w, b, rm, rv, r), [x, w, b], torch.randn_like(x))
            launches = [ln for ln in out.getvalue().splitlines() if ln.startswith("[launch_param]")]
            want = 0 if k < runs else (1 if k < 2 * runs else 2)
            assert len(launches) == want, (k, launches)


def test_module_consumers_join_the_group():
    """``nn.BatchNorm2d`` reads its training flag at run time: the rewrite sits under
    ``prim::If(training)``, and the residual add and ReLU after it move into both blocks, so
    they fuse with the batch norm (forward and backward) instead of running after the If."""
    sf = _module_run(lambda: Block(2), (4, 6, 5, 3), channels_last=True, eval_after=False)
    groups = [n for n in sf._optimized.all_nodes() if n.kind == "prim::CpuFusionGroup"
              and any(m.kind in BN_KINDS for m in n.subgraph.nodes())]
    assert len(groups) == 1, str(sf._optimized)
    kinds = {n.kind for n in groups[0].subgraph.nodes()}
    assert kinds & BN_KINDS and {"aten::add", "aten::relu"} <= kinds, kinds
    outside = [n.kind for n in sf._optimized.block.nodes if n.kind in ("aten::relu", "aten::add")]
    assert not outside, str(sf._optimized)


class InPlaceBlock(torch.nn.Module):
    """torchvision's bottleneck tail: ``ReLU(inplace=True)`` after a batch norm, and
    ``out += identity`` then the same ReLU after the second one."""

    def __init__(self, c: int = 6) -> None:
        super().__init__()
        self.bn1, self.bn2 = torch.nn.BatchNorm2d(c), torch.nn.BatchNorm2d(c)
        self.relu = torch.nn.ReLU(inplace=True)

    def forward(self, x, r):
        out = self.relu(self.bn1(x))
        out = self.bn2(out * 1.5)
        out += r
        return self.relu(out)


def test_in_place_consumers_join_the_group():
    """The running stats' copies go past in-place ops on the batch norm's own result (they
    write memory no buffer shares), so an in-place ReLU and residual add fuse with the batch
    norm instead of running after the copies as kernels of their own."""
    sf = _module_run(lambda: InPlaceBlock(), (4, 6, 5, 3), channels_last=True, eval_after=False)
    groups = [n for n in sf._optimized.all_nodes() if n.kind == "prim::CpuFusionGroup"
              and any(m.kind in BN_KINDS for m in n.subgraph.nodes())]
    assert groups, str(sf._optimized)
    kinds = [m.kind for gr in groups for m in gr.subgraph.nodes()]
    assert kinds.count("aten::relu") == 2 and "aten::add" in kinds, kinds
    outside = [n.kind for n in sf._optimized.block.nodes if n.kind in ("aten::relu", "aten::relu_")
               or (n.kind == "aten::add_" and n.inputs[0].type.dtype != torch.int64)]   # (num_batches_tracked)
    assert not outside, str(sf._optimized)


@pytest.mark.parametrize("channels_last", [False, True])
def test_backward_reads_the_saved_statistics(channels_last):
    """The forward kernel writes each channel's shift, offset and rstd; the backward rebuilds the
    normalized tensor from them (for ReLU's mask) and reduces only gradient terms: no statistics
    of x are recomputed, so its kernel reads x twice (gradient sums, then dx), not three times."""
    sf = _function_run(bn_relu, torch.float32, (4, 6, 5, 3), channels_last)
    (dg,) = differentiable_groups(sf)
    assert dg.saved == 3 and dg.n_out == len(dg.sub.outputs) - 3 == len(dg.group.subgraph.outputs)
    inputs = [v.name for v in dg.plan.graph.inputs]
    assert inputs[-3:] == ["saved_0", "saved_1", "saved_2"], inputs
    (bwd,) = [n for n in dg.backward._optimized.all_nodes() if n.kind == "prim::CpuFusionGroup"]
    x = bwd.subgraph.inputs[0]
    kinds = [n.kind for n in bwd.subgraph.nodes()]
    assert "aten::var" not in kinds and "aten::batch_norm" not in kinds, kinds
    # every reduction reduces a gradient term, none x alone
    reduced = [n.inputs[0] for n in bwd.subgraph.nodes() if n.kind in ("aten::mean", "aten::sum")]
    assert len(reduced) == 4 and x not in reduced, str(bwd.subgraph)
    assert "(statistics)" in dg.text("CpuFusionGroup_0")


def test_backward_host_ops_are_shared_and_bound():
    """The backward graph views the weight as [C, 1, 1] once (the rebuilt output and the
    gradient share it), in one view, and its host program calls view and copy_ through torch's
    Python bindings, not through the op packets that resolve an overload on every call."""
    def f(x, w, b, rm, rv):
        return F.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5).relu()

    x = torch.randn(2, 8, 4, 4).contiguous(memory_format=torch.channels_last).requires_grad_()
    w, b = torch.randn(8, requires_grad=True), torch.randn(8, requires_grad=True)
    rm, rv = torch.zeros(8), torch.ones(8)
    sf = graphfuser.script(f)
    for _ in range(4):
        sf(x, w, b, rm, rv).sum().backward()
    (dg,) = differentiable_groups(sf)
    g = dg.backward._optimized
    views = [n for n in g.nodes() if n.kind in ("aten::unsqueeze", "aten::view")]
    assert [n.kind for n in views] == ["aten::view"] * 2, str(g)          # weight and bias, once each
    ops = {k: v for k, v in dg.backward._program.fn.__globals__.items() if k.startswith("_op")}
    assert ops and all(v is torch._C.TensorBase.view for v in ops.values()), ops
    from graphfuser.ops.aten import HostOps

    fops = [v for k, v in sf._program.fn.__globals__.items() if k.startswith("_op")]
    assert HostOps.copy_ in fops
    rm2, rv2 = torch.zeros(8), torch.ones(8)
    want = torch.autograd.grad(f(x, w, b, rm2, rv2).sum(), (x, w, b))
    got = torch.autograd.grad(sf(x, w, b, rm, rv).sum(), (x, w, b))
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-5)


def test_running_stats_written_in_place_by_the_group():
    """The group writes the new running statistics into the buffers (passes/in_place.py): no
    output allocated for them, the host copy only counts the write; values, versions and the
    fallback (a guard miss) as eager's."""
    from graphfuser.ops.aten import HostOps

    m = torch.nn.Sequential(torch.nn.BatchNorm2d(8), torch.nn.ReLU()).train()
    ref = copy.deepcopy(m)
    sf = graphfuser.script(m)
    for step in range(6):
        x = torch.randn(4, 8, 5, 5, requires_grad=True)
        ptr = m[0].running_mean.data_ptr()
        sf(x).sum().backward()
        ref(x.detach().requires_grad_()).sum().backward()
        torch.testing.assert_close(m[0].running_mean, ref[0].running_mean)
        torch.testing.assert_close(m[0].running_var, ref[0].running_var)
        assert m[0].running_mean.data_ptr() == ptr
    (dg,) = differentiable_groups(sf)
    writes = getattr(dg.sub, "writes_into", None)
    assert writes and len(writes) == 2, "the running stats are written by the kernel"
    import re

    from graphfuser.executor.compiled_reduction import ReductionGroup

    srcs = [o.launcher_source for o in live_instances(ReductionGroup)
            if getattr(o.sub, "writes_into", None) == writes and hasattr(o, "launcher_source")]
    assert srcs and all(len(re.findall(r"^ +o\d+ = x\d+$", s, re.M)) == 2 for s in srcs), srcs
    # a layout the guard did not see (channels-last): the fallback's fresh outputs are copied
    x = torch.randn(4, 8, 5, 5).contiguous(memory_format=torch.channels_last).requires_grad_()
    sf(x).sum().backward()
    ref(x.detach().requires_grad_()).sum().backward()
    torch.testing.assert_close(m[0].running_var, ref[0].running_var)
    # the host copy of a tensor onto its own memory only bumps the version
    t = torch.arange(4.0)
    v = t._version
    assert HostOps.copy_(t, t.view_as(t)) is t and t._version == v + 1
    u = torch.zeros(4)
    assert HostOps.copy_(u, t) is u and torch.equal(u, t)
    assert torch.equal(HostOps.copy_(torch.zeros(3), t[1:]), t[1:])      # another place: a real copy
    # a leaf that requires grad: eager's error (fuzz graph 838 of seed 11313: x.copy_(x))
    leaf = torch.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        HostOps.copy_(leaf, leaf)


def test_running_stats_no_host_copy(monkeypatch):
    """Once fused, the group's autograd node returns the running-statistics buffers themselves
    (marked dirty, not views of them) and the host program's copy of a buffer onto itself is
    skipped: no host copy_ runs, under grad or not, and the buffers match eager's."""
    from graphfuser.ops.aten import HostOps

    calls = []
    real = HostOps.copy_
    monkeypatch.setattr(HostOps, "copy_", staticmethod(lambda *a: calls.append(1) or real(*a)))
    for grad in (True, False):
        m = torch.nn.Sequential(torch.nn.BatchNorm2d(8), torch.nn.ReLU()).train()
        ref = copy.deepcopy(m)
        sf = graphfuser.script(m)
        for step in range(5):
            x = torch.randn(4, 8, 5, 5, requires_grad=grad)
            calls.clear()
            with torch.set_grad_enabled(grad):
                out = sf(x)
                want = ref(x.detach().requires_grad_(grad))
            torch.testing.assert_close(out, want)
            torch.testing.assert_close(m[0].running_mean, ref[0].running_mean)
            torch.testing.assert_close(m[0].running_var, ref[0].running_var)
            assert m[0].num_batches_tracked.item() == ref[0].num_batches_tracked.item() == step + 1
            if grad:
                out.sum().backward()
        assert not calls, f"a fused step (grad {grad}) copied the running statistics on the host"
    # one module under grad, then without: the re-specialization writes the buffers too
    m = torch.nn.Sequential(torch.nn.BatchNorm2d(8), torch.nn.ReLU()).train()
    ref = copy.deepcopy(m)
    sf = graphfuser.script(m)
    for step in range(10):
        grad = step < 4
        x = torch.randn(4, 8, 5, 5, requires_grad=grad)
        calls.clear()
        with torch.set_grad_enabled(grad):
            torch.testing.assert_close(sf(x), ref(x.detach().requires_grad_(grad)))
        torch.testing.assert_close(m[0].running_var, ref[0].running_var)
    assert not calls, "the re-specialized group copied the running statistics on the host"


def test_host_add_binding():
    """``aten::add_`` runs through the Tensor binding (HostOps.add_), alpha included."""
    from graphfuser.ops.aten import HostOps

    t = torch.zeros(3, dtype=torch.int64)
    assert HostOps.add_(t, 1) is t and t.tolist() == [1, 1, 1]
    HostOps.add_(t, torch.tensor([1, 2, 3]), 2)
    assert t.tolist() == [3, 5, 7]
    h = torch.ones(2, dtype=torch.float16)
    HostOps.add_(h, 1e-4)
    assert torch.equal(h, torch.ones(2, dtype=torch.float16).add_(1e-4))


def bn_lgamma(x, w, b):
    y = F.batch_norm(x, None, None, w, b, True, 0.1, 1e-5)
    return torch.lgamma(y * y + 1.0)


def bn_lgamma_stats(x, w, b, rm, rv):
    y = F.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5)
    return torch.lgamma(y * y + 1.0)


@pytest.mark.parametrize("stats", [False, True])
def test_group_without_fused_backward_runs_eagers_batch_norm(stats):
    """A group whose backward cannot be built (lgamma has no derivative row) runs its own
    subgraph eagerly: eager's batch norm and its backward, bit for bit, not the eager form of the
    statistics-saving ``graphfuser::batch_norm_train`` (a composite of torch ops that autograd
    then differentiates op by op, with other roundings)."""
    x = _x((4, 6, 5, 3))
    w, b = (torch.rand(6) + 0.5).requires_grad_(), torch.randn(6).requires_grad_()
    fn, bufs, bufs_e = bn_lgamma, [], []
    if stats:
        fn, bufs, bufs_e = bn_lgamma_stats, [torch.zeros(6), torch.ones(6)], [torch.zeros(6), torch.ones(6)]
    sf = graphfuser.script(fn)
    gen = torch.Generator().manual_seed(3)
    for k in range(config.profiling_runs + 2):
        gy = torch.randn(x.shape, generator=gen)
        got = torch.autograd.grad(sf(x, w, b, *bufs), [x, w, b], gy)
        want = torch.autograd.grad(fn(x, w, b, *bufs_e), [x, w, b], gy)
        for n, (g, r) in enumerate(zip(got, want)):
            assert torch.equal(g, r), (k, n, (g - r).abs().max().item())
    groups = [n for n in sf._optimized.all_nodes() if n.kind == "prim::CpuFusionGroup"]
    assert any(m.kind in BN_KINDS for g in groups for m in g.subgraph.nodes()), str(sf._optimized)
    assert not differentiable_groups(sf)          # the group ran eagerly under grad
    for bf, be in zip(bufs, bufs_e):
        torch.testing.assert_close(bf, be)
