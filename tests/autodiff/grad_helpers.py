"""Helpers for the autodiff tests: generated functions, fused gradient runs compared with eager."""
from __future__ import annotations

import linecache
from typing import Any, Callable, Sequence

import torch

import graphfuser
from graphfuser.autodiff import STATS
from graphfuser.autodiff.function import DifferentiableGroup
from graphfuser.config import config
from helpers import cuda_ptx, fallback_counter

GRAD_TOL = {
    torch.float64: dict(rtol=1e-7, atol=1e-9),
    torch.float32: dict(rtol=2e-4, atol=2e-5),
    torch.float16: dict(rtol=2e-2, atol=2e-2),
    torch.bfloat16: dict(rtol=8e-2, atol=8e-2),
}
_count = [0]


def make_function(args: Sequence[str], exprs: Sequence[str]) -> Callable:
    """A scriptable function of ``args`` returning each expression of ``exprs`` (a tuple)."""
    _count[0] += 1
    name = f"gen_{_count[0]}"
    body = "\n".join(f"    o{k} = {e}" for k, e in enumerate(exprs))
    ret = ", ".join(f"o{k}" for k in range(len(exprs)))
    ann = ", ".join(f"{a}: torch.Tensor" for a in args)
    rtype = "Tuple[" + ", ".join("torch.Tensor" for _ in exprs) + "]"
    src = f"from typing import Tuple\nimport torch\n\ndef {name}({ann}) -> {rtype}:\n{body}\n    return ({ret},)\n"
    filename = f"<graphfuser-autodiff-{name}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    ns: dict[str, Any] = {"__name__": "graphfuser_autodiff_generated"}
    exec(compile(src, filename, "exec"), ns)
    return ns[name]


def differentiable_groups(sf: graphfuser.ScriptedFunction) -> list[DifferentiableGroup]:
    return [r for r in sf._runners.values() if isinstance(r, DifferentiableGroup)]


def grads_of(fn: Callable, inputs: Sequence[torch.Tensor], gouts: Sequence[torch.Tensor]) -> list:
    outs = fn(*inputs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    pairs = [(o, g) for o, g in zip(outs, gouts) if o.requires_grad]
    diff = [t for t in inputs if t.requires_grad]
    return list(torch.autograd.grad([o for o, _ in pairs], diff, [g for _, g in pairs], allow_unused=True))


def check_grads(fn: Callable, inputs: Sequence[torch.Tensor], tol: dict, calls: int = 4) -> graphfuser.ScriptedFunction:
    """Script ``fn``; call it and differentiate ``calls`` times with the fallback disabled;
    compare every call's input gradients with eager's, and check that the last call ran the
    fused forward and a fused backward (no fallback in either)."""
    outs = fn(*inputs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    gouts = [torch.randn_like(o) if o.dtype.is_floating_point else None for o in outs]
    ref = grads_of(fn, inputs, gouts)
    sf = graphfuser.script(fn)
    with config.override(disable=["fallback"]):
        for k in range(calls):
            before = dict(STATS)
            got = grads_of(sf, inputs, gouts)
            for r, gr in zip(ref, got):
                if r is None:
                    assert gr is None or not gr.any()
                    continue
                assert gr is not None
                torch.testing.assert_close(gr, r, **tol)
        assert STATS["forward"] > before["forward"] and STATS["backward"] > before["backward"], STATS
        dgs = differentiable_groups(sf)
        assert dgs, str(sf._optimized)
        counters = [fallback_counter(dg.backward) for dg in dgs]
        for dg in dgs:
            assert "FusionGroup" in str(dg.backward._optimized), str(dg.backward._optimized)
        grads_of(sf, inputs, gouts)
        assert all(c["fallback"] == 0 for c in counters)
    return sf


def compile_as_cuda(subs: Sequence, prefix: str) -> None:
    """Render each CPU fusion subgraph of ``subs`` as a CUDA kernel and compile it with NVRTC
    (to PTX for compute_90: the assembler's third of the time is left to the GPU machine's runs);
    every kernel the source defines must be an entry of the PTX."""
    import re

    from graphfuser.executor import compiled
    from graphfuser.executor.compiled_reduction import ReductionGroup
    from graphfuser.ir import parse_graph, print_graph
    from graphfuser.ops.axes import needs_axes
    from graphfuser.runtime import nvrtc

    device = torch.device("cuda:0")
    for k, sub in enumerate(subs):
        cuda_sub = parse_graph(print_graph(sub).replace("device=cpu", "device=cuda:0"))
        cg = ReductionGroup(cuda_sub, "cuda", device, f"{prefix}_{k}") if needs_axes(cuda_sub.block.nodes) \
            else compiled.CompiledGroup(cuda_sub, "cuda", device, f"{prefix}_{k}")
        names = re.findall(r"__global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(", cg.source)
        assert names, cg.source
        ptx = cuda_ptx(cg.source, names[0], 90)
        for name in names:
            assert f".entry {name}(".encode() in ptx, name
