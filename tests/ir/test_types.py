"""TensorType.of / merge / specialization: what profiling learns and what guards check."""
import pytest
import torch

from graphfuser.ir import TensorType, layout_of


def of(t):
    return TensorType.of(t)


def test_of_dense():
    t = of(torch.rand(2, 3, 4))
    assert t.dtype == torch.float32 and t.sizes == (2, 3, 4) and t.strides == (12, 4, 1)
    assert t.stride_order == (0, 1, 2) and t.contiguity == (True, True, True)
    assert t.device == torch.device("cpu") and t.requires_grad is False and t.complete and t.rank == 3


def test_of_transposed_sliced_expanded_channels_last():
    t = of(torch.rand(3, 2).t())
    assert t.stride_order == (1, 0) and t.contiguity == (True, True)
    t = of(torch.rand(4, 16)[:, ::2])
    assert t.stride_order == (0, 1) and t.contiguity == (True, False)
    t = of(torch.rand(4, 16)[:, :8])
    assert t.contiguity == (False, True)
    t = of(torch.rand(4, 1).expand(4, 8))
    assert t.strides == (1, 0) and t.contiguity == (False, False)
    t = of(torch.rand(2, 3, 4, 5).to(memory_format=torch.channels_last))
    assert t.stride_order == (0, 2, 3, 1) and all(t.contiguity)


def test_broadcast_dims_are_left_out_of_the_layout():
    t = of(torch.rand(4, 1, 8))
    assert t.broadcast_dims == (1,)
    assert t.stride_order == (0, 2) and t.contiguity == (True, True)
    assert layout_of((1, 1), (1, 1)) == ((), ())


def test_of_requires_grad_and_dtype():
    t = of(torch.ones(3, dtype=torch.float16, requires_grad=True))
    assert t.dtype == torch.float16 and t.requires_grad is True
    assert str(t) == "Half(3, strides=[1], requires_grad=1, device=cpu)"


def test_merge_changed_dim_becomes_symbolic():
    m = of(torch.rand(4, 8)).merge(of(torch.rand(7, 8)))
    assert m.sizes == (-1, 8) and m.strides == (8, 1)
    assert m.stride_order == (0, 1) and m.contiguity == (True, True) and m.complete
    assert str(m).startswith("Float(*, 8, strides=[8, 1], stride_order=[0, 1], contiguity=[1, 1]")
    m = of(torch.rand(4, 8)).merge(of(torch.rand(4, 9)))
    assert m.sizes == (4, -1) and m.strides == (-1, 1) and m.complete


def test_merge_dim_that_stayed_one_stays_broadcast():
    m = of(torch.rand(4, 1, 8)).merge(of(torch.rand(5, 1, 8)))
    assert m.sizes == (-1, 1, 8) and m.broadcast_dims == (1,)
    assert m.stride_order == (0, 2) and m.complete


def test_merge_dim_that_was_one_once_is_not_broadcast():
    m = of(torch.rand(4, 1, 8)).merge(of(torch.rand(4, 6, 8)))
    assert m.sizes == (4, -1, 8) and m.broadcast_dims == ()
    assert not m.complete  # the layout of dim 1 is unknown


def test_merge_ands_contiguity():
    m = of(torch.rand(4, 16)[:, :8]).merge(of(torch.rand(4, 8)))
    assert m.stride_order == (0, 1) and m.contiguity == (False, True)
    assert m.merge(of(torch.rand(4, 8))).contiguity == (False, True)  # stays lost


def test_merge_layout_change_is_unknown():
    m = of(torch.rand(4, 8)).merge(of(torch.rand(8, 4).t()))
    assert m.sizes == (4, 8) and m.strides == (-1, -1)
    assert m.stride_order is None and m.contiguity is None and not m.complete


def test_merge_dtype_device_rank_change():
    m = of(torch.rand(4)).merge(of(torch.rand(4, dtype=torch.float64)))
    assert m.dtype is None and m.sizes is None and m.device == torch.device("cpu")
    m = of(torch.rand(4)).merge(of(torch.rand(4, 1)))
    assert m.dtype == torch.float32 and m.sizes is None and not m.complete
    m = of(torch.rand(4)).merge(of(torch.rand(4, device="meta")))
    assert m.device is None


def test_merge_requires_grad():
    m = of(torch.rand(4)).merge(of(torch.rand(4, requires_grad=True)))
    assert m.requires_grad is None
    assert of(torch.rand(4)).merge(of(torch.rand(5))).requires_grad is False


def test_specialization_ignores_sizes():
    a, b = of(torch.rand(4, 8)), of(torch.rand(9, 3))
    assert a.specialization() == b.specialization()
    assert a.specialization() != of(torch.rand(1, 8)).specialization()          # broadcast dim
    assert a.specialization() != of(torch.rand(8, 4).t()).specialization()     # stride order
    assert a.specialization() != of(torch.rand(4, 8).half()).specialization()  # dtype
    assert a.specialization() != of(torch.rand(4, 8, 1)).specialization()      # rank
    assert a.specialization() != of(torch.rand(4, 8, requires_grad=True)).specialization()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32,
                                   torch.int64, torch.bool, torch.int8, torch.uint8])
def test_dtype_names(dtype):
    from graphfuser.ir import parse_type

    t = of(torch.zeros(2, dtype=dtype))
    assert parse_type(str(t)).dtype == dtype
