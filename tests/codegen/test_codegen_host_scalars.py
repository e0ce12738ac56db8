"""CPU 0-dim tensors in a CUDA group (torch allows them as operands of CUDA ops) are read on
the host and passed as scalar kernel arguments; zero-size and 0-dim groups lower too. The
CUDA source is compiled with NVRTC here; running it needs a GPU (tests/cuda)."""
from __future__ import annotations

import pytest
import torch

from graphfuser.codegen.cstyle import render_source
from graphfuser.codegen.dialects import CUDA
from graphfuser.codegen.lower import lower_group
from graphfuser.ir import parse_graph
from graphfuser.ops import fusible
from graphfuser.runtime import nvrtc
from test_codegen_golden import cuda_functions

GROUP = """graph(%x : Float(4, 8, strides=[8, 1], requires_grad=0, device=cuda:0),
      %s : Double(strides=[], requires_grad=0, device=cpu),
      %k : Long(strides=[], requires_grad=0, device=cpu)):
  %a : Float(4, 8, strides=[8, 1], requires_grad=0, device=cuda:0) = aten::mul(%x, %s)
  %one : int = prim::Constant[value=1]()
  %b : Float(4, 8, strides=[8, 1], requires_grad=0, device=cuda:0) = aten::add(%a, %k, %one)
  return (%b)
"""


def test_cpu_zero_dim_is_a_scalar_argument():
    sub = parse_graph(GROUP)
    for n in sub.block.nodes:
        if n.kind.startswith("aten::"):
            assert fusible(n, "cuda") is None, fusible(n, "cuda")
    kernel, plan = lower_group(sub, "k")
    assert len(kernel.tensors) == 2                      # x and the output; no CPU pointer
    assert [s.dtype for s in kernel.scalars] == [torch.float64, torch.int64]
    assert plan.host_scalars == [1, 2] and plan.scalar_inputs == [1, 2]
    fns = cuda_functions(sub, "k")
    try:
        cubin = nvrtc.compile_cubin(render_source(fns, CUDA), "k_s_i64", 90)
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"NVRTC not available: {e}")
    assert b"k_s_i64" in cubin


def test_cpu_tensor_with_dims_stays_rejected():
    sub = parse_graph(GROUP.replace("%s : Double(strides=[], requires_grad=0, device=cpu)",
                                    "%s : Double(8, strides=[1], requires_grad=0, device=cpu)"))
    mul = next(n for n in sub.block.nodes if n.kind == "aten::mul")
    assert "on cpu" in fusible(mul, "cuda")


def test_zero_dim_group_lowers_to_one_broadcast_root():
    sub = parse_graph("""graph(%x : Float(strides=[], requires_grad=0, device=cpu)):
  %a : Float(strides=[], requires_grad=0, device=cpu) = aten::mul(%x, %x)
  %b : Float(strides=[], requires_grad=0, device=cpu) = aten::tan(%a)
  return (%b)
""")
    kernel, plan = lower_group(sub, "k")
    assert kernel.n_dims == 1 and plan.root_dims == [[]]
    assert all(t.dim_kinds == ("bcast",) for t in kernel.tensors)
