"""Static buffers lent to callers (graphfuser/executor/lent.py): a lent buffer is an alias of
the static tensor; ``held`` tells a buffer the caller still references (the tensor, a view of it,
a parameter's ``.grad`` autograd made of it) from one it dropped; small buffers, buffers two
static tensors share and buffers referenced elsewhere are handed out as copies. The "graph" here
is a write into the static tensors, as a replay's."""
import pytest
import torch

from graphfuser.executor import lent as lent_mod
from graphfuser.executor.lent import Lent

pytestmark = pytest.mark.skipif(lent_mod._USE_COUNT is None, reason="this torch cannot count a storage's references")


def _statics(n: int = 3, size: int = 1 << 15) -> list[torch.Tensor]:
    return [torch.zeros(size) for _ in range(n)]


def test_a_dropped_output_is_written_again_without_a_copy():
    lent = Lent(_statics())
    for step in range(4):
        assert lent.held() == []
        for t in lent.tensors:
            t.fill_(step)
        outs = lent.hand_out()
        assert all(o.data_ptr() == t.data_ptr() for o, t in zip(outs, lent.tensors))
        assert all(bool((o == step).all()) for o in outs)
        del outs


@pytest.mark.parametrize("hold", ["tensor", "view", "list"])
def test_a_held_output_is_held(hold):
    lent = Lent(_statics(2))
    outs = lent.hand_out()
    kept = outs[0] if hold == "tensor" else outs[0][5:9] if hold == "view" else [outs[0]]
    del outs
    assert lent.held() == [0] and lent.holders(0) == (1 if hold != "view" else 2)   # (a view and its base)
    del kept
    assert lent.held() == []


def test_a_parameter_gradient_is_taken_without_a_copy_and_held():
    """Autograd makes a lent gradient the parameter's ``.grad`` without a copy; the buffer is
    held until ``.grad`` is dropped."""
    lent = Lent(_statics(1), batched=True)
    w = torch.nn.Parameter(torch.ones(1 << 15))

    class Step(torch.autograd.Function):
        @staticmethod
        def forward(ctx, p):
            return p.sum().detach()

        @staticmethod
        def backward(ctx, g):
            return lent.hand_out()[0]

    Step.apply(w).backward()
    assert w.grad.data_ptr() == lent.tensors[0].data_ptr()    # taken, no copy
    assert lent.held() == [0] and lent.holders(0) == 1
    w.grad = None
    assert lent.held() == []


def test_small_buffers_and_shared_storages_are_copied():
    base = torch.zeros(1 << 16)
    small = torch.zeros(4)
    lent = Lent([base[:100], base[200:300], small])      # two outputs on one storage, one small
    outs = lent.hand_out()
    assert lent.lend == [False, False, False]
    assert all(o.data_ptr() != t.data_ptr() for o, t in zip(outs, lent.tensors))
    for t in lent.tensors:
        t.fill_(2.0)
    assert all(bool((o == 0.0).all()) for o in outs) and lent.held() == []


def test_a_buffer_referenced_elsewhere_is_not_lent():
    static = torch.zeros(1 << 15)
    other = static.view(-1)          # a reference this module cannot account for
    lent = Lent([static])
    out = lent.hand_out()[0]
    assert lent.lend == [False] and out.data_ptr() != static.data_ptr()
    del other


def test_copies_only_leaves_lent_buffers_alone():
    lent = Lent([torch.zeros(1 << 15), torch.zeros(3)], batched=True)
    made = lent.copies_only()
    assert made[0] is lent.tensors[0] and made[1].data_ptr() != lent.tensors[1].data_ptr()


def test_a_grown_output_is_moved():
    lent = Lent(_statics(1))
    out = lent.hand_out()[0]
    assert not lent.moved()
    out.resize_(1 << 17)            # the storage moves away from the graph's memory
    assert lent.moved()


def test_padded_outputs_keep_their_strides():
    """A padded GEMM's result, lent as the slice of its padded buffer (detached: the slice keeps
    no base of its own)."""
    base = torch.zeros(64, 520)
    ptr = base.data_ptr()
    lent = Lent([base[:, :513].detach()])
    del base
    out = lent.hand_out()[0]
    assert lent.lend == [True] and out.stride() == (520, 1) and out.data_ptr() == ptr


@pytest.mark.parametrize("batched", [False, True])
def test_hand_out_keeps_every_position(batched):
    """Lent, copied and absent (None: an input without a gradient) in any order: each position
    gets its own tensor's values."""
    tensors = [torch.full((1 << 15,), 1.0), None, torch.full((3,), 2.0), torch.full((1 << 14,), 3.0),
               torch.full((5,), 4.0), None]
    lent = Lent(tensors, batched=batched)
    outs = lent.hand_out()
    assert [o is None for o in outs] == [t is None for t in tensors]
    for o, t in zip(outs, tensors):
        if t is not None:
            assert o.shape == t.shape and bool((o == t).all())
    assert [o is not None and o.data_ptr() == t.data_ptr() for o, t in zip(outs, tensors)] == \
        [True, False, False, True, False, False]


@pytest.mark.parametrize("make", [
    lambda: torch.randn(6, 520)[:, :513],                       # a padded GEMM's result
    lambda: torch.randn(2, 8, 40).transpose(1, 2)[:, 3:, :5],   # strided, offset
    lambda: torch.randn(5, 1).expand(5, 7),                     # overlapping (stride 0)
    lambda: torch.randn(0, 520)[:, :513],                       # empty
], ids=["padded", "strided", "expanded", "empty"])
def test_copies_keep_values_and_strides(make):
    """A copy handed out (``_copy_out``) has the buffer's values and strides, and memory of its
    own: the run of memory it spans is copied flat."""
    from graphfuser.executor.lent import _copy_out

    t = make()
    c = _copy_out(t)
    assert c.shape == t.shape and c.stride() == t.stride() and torch.equal(c, t)
    assert c.numel() == 0 or c.untyped_storage().data_ptr() != t.untyped_storage().data_ptr()
    assert c._base is None


@pytest.mark.parametrize("make, keeps", [
    (lambda: torch.randn(6, 520)[:, :513], True),                # a padded GEMM's result
    (lambda: torch.randn(4, 6).t(), True),                       # transposed
    (lambda: torch.randn(5, 1).expand(5, 7), True),              # expanded: stays expanded
    (lambda: torch.randn(6, 520)[:, :100], False),               # a narrow slice: compact
    (lambda: torch.randn(0, 520)[:, :513], None),                # empty
    (lambda: torch.randn(3), True),
], ids=["padded", "transposed", "expanded", "narrow", "empty", "dense"])
def test_warm_call_copies_keep_strides(make, keeps):
    """A warm training call's outputs (``clone_broadcast``, cuda_graphs_train.py ``_Probe``) have
    the strides a replay hands out, so a caller that guards strides (Dynamo) sees one layout."""
    from graphfuser.executor.lent import clone_broadcast

    t = make()
    c = clone_broadcast(t)
    assert c.shape == t.shape and torch.equal(c, t)
    if keeps is True:
        assert c.stride() == t.stride()
    elif keeps is False:
        assert c.is_contiguous()
    assert c.numel() == 0 or c.untyped_storage().data_ptr() != t.untyped_storage().data_ptr()
