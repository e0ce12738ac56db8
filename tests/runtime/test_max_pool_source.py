"""The channel-vector max pool (graphfuser/runtime/max_pool.py) without a GPU: every variant's
source compiles with NVRTC (inference, the training forward with window positions, the gather
backward), its output size is eager's for any window, and what it leaves to
eager (a CPU tensor here) is eager's result. tests/cuda/test_max_pool_kernel.py runs it."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

from graphfuser.runtime import max_pool, nvrtc

_OK, _WHY = nvrtc.available()


@pytest.mark.skipif(not _OK, reason=f"NVRTC unavailable: {_WHY}")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("vector", [True, False])
@pytest.mark.parametrize("wide", [False, True])
@pytest.mark.parametrize("kind", ["", "fwd", "bwd"])
def test_every_variant_compiles(dtype, vector, wide, kind):
    v = 16 // torch.empty((), dtype=dtype).element_size() if vector else 1
    name = max_pool.kernel_name(dtype, v, wide, kind)
    src = max_pool.source(dtype, v, wide, kind)
    assert f"void __launch_bounds__(256) {name}(" in src
    if kind == "fwd":       # the window position of the chosen element, a byte per output element
        assert "unsigned char* __restrict__ pos" in src and "q[k] = (unsigned char)(a * kw + e);" in src
    cubin = nvrtc.compile_cubin(src, name, 90)
    assert cubin[:4] == b"\x7fELF"


@settings(max_examples=300, deadline=None)
@given(size=st.integers(1, 40), k=st.integers(1, 7), s=st.integers(1, 4), d=st.integers(1, 3),
       p=st.integers(0, 3), ceil=st.booleans())
def test_output_size_is_eagers(size, k, s, d, p, ceil):
    x = torch.zeros(1, 1, size, 1)
    try:
        want = F.max_pool2d(x, (k, 1), (s, 1), (p, 0), (d, 1), ceil).shape[2]
    except RuntimeError:
        return                  # eager rejects the window (the kernel then defers to it)
    assert max_pool.output_size(size, k, p, s, d, ceil) == want


def test_cpu_tensors_are_eagers():
    x = torch.randn(2, 8, 9, 9).contiguous(memory_format=torch.channels_last)
    got = max_pool.max_pool2d(x, [3, 3], [2, 2], [1, 1], [1, 1], False)
    want = F.max_pool2d(x, 3, 2, 1)
    assert torch.equal(got, want) and got.stride() == want.stride()
    with pytest.raises(RuntimeError):
        max_pool.max_pool2d(x, [3, 3], [2, 2], [2, 2], [1, 1], False)      # eager's error


def test_window_arguments():
    assert max_pool._pair(3, ()) == (3, 3)
    assert max_pool._pair([2, 3], ()) == (2, 3)
    assert max_pool._pair([], (3, 3)) == (3, 3)        # stride=[]: the kernel size
    assert max_pool._pair([4], ()) == (4, 4)
    assert max_pool._pair([1, 2, 3], ()) is None
    assert max_pool._pair(True, ()) is None and max_pool._pair(2.0, ()) is None
