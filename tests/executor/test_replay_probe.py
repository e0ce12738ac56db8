"""The probe of a training call's outputs (executor/cuda_graphs_train.py ``_Probe``): which of
them the caller gives a gradient, as the training replay captures its backward graph for those
only. It runs on any device; the replay itself is tested on the GPU (tests/cuda)."""
import torch

from graphfuser.executor.cuda_graphs_train import _Probe


def _call(w, x):
    logits = x @ w
    loss = torch.nn.functional.cross_entropy(logits, torch.tensor([1, 0, 2]))
    return loss, logits


def test_probe_sees_the_gradients_the_caller_gives():
    w = torch.randn(4, 3, requires_grad=True)
    x = torch.randn(3, 4)
    seen: set = set()
    loss, logits = _Probe.apply(seen, [0, 1], *_call(w, x))
    loss.backward()
    # the logits' gradient on the way to the loss is inside the call: not the caller's
    assert seen == {-1, 0}
    ref = w.grad.clone()
    w.grad = None
    _call(w, x)[0].backward()
    torch.testing.assert_close(ref, w.grad)
    loss, logits = _Probe.apply(seen, [0, 1], *_call(w, x))
    (loss + logits.square().sum()).backward()
    assert seen == {-1, 0, 1}


def test_probe_outputs_may_be_written_in_place():
    w = torch.randn(4, 3, requires_grad=True)
    seen: set = set()
    loss, logits = _Probe.apply(seen, [0, 1], *_call(w, torch.randn(3, 4)))
    logits.mul_(2)
    (loss + logits.sum()).backward()
    assert seen == {-1, 0, 1} and w.grad is not None


def test_wanted_is_every_output_until_a_backward_reached_the_probe():
    """An output left unprobed (it aliases an argument) counts as given a gradient at once; the
    others are left out of the backward graph only once some warm call's backward ran."""
    from graphfuser.executor.cuda_graphs_train import TrainingReplayer

    r = TrainingReplayer.__new__(TrainingReplayer)
    r.grads_seen = {("k",): {0}}
    assert r._wanted(("k",), 2) == [True, True]
    r.grads_seen[("k",)].add(-1)
    assert r._wanted(("k",), 2) == [True, False]


def test_a_padded_output_is_differentiated_from_its_base():
    """A padded GEMM's result (``base[..., :n]``): the captured backward starts from the base, with
    the incoming gradient copied into the columns the output owns and the padding left zero; the
    parameters' gradients equal those through the slice."""
    from graphfuser.executor.cuda_graphs_train import _backward_roots

    torch.manual_seed(0)
    x = torch.randn(5, 8)
    w = torch.randn(7, 8, requires_grad=True)
    b = torch.randn(7, requires_grad=True)
    wp, bp = torch.nn.functional.pad(w, [0, 0, 0, 1]), torch.nn.functional.pad(b, [0, 1])
    base = torch.nn.functional.linear(x, wp, bp)
    out = base[..., :7]
    plain = torch.tanh(x @ w.t())                  # an output of its own: differentiated as is
    roots, feeds, into = _backward_roots([out, plain])
    assert roots[0] is base and roots[1] is plain
    assert feeds[0].shape == (5, 8) and into[0].shape == (5, 7) and into[0]._base is feeds[0]
    g, h = torch.randn(5, 7), torch.randn(5, 7)
    into[0].copy_(g)
    into[1].copy_(h)
    got = torch.autograd.grad(roots, [w, b], feeds, retain_graph=True)
    want = torch.autograd.grad([out, plain], [w, b], [g, h])
    for a, c in zip(got, want):
        torch.testing.assert_close(a, c)
    assert feeds[0][..., 7:].eq(0).all()
    # a slice that does not keep the base's strides, or of a base that needs no grad: as is
    for o in (base[1:], base.detach()[..., :7]):
        assert _backward_roots([o])[0][0] is o


def test_an_expanded_output_keeps_its_broadcast_strides():
    """An output that is an expanded view (``v.expand(2, ...)`` of an intermediate) keeps eager's
    stride 0 through the probe's copy, and its gradient sums over the broadcast dim as eager's."""
    x = torch.randn(5, 4, requires_grad=True)
    seen: set = set()
    (out,) = _Probe.apply(seen, [0], x.tanh().expand(3, 5, 4))
    want = x.tanh().expand(3, 5, 4)
    assert out.stride() == want.stride() == (0, 4, 1)
    torch.testing.assert_close(out, want)
    g = torch.randn(3, 5, 4)
    (got,) = torch.autograd.grad(out, x, g)
    (ref,) = torch.autograd.grad(want, x, g)
    torch.testing.assert_close(got, ref)
    assert seen == {-1, 0}
    # a size-1 dim of stride 0 and a dense output are plain clones
    (one,) = _Probe.apply(seen, [0], x.tanh()[None].expand(1, 5, 4))
    assert one.is_contiguous() and one.shape == (1, 5, 4)
