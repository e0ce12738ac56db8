"""Static buffers lent to callers (graphfuser/executor/lent.py): a caller's tensor keeps the
values it was handed, whatever the graph writes next, whether the caller dropped it, kept it,
kept a view of it, wrote it in place or made it a parameter's gradient; a buffer nobody holds is
written again without a copy. The "graph" here is a write into the static tensors, as a replay's."""
import pytest
import torch

from graphfuser.executor import lent as lent_mod
from graphfuser.executor.lent import Lent

pytestmark = pytest.mark.skipif(not lent_mod.ENABLED, reason="this torch cannot re-point a storage")


def _replay(lent: Lent, value: float) -> None:
    """What a replay does: reclaim, then write every static buffer."""
    assert lent.reclaim()
    for t in lent.tensors:
        t.fill_(value)


def _statics(n: int = 3, size: int = 1 << 15) -> list[torch.Tensor]:
    return [torch.zeros(size) for _ in range(n)]


def test_a_dropped_output_is_written_again_without_a_copy():
    lent = Lent(_statics())
    for step in range(4):
        _replay(lent, step)
        outs = lent.hand_out()
        assert all(o.data_ptr() == t.data_ptr() for o, t in zip(outs, lent.tensors))
        assert all(bool((o == step).all()) for o in outs)
        del outs
    assert lent.copies == 0


@pytest.mark.parametrize("hold", ["tensor", "view", "list"])
def test_a_held_output_keeps_its_values(hold):
    lent = Lent(_statics(2))
    second = lent.tensors[1].data_ptr()
    kept = []
    for step in range(4):
        _replay(lent, step)
        outs = lent.hand_out()
        kept.append(outs[0] if hold != "view" else outs[0][5:9])
        if hold == "tensor":
            kept = kept[-1:]
        del outs
    steps = range(4) if hold != "tensor" else [3]
    for k, step in zip(kept, steps):
        assert bool((k == step).all()), (hold, step)
    # the second buffer was dropped every time: only the first was copied, once per held step
    assert lent.copies == 3
    assert lent.tensors[1].data_ptr() == second


def test_a_held_view_follows_its_copy_and_the_graph_keeps_its_memory():
    lent = Lent(_statics(1))
    _replay(lent, 1.0)
    ptr = lent.tensors[0].data_ptr()
    out = lent.hand_out()[0]
    view = out.view(8, -1)[2]
    _replay(lent, 2.0)
    assert lent.tensors[0].data_ptr() == ptr           # the graph writes the memory it was captured on
    assert out.data_ptr() != ptr and bool((out == 1.0).all()) and bool((view == 1.0).all())
    out.add_(1)                                       # the caller's copy is its own
    assert bool((view == 2.0).all()) and bool((lent.tensors[0] == 2.0).all())


def test_an_in_place_write_shows_in_the_versions():
    lent = Lent(_statics(1))
    _replay(lent, 1.0)
    out = lent.hand_out()[0]
    v = lent.versions()
    out[3:5].mul_(2)
    assert lent.versions() != v


def test_a_parameter_gradient_is_stolen_then_kept_apart_from_the_next_backward():
    """Autograd makes a lent gradient the parameter's ``.grad`` without a copy; accumulating
    into it (no ``zero_grad`` between backwards) reads a copy, not the buffer the graph writes."""
    static = torch.zeros(1 << 15)
    lent = Lent([static], batched=True)
    w = torch.nn.Parameter(torch.ones(1 << 15))

    class Step(torch.autograd.Function):
        @staticmethod
        def forward(ctx, p, value):
            ctx.value = value
            return p.sum().detach()

        @staticmethod
        def backward(ctx, g):
            _replay(lent, ctx.value)
            return lent.hand_out()[0], None

    Step.apply(w, 1.0).backward()
    assert w.grad.data_ptr() == lent.tensors[0].data_ptr()    # stolen, no copy
    Step.apply(w, 2.0).backward()                             # accumulates into the held .grad
    assert bool((w.grad == 3.0).all()) and lent.copies == 1
    w.grad = None
    Step.apply(w, 5.0).backward()
    assert bool((w.grad == 5.0).all()) and lent.copies == 1


def test_small_buffers_and_shared_storages_are_copied():
    base = torch.zeros(1 << 16)
    small = torch.zeros(4)
    lent = Lent([base[:100], base[200:300], small])      # two outputs on one storage, one small
    _replay(lent, 1.0)
    outs = lent.hand_out()
    assert lent.lend == [False, False, False]
    assert all(o.data_ptr() != t.data_ptr() for o, t in zip(outs, lent.tensors))
    _replay(lent, 2.0)
    assert all(bool((o == 1.0).all()) for o in outs)


def test_a_buffer_referenced_elsewhere_is_not_lent():
    static = torch.zeros(1 << 15)
    other = static.view(-1)          # a reference this module cannot account for
    lent = Lent([static])
    _replay(lent, 1.0)
    out = lent.hand_out()[0]
    assert lent.lend == [False] and out.data_ptr() != static.data_ptr()
    del other


def test_a_grown_output_stops_the_replay():
    lent = Lent(_statics(1))
    _replay(lent, 1.0)
    out = lent.hand_out()[0]
    out.resize_(1 << 17)            # the storage moves away from the graph's memory
    assert not lent.reclaim()


def test_padded_outputs_keep_their_strides_and_padding():
    base = torch.zeros(64, 520)
    lent = Lent([base[:, :513]])
    _replay(lent, 1.0)
    out = lent.hand_out()[0]
    assert out.stride() == (520, 1)
    _replay(lent, 2.0)
    assert out.stride() == (520, 1) and bool((out == 1.0).all())
