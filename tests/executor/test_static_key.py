"""The replay key's part for static arguments (``executor/replay_key.StaticKey``): confirmed
per call by a C++ check, rebuilt whenever a static tensor's layout, dtype, requires_grad or
address changed. Runs on the CPU (the key's checks do not need a GPU: ``accept`` takes any dense
tensor here)."""
import torch

from graphfuser.executor.replay_key import StaticKey
from graphfuser.executor.lent import _dense


def _slow(tensors, values=()):
    return tuple((t.shape, t.stride(), t.dtype, t.get_device(), t.requires_grad, id(t), t.data_ptr()) for t in tensors), values


def _params(n=6):
    g = torch.Generator().manual_seed(0)
    return [torch.nn.Parameter(torch.randn(4, 3, generator=g)) for _ in range(n)] + [torch.zeros(1, 3)]


def test_same_tensors_reuse_the_part():
    ps = _params()
    key = StaticKey(frozenset(range(1, len(ps) + 1)), accept=_dense)
    args = (torch.randn(2, 3), *ps)
    first = key(args)
    assert first == _slow(ps)
    for _ in range(3):
        assert key(args) is first
    assert key.built == 1
    # a non-static argument changing does not touch the static part
    assert key((torch.randn(5, 3), *ps)) is first and key.built == 1


def _changed(kind, ps):
    ps = list(ps)
    p = ps[2]
    if kind == "transpose_":
        ps[6].t_()
    elif kind == "data swap":
        p.data = torch.randn(4, 3)
    elif kind == "dtype":
        p.data = p.data.double()
    elif kind == "requires_grad":
        p.requires_grad_(False)
    elif kind == "resize_":
        with torch.no_grad():
            ps[6].resize_(7)
    elif kind == "unsqueeze_":
        ps[6].unsqueeze_(0)
    elif kind == "other tensor":
        ps[2] = torch.nn.Parameter(p.detach().clone())
    elif kind == "strided":
        ps[6] = torch.zeros(2, 6)[:, ::2]
    return ps


def test_every_change_rebuilds_the_part():
    for kind in ("transpose_", "data swap", "dtype", "requires_grad", "resize_", "unsqueeze_", "other tensor", "strided"):
        ps = _params()
        key = StaticKey(frozenset(range(len(ps))), accept=_dense)
        before = key(tuple(ps))
        new = _changed(kind, ps)
        after = key(tuple(new))
        if kind == "strided":
            assert after is None, kind          # not dense: no key, no replay
            continue
        assert after == _slow(new), kind
        assert after != before, kind
        assert key.built == 2, kind
        assert key(tuple(new)) is after and key.built == 2, kind


def test_count_change_and_non_tensors():
    ps = _params()
    key = StaticKey(frozenset({0, 1, 2}), accept=_dense)
    a = key((ps[0], ps[1], ps[2]))
    b = key((ps[0], ps[1], None))         # a static position without a tensor
    assert b == _slow(ps[:2], ((type(None), None),)) and b != a
    assert key((ps[0], ps[1], ps[2])) == a


def test_non_tensor_values_in_static_positions_are_keyed():
    ps = _params(2)
    key = StaticKey(frozenset({1, 2}), accept=_dense)
    a = key((ps[0], ps[1], 3))
    assert a == key((ps[0], ps[1], 3)) and key.built == 1
    b = key((ps[0], ps[1], 4))              # another value: another key
    assert b != a and key.built == 2
    assert key((ps[0], ps[1], torch.zeros(2))) not in (a, b)     # a tensor there now
    assert key((ps[0], ps[1], object())) is None                  # a value with no key
    assert key((ps[0], ps[1], 3)) == a


def test_one_static_tensor_and_none():
    ps = _params(1)
    key = StaticKey(frozenset({1}), accept=_dense)
    a = key((torch.randn(2), ps[0]))
    assert key((torch.randn(3), ps[0])) is a and key.built == 1
    assert key((torch.randn(3), ps[0].detach().clone())) != a
    empty = StaticKey(frozenset(), accept=_dense)
    assert empty((torch.randn(2),)) == ((), ()) and empty((torch.randn(2),)) == ((), ())
