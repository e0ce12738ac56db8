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
