"""Every op-table row, in every dtype the per-op tests fuse, compiles as CUDA with NVRTC.

The groups are exactly the ones ``test_op_table_pointwise`` fuses on the CPU (dense layout):
each family's function is scripted and profiled with the kernel backend replaced by a recorder
(no C++ compile), its fusion groups are retargeted to ``cuda:0`` through their graph text, and
``CompiledGroup`` renders them as the executor would on a GPU. NVRTC runs without a GPU; the
test is skipped, with the reason, only where NVRTC itself is missing.
"""
from __future__ import annotations

import re

import pytest
import torch

import graphfuser
from graphfuser.codegen.cstyle import render_source
from graphfuser.codegen.dialects import CUDA
from graphfuser.executor import compiled
from graphfuser.executor.fusion_eager import eager_runner
from graphfuser.ir import parse_graph, print_graph
from graphfuser.ops import ROWS, lookup
from graphfuser.ops.random import RANDOM_ROWS
from graphfuser.runtime import nvrtc
from test_op_table_pointwise import FAMILIES, FAMILY_DTYPES, family_function, make_inputs

NVRTC_OK, NVRTC_WHY = nvrtc.available()
ARCH = 90


def fused_subgraphs(monkeypatch, family: str, dtype: torch.dtype) -> list:
    """The typed fusion subgraphs of a family's function, without compiling them."""
    subs = []

    def record(group, *args, **kwargs):
        subs.append(group.subgraph)
        return eager_runner(group.subgraph, "fallback")

    monkeypatch.setattr(compiled, "compile_group", record)
    fn, _, _ = family_function(family, dtype)
    sf = graphfuser.script(fn)
    inputs = make_inputs(family, dtype, "dense")
    for _ in range(3):
        sf(*inputs)
    return subs


@pytest.mark.skipif(not NVRTC_OK, reason=f"NVRTC is not available here: {NVRTC_WHY}")
def test_every_row_and_dtype_compiles_with_nvrtc(monkeypatch) -> None:
    old = graphfuser.set_single_node_mode(True)
    try:
        fns, names, covered = [], [], set()
        for family in FAMILIES:
            for dtype in FAMILY_DTYPES[family]:
                for k, sub in enumerate(fused_subgraphs(monkeypatch, family, dtype)):
                    cuda_sub = parse_graph(print_graph(sub).replace("device=cpu", "device=cuda:0"))
                    name = f"{family}_{str(dtype).replace('torch.', '')}_{k}"
                    cg = compiled.CompiledGroup(cuda_sub, "cuda", torch.device("cuda:0"), name)
                    # One variant per group keeps NVRTC time down: the scalar 64-bit-index one
                    # (per-lane code is the same in all four); the goldens compile all four variants.
                    fn_text = [f for f in cg.source.split("\n\n") if "__global__" in f]
                    pick = next(f for f in fn_text if "_s_i64(" in f)
                    fns.append(pick[pick.index('extern "C"'):])
                    names.append(re.search(r"void __launch_bounds__\(\d+\) (\w+)\(", pick).group(1))
                    for n in sub.nodes():
                        row = lookup(n.kind)
                        if row is not None:
                            covered.add((row.name, dtype))
        # random rows draw numbers eager cannot reproduce: tests/ops/test_random.py renders them;
        # a dropout with a literal eval flag is its input before fusion (passes/random.py): the
        # row fuses where the flag is profiled (nn.Dropout's self.training), as an identity
        missing = sorted(r.name for r in ROWS.values() if r.kind in ("pointwise", "cast")
                         and r.name not in RANDOM_ROWS and not r.name.startswith("autocast_to_")
                         and r.name != "dropout"
                         # made by passes/bias.py under grad: tests/passes/test_bias_gradients.py
                         # compiles its groups, forward and backward
                         and r.name != "bias_grad"
                         # made by passes/broadcast_copy.py: tests/passes/test_broadcast_copy.py
                         # compiles its kernels
                         and r.name != "dense_copy"
                         and not any(name == r.name for name, _ in covered))
        assert not missing, f"rows never rendered as CUDA: {missing}"
        dtypes = {dt for _, dt in covered}
        assert dtypes >= {torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32,
                          torch.int64, torch.bool}
        cubin = nvrtc.compile_cubin(render_source(fns, CUDA), names[0], ARCH)
        for name in names:
            assert f".text.{name}\0".encode() in cubin, name
    finally:
        graphfuser.set_single_node_mode(old)
