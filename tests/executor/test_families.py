"""The backward graphs of one forward graph optimize together (``executor/families.py``): after
one profiling backward, the next backward optimizes every member at once and builds all their
groups on one ``BuildStream``, each member's as soon as its passes are done; gradients match eager's throughout; a member no gradient
reached yet stays behind and optimizes on its own later."""
import torch
import torch.nn.functional as F

import graphfuser
from graphfuser.autodiff.function import DifferentiableGroup
from graphfuser.executor import families, fusion


def three_groups(x, w, W1, W2):
    y = F.layer_norm(x * 2.0, [x.shape[-1]], w).relu()
    z = torch.softmax((y @ W1) * 3.0, -1).tanh()
    return ((z @ W2).sigmoid() * 2.0 + 1.0).sum(-1)


def _members(sf):
    return [r.backward for r in sf._specialized()._runners.values() if isinstance(r, DifferentiableGroup)]


def _args(seed=0):
    g = torch.Generator().manual_seed(seed)
    shapes = [(8, 64), (64,), (64, 32), (32, 16)]
    return [torch.randn(s, generator=g).requires_grad_() for s in shapes]


def _grads(fn, args):
    return torch.autograd.grad(fn(*args).sum(), args)


def test_members_optimize_together_and_match_eager(monkeypatch):
    built = []
    real = fusion.BuildStream.add
    monkeypatch.setattr(fusion.BuildStream, "add", lambda self, groups: built.append(len(groups)) or real(self, groups))
    sf = graphfuser.script(three_groups)
    optimized = []
    for step in range(6):
        args = _args(step)
        before = fusion.STATS["optimizations"]
        got = _grads(sf, args)
        optimized.append(fusion.STATS["optimizations"] - before)
        for g, e in zip(got, _grads(three_groups, args)):
            torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)
    members = _members(sf)
    assert len(members) == 3
    # forward: optimized after its profiling calls; the three backward graphs in one later call
    assert optimized.count(3) == 1 and sum(optimized) == 4, optimized
    assert built == [3, 1, 1, 1]   # the forward's three groups; then each member's, as its passes finish
    assert all(m._optimized is not None and m._family is None and m._calls == 1 for m in members)


def test_a_member_no_gradient_reached_optimizes_alone_later():
    """``out[1]`` carries a gradient only from the fourth call on: its group's backward is not
    called before, and its family has optimized the others by then; it optimizes in the fifth."""
    def two_outputs(x, w, W1):
        y = F.layer_norm(x * 2.0, [x.shape[-1]], w).relu()
        z = torch.softmax((y @ W1) * 3.0, -1).tanh()
        m = (y @ W1).sigmoid()
        return z.sum(-1), (m * 0.5).cos()

    sf = graphfuser.script(two_outputs)
    for step in range(8):
        args = _args(step)[:3]
        outs = sf(*args)
        loss = outs[0].sum() + (outs[1].sum() if step >= 3 else 0.0)
        got = torch.autograd.grad(loss, args)
        e = two_outputs(*args)
        want = torch.autograd.grad(e[0].sum() + (e[1].sum() if step >= 3 else 0.0), args)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
        members = _members(sf)
        if step == 2:       # the forward optimized in the second call; the first backward through its groups
            assert [m._calls for m in members] == [1, 1, 0], [m._calls for m in members]
        if step == 3:       # the two profiled members optimized together; the third profiled only now
            assert [m._optimized is not None for m in members] == [True, True, False]
            assert members[2]._family is not None and members[2]._calls == 1
    assert all(m._optimized is not None and m._family is None for m in _members(sf))


def test_a_members_kernels_build_while_the_next_members_passes_run(monkeypatch):
    """The first member's group starts building on a compile thread before the last member's
    passes are done: the last member's passes wait (bounded) for that build to begin."""
    import threading

    from graphfuser.config import config
    from graphfuser.executor.executor import ScriptedFunction

    started = threading.Event()
    real_make = fusion.make_group_runner

    def make(group):
        if threading.current_thread() is not threading.main_thread():
            started.set()
        return real_make(group)

    monkeypatch.setattr(fusion, "make_group_runner", make)
    seen = []
    real_optimize = ScriptedFunction._optimize

    def optimize(self, build=True):
        if not build:           # a family member's passes
            if not seen:        # (the forward's builds ran on the compile threads too)
                started.clear()
                seen.append(None)
            else:
                seen.append(started.wait(10.0))
        return real_optimize(self, build)

    monkeypatch.setattr(ScriptedFunction, "_optimize", optimize)
    sf = graphfuser.script(three_groups)
    with config.override(compile_threads=4):
        for step in range(4):
            args = _args(step)
            got = _grads(sf, args)
            for g, e in zip(got, _grads(three_groups, args)):
                torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)
    # the first member's passes run before any member's build; every later one finds a build started
    assert seen == [None, True, True], seen


def _layer(x, w, W):
    return torch.sigmoid((x @ W) * 2.0 + w).tanh()


def four_layers(x, w1, W1, w2, W2, w3, W3, w4, W4):
    # the same layer four times: the same backward graph
    for w, W in ((w1, W1), (w2, W2), (w3, W3), (w4, W4)):
        x = _layer(x, w, W)
    return x.sum(-1)


def test_members_with_the_same_profiled_graph_run_the_passes_once(monkeypatch):
    """Each layer's backward graph is the same: the first runs the passes, the others copy its
    optimized graph (``optimize_as``); each has groups and sites of its own, and gradients match
    eager's throughout."""
    copied = []
    real = families.optimize_as
    monkeypatch.setattr(families, "optimize_as", lambda sf, *a: copied.append(sf) or real(sf, *a))
    sf = graphfuser.script(four_layers)

    def args(seed):
        g = torch.Generator().manual_seed(seed)
        out = [torch.randn(8, 32, generator=g).requires_grad_()]
        for _ in range(4):
            out += [torch.randn(32, generator=g).requires_grad_(), (torch.randn(32, 32, generator=g) / 6).requires_grad_()]
        return out

    for step in range(5):
        a = args(step)
        for g, e in zip(_grads(sf, a), _grads(four_layers, a)):
            torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)
    members = [m for m in _members(sf) if m._optimized is not None]
    # (the last layer's incoming gradient is the sum's, expanded: a profiled graph of its own)
    assert len(members) == 4 and len(copied) == 2, (len(members), len(copied))
    # copies, not shared: every member's groups and sites are its own
    groups = [gr for m in members for gr in m._sites]
    assert len(groups) == len(set(map(id, groups)))
    assert all(site.executor is m for m in members for site in m._sites.values())


def test_a_partial_backward_optimizes_with_the_family(monkeypatch):
    """A group's second output never gets a gradient: autograd runs the backward of the first
    output alone (``DifferentiableGroup.partial``), a graph made at the first backward. It joins
    the family of its group's full backward and optimizes in the same call as the others."""
    def two_groups(x, W, W2):
        h = x @ W
        a, b = (h * 2.0).sigmoid(), (h * 3.0).tanh()
        return ((a @ W2) * 2.0).relu().sum(-1), b

    together = []
    real = families.Family.optimize
    monkeypatch.setattr(families.Family, "optimize", lambda self, caller: together.append(len(self.members)) or real(self, caller))
    sf = graphfuser.script(two_groups)
    for step in range(5):
        g = torch.Generator().manual_seed(step)
        args = [torch.randn(8, 16, generator=g).requires_grad_(), torch.randn(16, 16, generator=g).requires_grad_(),
                torch.randn(16, 8, generator=g).requires_grad_()]
        got = torch.autograd.grad(sf(*args)[0].sum(), args)
        want = torch.autograd.grad(two_groups(*args)[0].sum(), args)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    groups = [r for r in sf._specialized()._runners.values() if isinstance(r, DifferentiableGroup)]
    partials = [run for r in groups for entry in r._partial.values() if not isinstance(entry, str) for run in entry[1:]]
    assert len(partials) == 1 and partials[0]._optimized is not None
    assert together == [3]      # the two full backwards and the partial one, in one call
