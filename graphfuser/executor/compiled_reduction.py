"""Compiled reduction / normalization groups: lower -> schedule variants -> render -> compile ->
a generated launcher.

``compile_group`` (``compiled.py``) takes this path when a group holds a reduction or a
normalization row. The launcher is straight-line generated Python like the pointwise one: sizes
of the root axes, outputs through ``torch.empty_strided``, the argument tuple, and (CUDA) the
choice of variant from the run-time row size:

- vector variants need the innermost reduced extent and every stride of the vectorized tensors
  divisible by the vector width and 16-byte aligned pointers; otherwise the scalar ones run;
- variants compile (NVRTC) on first use, each from its own source; ``source`` holds them all;
- among the persistent variants the launcher takes the largest P that leaves a row between
  ``MIN_THREADS`` and ``MAX_THREADS`` threads (``ceilDiv(ceilDiv(R, V), P)``, rounded up to a
  warp), else the smallest P that fits; rows wider than that take the multi-pass variant.
  (Measured on an H200: more than 16 elements per thread spill or starve occupancy, and a
  multi-pass row re-read from L2 beats them.)
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from ..codegen.cstyle import render_function, render_source, stride_args
from ..codegen.cstyle_reduction import render_reduction, render_reduction_source
from ..codegen.dialects import CPP, CUDA
from ..codegen.kir import kernel_ir_text
from ..codegen.reduction import lower_reduction_group
from ..codegen.reduction_schedule import (MAX_THREADS, MIN_THREADS, SCRATCH_ROWS, ReductionParams,
                                          reduction_variants, schedule_reduction)
from ..ir.types import full_stride_order
from ..ir.graph import Graph
from ..log import dump

class EmptyReductionError(RuntimeError):
    """max / min over zero elements (eager raises; the fallback reproduces its error)."""


class ReductionGroup:
    """Everything built for one reduction group: kernel IR, variant schedules, source."""

    def __init__(self, sub: Graph, target: str, device: torch.device, name: str) -> None:
        from .compiled import _render_opts

        self.sub, self.target, self.device, self.name = sub, target, device, name
        self.kernel, self.plan = lower_reduction_group(sub, name)
        self.variants: list[tuple[str, Any, ReductionParams]] = []
        dialect = CUDA if target == "cuda" else CPP
        opts = _render_opts("long long")
        fns: list[str] = []
        for params in reduction_variants(self.kernel, target):
            nest = schedule_reduction(self.kernel, params)
            fname = f"{name}_{params.tag}" if target == "cuda" or self.variants else name
            if params.kind == "none":
                fns.append(render_function(self.kernel, nest, dialect, fname, opts))
            else:
                fns.append(render_reduction(self.kernel, nest, dialect, fname, opts, params.max_threads,
                                            params.online, params.scratch))
            self.variants.append((fname, nest, params))
        render = render_source if self.kernel.kind == "none" else render_reduction_source
        self.functions = fns
        self.source = render(fns, dialect)          # every variant: dumps, repros, NVRTC checks
        self.variant_sources = [render([fn], dialect) for fn in fns] if target == "cuda" else []
        nest, params = self.variants[-1][1], self.variants[-1][2]
        dump("fusion_ir", f"Fusion IR of {name}", str(sub))
        dump("scheduler_params", f"Reduction schedule of {name}",
             "\n".join(f"{p}\n" + "\n".join(f"  tv.{h}" for h in n.history) for _, n, p in self.variants))
        dump("kernel_ir", f"Kernel IR of {name}", self.kernel_ir_text())
        dump("cuda_kernel" if target == "cuda" else "cpp_kernel", f"Kernel {name}", self.source,
             "cuda" if target == "cuda" else "cpp")

    def kernel_ir_text(self) -> str:
        k = self.kernel
        return kernel_ir_text(k, self.variants[-1][1],
                              f"kernel {k.name} ({k.kind} reduction, reduced roots {list(k.red_roots)}):")


def launcher_source(cg: ReductionGroup) -> str:
    """Straight-line Python for one call: sizes, outputs, arguments, variant choice, launch."""
    k, plan = cg.kernel, cg.plan
    n_in = len(cg.sub.inputs)
    L = [f"def run({', '.join(f'x{i}' for i in range(n_in))}):"]
    for i in sorted({i for i, _ in plan.axis_source.values()}):
        L.append(f"    s{i} = x{i}.shape")
    size = {a: f"s{i}[{d}]" for a, (i, d) in plan.axis_source.items()}
    for r, axes in enumerate(plan.root_axes):
        L.append(f"    n{r} = " + " * ".join(size[a] for a in axes))
    kept = [r for r in range(k.n_dims) if r not in plan.red_roots]
    L.append("    rows = " + (" * ".join(f"n{r}" for r in kept) or "1"))
    L.append("    nr = " + (" * ".join(f"n{r}" for r in plan.red_roots) or "1"))
    outs = []
    for j, op in enumerate(plan.outputs):
        if j in plan.aliases:
            outs.append(f"x{plan.aliases[j]}")
            continue
        rank = len(op.axes)
        sz = ["1" if a is None else size[a] for a in op.axes]
        st, acc = [""] * rank, "1"
        for d in reversed(full_stride_order(op.order, rank)):
            st[d] = acc
            acc = sz[d] if acc == "1" else f"{acc} * {sz[d]}"
        comma = "," if rank == 1 else ""
        L.append(f"    o{j} = _empty(({', '.join(sz)}{comma}), ({', '.join(st)}{comma}), dtype=_odt{j}, device=_dev)")
        outs.append(f"o{j}")
    args = [f"o{tp.position}.data_ptr()" if t.is_output else f"x{tp.position}.data_ptr()"
            for t, tp in zip(k.tensors, plan.tensors)]
    args += [f"n{r}" for r in range(k.n_dims)]
    for p, r in stride_args(k):
        tp = plan.tensors[p]
        args.append(f"{'o' if k.tensors[p].is_output else 'x'}{tp.position}.stride({tp.dims[r][-1]})")
    args += [f"x{i}" for i in plan.scalar_inputs]
    ret = f"({', '.join(outs)},)"
    if not k.stores:
        return _armed(L + [f"    return {ret}"], n_in)
    if any(op in ("max", "min") for op in plan.reduce_ops):
        L.append("    if nr == 0 and rows:")
        L.append("        raise _Empty('max / min over an empty dim')")
    L.append("    if rows and nr:" if k.kind != "none" else "    if rows * nr:")
    if cg.target == "cpu" and len(cg.variants) > 1:
        L.append(f"        (_fn if nr <= {SCRATCH_ROWS} else _fn2)({', '.join(args)})")
    elif cg.target == "cpu":
        L.append(f"        _fn({', '.join(args)})")
    else:
        L.append(f"        a = ({', '.join(args)},)")
        L += ["        " + line for line in _cuda_choice(cg, len(args))]
        L.append("        f.launch(grid, block, _stream(_devidx), *a)")
    L.append(f"    return {ret}")
    return _armed(L, n_in)


def _armed(L: list[str], n_in: int) -> str:
    """The compiled.py launcher convention: after a failure, the eager fallback runs."""
    params = ", ".join(f"x{i}" for i in range(n_in))
    return "\n".join([L[0], "    if _broken:", f"        return _eager({params})", "    try:"]
                     + ["    " + ln for ln in L[1:]]
                     + ["    except Exception as e:", f"        return _fail(e, ({params}{',' if n_in == 1 else ''}))"]) + "\n"


def _cuda_choice(cg: ReductionGroup, n_args: int) -> list[str]:
    """Lines choosing ``f``, ``grid`` and ``block`` among the CUDA variants."""
    k = cg.kernel
    variants = [p for _, _, p in cg.variants]
    st = stride_args(k)
    first_stride = len(k.tensors) + k.n_dims
    V = max(p.vector for p in variants)
    vec_tensors = [p for p, t in enumerate(k.tensors) if t.dim_kinds and t.dim_kinds[-1] != "bcast"]
    lines = []
    if V > 1:
        aligned = " | ".join(f"a[{p}]" for p in vec_tensors) or "0"
        strides = "".join(f" and a[{first_stride + s}] % {V} == 0" for s, (p, _) in enumerate(st) if p in vec_tensors)
        lines.append(f"vec = n{k.n_dims - 1} % {V} == 0 and not (({aligned}) & 15){strides}")
    else:
        lines.append("vec = False")
    if k.kind == "none":
        scalar = next(i for i, p in enumerate(variants) if p.vector == 1)
        vector = next((i for i, p in enumerate(variants) if p.vector > 1), scalar)
        lines.append(f"f, per = ((_fns[{vector}] or _load({vector})), {128 * V}) if vec else "
                     f"((_fns[{scalar}] or _load({scalar})), 128)")
        lines.append("grid = (rows * nr + per - 1) // per")
        lines.append("grid = (grid if grid < _maxgrid else _maxgrid, 1, 1)")
        lines.append("block = (128, 1, 1)")
        return lines
    if k.kind == "outer":
        tx, ty = variants[0].block
        lines.append("f = _fns[0] or _load(0)")
        lines.append(f"grid = (rows + {tx - 1}) // {tx}")
        lines.append("grid = (grid if grid < _maxgrid else _maxgrid, 1, 1)")
        lines.append(f"block = ({tx}, {ty}, 1)")
        return lines
    for w, cond in ((V, "if vec:"), (1, "else:")):
        if w == 1 and V == 1:
            cond = "if True:"
        lines.append(cond)
        lines.append(f"    nv = (nr + {w - 1}) // {w}")
        chosen = [(i, p) for i, p in enumerate(variants) if p.vector == w and p.persistent]
        multi = next(i for i, p in enumerate(variants) if p.vector == w and not p.persistent)
        branch = "if"
        for i, p in sorted(chosen, key=lambda c: -c[1].persistent):
            P = p.persistent
            lines.append(f"    {branch} {MIN_THREADS * P} <= nv <= {MAX_THREADS * P}:")
            lines.append(f"        f, tx = _fns[{i}] or _load({i}), (nv + {P - 1}) // {P}")
            branch = "elif"
        i, p = min(chosen, key=lambda c: c[1].persistent)
        lines.append(f"    elif nv <= {MAX_THREADS * p.persistent}:")
        lines.append(f"        f, tx = _fns[{i}] or _load({i}), (nv + {p.persistent - 1}) // {p.persistent}")
        lines.append("    else:")
        lines.append(f"        f, tx = _fns[{multi}] or _load({multi}), {variants[multi].block[0]}")
    lines.append("block = ((tx + 31) // 32 * 32 if tx > 32 else 32, 1, 1)")
    lines.append("grid = (rows if rows < _maxgrid else _maxgrid, 1, 1)")
    return lines


def build_reduction_launcher(cg: ReductionGroup) -> Callable:
    k, plan = cg.kernel, cg.plan
    ns: dict[str, Any] = {"_empty": torch.empty_strided, "_dev": cg.device, "_Empty": EmptyReductionError}
    for j, op in enumerate(plan.outputs):
        ns[f"_odt{j}"] = op.dtype
    arg_kind = {torch.float64: "f64", torch.int64: "i64", torch.bool: "i32"}
    kinds = ["ptr"] * len(k.tensors) + ["i64"] * (k.n_dims + len(stride_args(k))) + \
        [arg_kind[s.dtype] for s in k.scalars]
    if cg.target == "cpu":
        from ..runtime.cpu import CpuKernel, compile_cpp

        so = compile_cpp(cg.source)
        ns["_fn"] = CpuKernel(so, cg.variants[0][0], kinds)
        if len(cg.variants) > 1:
            ns["_fn2"] = CpuKernel(so, cg.variants[1][0], kinds)
    else:
        from ..runtime import cuda_driver, nvrtc

        idx = cg.device.index if cg.device.index is not None else torch.cuda.current_device()
        arch = cuda_driver.device_arch(idx)
        fns: list = [None] * len(cg.variants)

        def load(i: int):
            """Variants compile on first use: a launch shape that never occurs costs nothing."""
            fname = cg.variants[i][0]
            fns[i] = cuda_driver.CudaKernel(nvrtc.compile_cubin(cg.variant_sources[i], fname, arch), fname, idx,
                                            kinds)
            return fns[i]

        ns["_fns"], ns["_load"] = fns, load
        ns["_stream"] = cuda_driver.raw_stream
        ns["_devidx"] = idx
        ns["_maxgrid"] = cuda_driver.sm_count(idx) * 32
    src = launcher_source(cg)
    cg.launcher_source = src
    ns.update({"_broken": False, "_eager": None, "_fail": None})
    exec(compile(src, f"<graphfuser launcher {cg.name}>", "exec"), ns)
    run = ns["run"]
    run.namespace = ns
    return run
