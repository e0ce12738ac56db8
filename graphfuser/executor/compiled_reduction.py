"""Compiled reduction / normalization groups: lower -> schedule variants -> render -> compile ->
a generated launcher.

``compile_group`` (``compiled.py``) takes this path when a group holds a reduction or a
normalization row. The launcher is straight-line generated Python like the pointwise one: sizes
of the root axes, outputs through ``torch.empty_strided``, the argument tuple, and (CUDA) the
choice of variant from the run-time row size:

- vector variants need the vector root's extent (the innermost reduced root; outer kernels: the
  last kept root, V adjacent columns per thread) and every stride of the vectorized tensors
  divisible by the vector width and 16-byte aligned pointers; otherwise the scalar ones run;
- each variant exists with 32-bit and 64-bit indices; the 32-bit one runs when every tensor's
  largest offset is below ``INDEX_LIMIT``;
- variants compile (NVRTC) on first use, each from its own source; ``source`` holds them all;
- among the persistent variants the launcher takes the largest P that leaves a row between
  ``cuda.reduction_min_threads`` and ``MAX_THREADS`` threads (``ceilDiv(ceilDiv(R, V), P)``,
  rounded up to a warp), else the smallest P that fits; rows wider than that take the
  multi-pass variant;
- the grid is as many blocks as fit on the device at once (occupancy, with the prefetch
  stages' dynamic shared memory counted); rows beyond it grid-stride, so each block's next
  row is loading while it reduces this one.
- split variants (few rows / column tiles, long reductions: statistics over N, H, W) spread
  each row or tile over ``gridDim.y`` blocks, with a float64-slot workspace for the partials
  and zeroed counters (kept per stream: ``runtime/scratch.py``); those with grid barriers
  (several passes) launch cooperatively with a grid of at most the resident blocks.

Measured on an H200 (``tools/sweep_reductions.py``, bf16 rows of 1024..16384): one prefetch
stage and up to 32 elements per thread put layer norm, softmax and RMSNorm at 78-86% of copy
bandwidth; without the prefetch they ran at 55-65%.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from ..codegen.cstyle import render_function, render_source, serial_twin, stride_args
from ..codegen.reduction.render import exact_products, render_reduction, render_reduction_source
from ..codegen.dialects import CPP, CUDA
from ..ir.kir import kernel_ir_text
from ..codegen.reduction.lower import lower_reduction_group
from ..codegen.reduction.schedule import (MAX_THREADS, OUTER_BLOCK, OUTER_NARROW_BLOCK, SCRATCH_ROWS,
                                          ReductionParams, reduction_variants, schedule_reduction, vector_root)
from ..ir.graph import Graph
from ..config import config
from ..log import dump
from .compiled import allocation

class DeferToEager(Exception):
    """Raised inside a launcher for a call the kernel does not compute (see ``launcher_source``);
    the launcher runs the eager fallback for that call only."""


INDEX_LIMIT = 2 ** 31 - 2 ** 24   # 32-bit variants: every offset (and loop overshoot) below 2**31


class ReductionGroup:
    """Everything built for one reduction group: kernel IR, variant schedules, source.

    ``variants`` holds ``(fname, nest, params, index type, divisors, shared bytes per thread)``. On CUDA each schedule
    is rendered twice, with 32-bit indices (first half) and 64-bit ones (second half); the
    launcher takes the 32-bit one when every offset fits. ``divisors``: the extents a 32-bit
    ``none`` (pointwise-shaped) variant divides by with host-computed magic numbers."""

    def __init__(self, sub: Graph, target: str, device: torch.device, name: str) -> None:
        from .compiled import _render_opts

        self.sub, self.target, self.device, self.name = sub, target, device, name
        self.kernel, self.plan = lower_reduction_group(sub, name)
        self.variants: list[tuple[str, Any, ReductionParams, str, list[str], int]] = []
        self.grid_sync: list[bool] = []     # per variant: blocks wait for each other (cooperative launch)
        self.column_registers: list[bool] = []   # per variant: column partials written whole, not added
        dialect = CUDA if target == "cuda" else CPP
        fns: list[str] = []
        self.stages, self.min_threads, self.uncapped = auto_knobs(self.kernel)
        schedules = [(p, schedule_reduction(self.kernel, p))
                     for p in reduction_variants(self.kernel, target, int(config.cuda["reduction_register_elements"]))]
        schedules = [(p, n) for p, n in schedules if not p.split or _splittable(self.kernel, n, dialect)]
        for itype, tag in ((("int", "_i32"), ("long long", "_i64")) if target == "cuda" else (("long long", ""),)):
            opts = _render_opts(itype)
            opts.prefetch = not config.is_disabled("prefetch")
            opts.prefetch_stages = self.stages
            opts.cache_computed = bool(config.cuda["reduction_cache_computed"])
            for params, nest in schedules:
                fname = f"{name}_{params.tag}{tag}" if target == "cuda" or self.variants else name
                info: dict = {}
                if params.kind == "none":
                    opts.fast_div = itype == "int"
                    fns.append(render_function(self.kernel, nest, dialect, fname, opts, info))
                else:
                    fns.append(render_reduction(self.kernel, nest, dialect, fname, opts, params.max_threads,
                                                params.online, params.scratch, info))
                self.variants.append((fname, nest, params, itype, info.get("divisors", []),
                                      info.get("shared_per_thread", 0)))
                self.grid_sync.append(bool(info.get("grid_sync")))
                self.column_registers.append(bool(info.get("column_registers")))
        self.exact_products = exact_products(self.kernel)
        if self.kernel.kind == "none":
            render = render_source
        else:
            def render(functions: list[str], d) -> str:
                return render_reduction_source(functions, d, contract=not self.exact_products)
        if target == "cpu":
            fns = [serial_twin(fn) for fn in fns]      # no OpenMP runtime below its threshold
        self.functions = fns
        self.source = render(fns, dialect)          # every variant: dumps, repros, NVRTC checks
        self.variant_sources = [render([fn], dialect) for fn in fns] if target == "cuda" else []
        nest, params = self.variants[-1][1], self.variants[-1][2]
        dump("fusion_ir", f"Fusion IR of {name}", str(sub))
        dump("scheduler_params", f"Reduction schedule of {name}",
             "\n".join(f"{p}\n" + "\n".join(f"  tv.{h}" for h in n.history) for p, n in schedules))
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
    for i in sorted({i for i, _ in plan.axis_source.values()} | {i for i, _, _ in plan.axis_uses}):
        L.append(f"    s{i} = x{i}.shape")
    size = {a: f"s{i}[{d}]" for a, (i, d) in plan.axis_source.items()}
    for r, axes in enumerate(plan.root_axes):
        L.append(f"    n{r} = " + (" * ".join(size[a] for a in axes) or "1"))
    kept = [r for r in range(k.n_dims) if r not in plan.red_roots]
    L.append("    rows = " + (" * ".join(f"n{r}" for r in kept) or "1"))
    L.append("    nr = " + (" * ".join(f"n{r}" for r in plan.red_roots) or "1"))
    # Cases the kernel does not compute run the eager fallback for this call (eager's values
    # or eager's error): an empty reduced extent (identities, NaN means, max / min raise) and
    # sizes that break a relation the kernel relies on (operands of one axis of different
    # sizes, normalized_shape vs the trailing dims, ...).
    defer = [f"s{i}[{d}] != {size[a]}" for i, d, a in plan.axis_uses]
    for a, e in plan.size_checks:
        lhs = "1" if a is None else size[a]
        defer.append(f"{lhs} != " + (f"x{e[1]}" if isinstance(e, tuple) else str(e)))
    if k.stores:
        # An empty domain runs the eager fallback for that call: an output without the empty
        # axis (exp(w) of a [33] weight next to a softmax over an empty batch) has elements no
        # iteration writes, an empty reduced extent needs identities / NaN means / max's error,
        # and eager's empty-input paths have their own errors (instance norm of an empty batch
        # with a weight raises IndexError).
        defer.insert(0, "not rows or not nr")
    if defer:
        L.append(f"    if {' or '.join(defer)}:")
        L.append("        raise _Defer")
    outs = []
    columns = column_outputs(cg)
    writes = getattr(cg.sub, "writes_into", {})     # outputs written into inputs (passes/in_place.py)
    for j, op in enumerate(plan.outputs):
        if j in plan.aliases:
            outs.append(f"x{plan.aliases[j]}" + (".detach()" if j in plan.detached else ""))
            continue
        outs.append(f"o{j}")
        if j in writes and j not in columns:
            L.append(f"    o{j} = x{writes[j]}")
        elif j not in columns:
            sz = ["1" if a is None else size[a] for a in op.axes]
            L.append(f"    o{j} = {allocation(j, sz, op.order)}")
    # column-sum partials: pointers filled in once the slots are known (``_column_lines``)
    args = ["0" if t.partials else f"o{tp.position}.data_ptr()" if t.is_output else f"x{tp.position}.data_ptr()"
            for t, tp in zip(k.tensors, plan.tensors)]
    args += [f"n{r}" for r in range(k.n_dims)]
    for p, r in stride_args(k):
        tp = plan.tensors[p]
        args.append(f"{'o' if k.tensors[p].is_output else 'x'}{tp.position}.stride({tp.dims[r][-1]})")
    args += [f"x{i}" for i in plan.scalar_inputs]
    ret = f"({', '.join(outs)},)"
    if not k.stores:
        return _armed(L + [f"    return {ret}"], n_in)
    L.append("    if rows and nr:" if k.kind != "none" else "    if rows * nr:")
    if cg.target == "cpu":
        L.append(f"        a = ({', '.join(args)},)")
        if columns:
            many = f"max(_threads, (rows + {SLOT_ROWS - 1}) // {SLOT_ROWS})"
            L.append(f"        slots = rows if rows < _threads else {many}")
            L += ["        " + line for line in _column_lines(cg, columns)]
        L.append(f"        (_fn if nr <= {SCRATCH_ROWS} else _fn2)(_pk(*a))" if len(cg.variants) > 1
                 else "        _fn(_pk(*a))")
    else:
        L.append(f"        a = ({', '.join(args)},)")
        L += ["        " + line for line in _cuda_choice(cg, len(args))]
        launch = "        f.launch(grid, block, _stream(_devidx), *a" + (", shared_mem=sh)" if k.kind == "inner" else ")")
        if columns and finalized(cg, columns):
            L.append("        slots = grid[0]")
            L += ["        " + line for line in _finalized_lines(cg, columns, size, launch)]
            L.append(f"    return {ret}")
            return _armed(L, n_in)
        if columns:
            L.append("        slots = grid[0]")
            L += ["        " + line for line in _column_lines(cg, columns)]
        L.append(launch)
    shared = _shared_partials(cg, columns)
    if shared:
        n = len(columns)
        L.append("        if slots == 1:")
        L.append(f"            ws = w.as_strided(({n}, nr), (span, 1))")
        L.append("        else:")
        L.append(f"            ws = w.as_strided(({n}, slots, nr), (span, nr, 1)).sum(1)")
    order = sorted(columns.values())
    for j, p in columns.items():
        # the slots' sum in the partials' dtype, then the output's (as eager's sum accumulates)
        sz = ["1" if a is None else size[a] for a in plan.outputs[j].axes]
        cast = "" if plan.outputs[j].dtype == k.tensors[p].dtype else f".to(_odt{j})"
        summed = f"ws[{order.index(p)}]" if shared else f"w{p}.sum(0)"
        L.append(f"        o{j} = {summed}.view(({', '.join(sz)}{',' if len(sz) == 1 else ''})){cast}")
    L.append(f"    return {ret}")
    return _armed(L, n_in)


PARTIALS_ALIGN = 64   # elements: each partials block of a shared workspace starts 256-byte aligned
# CPU column sums: at most this many rows per slot. A slot adds its rows one after the other,
# so with one slot per thread a [32768, 256] layer norm's bias gradient was a 16,384-term serial
# float sum per column; with slots of 64 rows the serial part is short and torch's cascade sum
# over the slots does the rest (the partials are 1/64 of the rows' bytes).
SLOT_ROWS = 64


def _shared_partials(cg: ReductionGroup, columns: dict[int, int]) -> bool:
    """Whether the column-sum partials share one workspace: two or more, of one dtype."""
    return len(columns) > 1 and len({cg.kernel.tensors[p].dtype for p in columns.values()}) == 1


def _column_lines(cg: ReductionGroup, columns: dict[int, int]) -> list[str]:
    """Launcher lines allocating the column-sum partials ([slots, reduced extents] each, zeroed:
    the schedules that accumulate in memory add into them) and passing them with ``gf_slots``.

    Partials of one dtype share one workspace (``span`` elements per partial), zeroed by one
    call and summed over the slots by one (none where there is one slot: the CPU with one thread
    or one row): a layer norm's weight and bias gradients cost one allocation and one sum
    instead of two of each, kernels on the GPU."""
    order = sorted(columns.values())
    if not _shared_partials(cg, columns):
        lines = []
        for p in order:
            lines.append(f"w{p} = _zeros((slots, nr), dtype={cg.kernel.tensors[p].dtype}, device=_dev)")
            lines.append(f"a = a[:{p}] + (w{p}.data_ptr(),) + a[{p + 1}:]")
        return lines + ["a = a + (slots,)"]
    dtype = cg.kernel.tensors[order[0]].dtype
    item = dtype.itemsize
    lines = [f"span = (slots * nr + {PARTIALS_ALIGN - 1}) // {PARTIALS_ALIGN} * {PARTIALS_ALIGN}",
             f"w = _zeros({len(order)} * span, dtype={dtype}, device=_dev)",
             "wp = w.data_ptr()"]
    return lines + [_spliced_partials(order, item)]


def _spliced_partials(order: list[int], item: int) -> str:
    """The line that puts each partials block of the workspace at ``wp`` (``span`` elements of
    ``item`` bytes apart) into the argument tuple, and appends the slot count."""
    parts, prev = [], 0
    for i, p in enumerate(order):
        parts += [f"a[{prev}:{p}]", f"(wp{f' + {i} * span * {item}' if i else ''},)"]
        prev = p + 1
    return f"a = {' + '.join(parts)} + a[{prev}:] + (slots,)"


def column_outputs(cg: ReductionGroup) -> dict[int, int]:
    """Output index -> kernel tensor of its column-sum partials."""
    return {tp.position: p for p, (t, tp) in enumerate(zip(cg.kernel.tensors, cg.plan.tensors)) if t.partials}


def finalized(cg: ReductionGroup, columns: dict[int, int]) -> bool:
    """Whether a CUDA group's column sums are finalized by ``runtime/column_sums.py``'s kernel:
    partials of one dtype, outputs of one dtype, at most ``MAX_OUTPUTS`` of them."""
    from ..runtime.column_sums import MAX_OUTPUTS, supported

    accs = {cg.kernel.tensors[p].dtype for p in columns.values()}
    outs = {cg.plan.outputs[j].dtype for j in columns}
    return len(accs) == 1 and len(outs) == 1 and len(columns) <= MAX_OUTPUTS and supported(*accs, *outs)


def _finalized_lines(cg: ReductionGroup, columns: dict[int, int], size: dict, launch: str) -> list[str]:
    """CUDA launcher lines of a row kernel whose column sums ``column_sums.py``'s kernel adds up:
    the partials in the stream's scratch workspace (zeroed only for kernels that add into it),
    the row kernel, the outputs, the finalizing launch."""
    order = sorted(columns.values())
    item = cg.kernel.tensors[order[0]].dtype.itemsize
    lines = [f"span = (slots * nr + {PARTIALS_ALIGN - 1}) // {PARTIALS_ALIGN} * {PARTIALS_ALIGN}",
             f"wp, keep = _colws(_stream(_devidx), {len(order)} * span * {item}, f.zero_columns)"]
    lines += [_spliced_partials(order, item), launch.strip()]
    ptrs = []
    for p in order:
        j = next(j for j, q in columns.items() if q == p)
        sz = ["1" if a is None else size[a] for a in cg.plan.outputs[j].axes]
        lines.append(f"o{j} = _empty_c(({', '.join(sz)}{',' if len(sz) == 1 else ''}), dtype=_odt{j}, device=_dev)")
        ptrs.append(f"o{j}.data_ptr()")
    from ..runtime.column_sums import MAX_OUTPUTS

    ptrs += ["0"] * (MAX_OUTPUTS - len(ptrs))
    lines.append(f"_colsum.launch(((nr + 31) // 32, {len(order)}, 1), (32, 32 if slots >= 32 else 8, 1), "
                 f"_stream(_devidx), wp, span, slots, nr, {', '.join(ptrs)})")
    return lines


def _armed(L: list[str], n_in: int) -> str:
    """The compiled.py launcher convention: after a failure, the eager fallback runs."""
    params = ", ".join(f"x{i}" for i in range(n_in))
    return "\n".join([L[0], "    if _broken:", f"        return _eager({params})", "    try:"]
                     + ["    " + ln for ln in L[1:]]
                     + ["    except _Defer:", "        pass",
                        "    except Exception as e:", f"        return _fail(e, ({params}{',' if n_in == 1 else ''}))",
                        f"    return _fallback({params})"]) + "\n"


def _small_index(cg: ReductionGroup, first_stride: int) -> str:
    """The launcher's test that every tensor's largest offset fits the 32-bit variants."""
    k = cg.kernel
    st = {pr: s for s, pr in enumerate(stride_args(k))}
    tests = ["rows * nr"]
    for p, t in enumerate(k.tensors):
        terms = [f"n{r}" if kind == "unit" else f"a[{first_stride + st[(p, r)]}] * n{r}"
                 for r, kind in enumerate(t.dim_kinds) if kind != "bcast" and not (kind == "unit" and t.is_output)]
        if terms and not t.is_output:
            tests.append(" + ".join(terms))
    return " and ".join(f"{x} < {INDEX_LIMIT}" for x in dict.fromkeys(tests))


def _cuda_choice(cg: ReductionGroup, n_args: int) -> list[str]:
    """Lines choosing ``f``, ``grid`` and ``block`` among the CUDA variants: ``o`` selects the
    32-bit half of ``_fns`` (0) or the 64-bit half."""
    k = cg.kernel
    half = len(cg.variants) // 2
    variants = [v[2] for v in cg.variants[:half]]
    st = stride_args(k)
    first_stride = len(k.tensors) + k.n_dims
    V = max(p.vector for p in variants)
    vr = vector_root(k)
    vec_tensors = [p for p, t in enumerate(k.tensors) if t.dim_kinds and t.dim_kinds[vr] != "bcast"]
    lines = [f"small = {_small_index(cg, first_stride)}", f"o = 0 if small else {half}"]
    if V > 1:
        aligned = " | ".join(f"a[{p}]" for p in vec_tensors) or "0"
        strides = "".join(f" and a[{first_stride + s}] % {V} == 0" for s, (p, _) in enumerate(st) if p in vec_tensors)
        lines.append(f"vec = n{vr} % {V} == 0 and not (({aligned}) & 15){strides}")
    else:
        lines.append("vec = False")
    if k.kind == "none":
        scalar = next(i for i, p in enumerate(variants) if p.vector == 1)
        vector = next((i for i, p in enumerate(variants) if p.vector > 1), scalar)
        per = variants[scalar].block[0] * variants[scalar].unroll
        lines.append(f"j, per = ({vector}, {per * V}) if vec else ({scalar}, {per})")
        lines.append("f = _fns[j + o] or _load(j + o)")
        for j in sorted({scalar, vector}):
            divs = cg.variants[j][4]
            if divs:
                lines.append(f"if small and j == {j}:")
                lines.append("    a = a + " + " + ".join(f"(_MG({d}) or _magic({d}))" for d in divs))
        lines.append("grid = (rows * nr + per - 1) // per")
        lines.append("grid = (grid if grid < _maxgrid else _maxgrid, 1, 1)")
        lines.append(f"block = ({variants[scalar].block[0]}, 1, 1)")
        return lines
    if k.kind == "outer":
        return lines + _outer_choice(cg, variants)
    for w, cond in ((V, "if vec:"), (1, "else:")):
        if w == 1 and V == 1:
            cond = "if True:"
        lines.append(cond)
        lines.append(f"    nv = (nr + {w - 1}) // {w}")
        chosen = [(i, p) for i, p in enumerate(variants) if p.vector == w and p.persistent]
        multi = next(i for i, p in enumerate(variants) if p.vector == w and not p.persistent and not p.split)
        split = next((i for i, p in enumerate(variants) if p.vector == w and p.split), None)
        branch = "if"
        if split is not None:
            # a kernel whose blocks meet at barriers splits rows that leave the device half
            # idle (its alternative re-reads whole rows in one block each); one that does not
            # splits only the fewest, longest rows
            if cg.grid_sync[split]:
                few = f"rows <= {SPLIT_SYNC_ROWS} * _sms and nv >= {SPLIT_SYNC_MIN_VECTORS}"
            else:
                few = f"rows * {SPLIT_ROWS} <= _sms and nv >= {SPLIT_MIN_VECTORS}"
            lines.append(f"    if {few}:")
            lines.append(f"        f, tx, sh, chunks = _fns[{split} + o] or _load({split} + o), "
                         f"{variants[split].block[0]}, 0, (nv + {variants[split].block[0] - 1}) // "
                         f"{variants[split].block[0]}")
            branch = "elif"
        lo, wide = cg.min_threads
        lines.insert(len(lines) - (2 if split is not None else 0),
                     f"    lo = {wide} if nv >= {WIDE_ROW_VECTORS} else {lo}" if wide != lo else f"    lo = {lo}")
        for i, p in sorted(chosen, key=lambda c: -c[1].persistent):
            P = p.persistent
            lines.append(f"    {branch} {P} * lo <= nv <= {MAX_THREADS * P}:")
            lines.append(f"        f, tx, sh = _fns[{i} + o] or _load({i} + o), (nv + {P - 1}) // {P}, {cg.variants[i][5]}")
            branch = "elif"
        i, p = min(chosen, key=lambda c: c[1].persistent)
        lines.append(f"    elif nv <= {MAX_THREADS * p.persistent}:")
        lines.append(f"        f, tx, sh = _fns[{i} + o] or _load({i} + o), (nv + {p.persistent - 1}) // {p.persistent}, "
                     f"{cg.variants[i][5]}")
        lines.append("    else:")
        lines.append(f"        f, tx, sh = _fns[{multi} + o] or _load({multi} + o), {variants[multi].block[0]}, 0")
    lines.append("block = ((tx + 31) // 32 * 32 if tx > 32 else 32, 1, 1)")
    lines.append("sh = sh * block[0]")
    if any(p.split for p in variants):
        n_red = len(k.reductions())
        lines.append("if chunks:")
        lines.append("    cap = f.resident_blocks(block[0], sh)     # every block resident: the barriers need it")
        lines.append("    gx = rows if rows < cap else cap")
        lines.append("    gy = cap // gx")
        lines.append("    gy = chunks if chunks < gy else (gy if gy > 1 else 1)")
        lines.append("    grid = (gx, gy, 1)")
        lines.append(f"    wp, sp, keep = _scratch(_stream(_devidx), {n_red} * rows * gy, rows, f.cooperative)")
        lines.append("    a = a + (wp, sp)")
        lines.append("else:")
        lines += ["    " + line for line in _row_grid(cg)]
        lines.insert(2, "chunks = 0")
    else:
        lines += _row_grid(cg)
    return lines


MAX_GRID_X = 2 ** 31 - 1
UNCAPPED_MIN_THREADS = 64    # an uncapped kernel's blocks of fewer threads take the resident grid


def _row_grid(cg: ReductionGroup) -> list[str]:
    """The grid of a kernel whose rows are not split: one block per row (``uncapped``, rows
    beyond gridDim.x's limit grid-stride) or as many as ``_grid_cap`` allows."""
    capped = [f"cap = {_grid_cap('block[0]', 'sh')}", "grid = (rows if rows < cap else cap, 1, 1)"]
    if cg.uncapped:
        # narrow rows (a block of one warp) keep the resident grid: blocks of 32 threads over
        # one short row each hold too few bytes in flight (layer norm [200704, 96] bf16 on an
        # H200: 0.126 ms uncapped, 0.073 ms resident)
        return [f"if block[0] >= {UNCAPPED_MIN_THREADS}:",
                f"    grid = (rows if rows < {MAX_GRID_X} else {MAX_GRID_X}, 1, 1)",
                "else:"] + ["    " + line for line in capped]
    return capped


def _outer_choice(cg: ReductionGroup, variants: list[ReductionParams]) -> list[str]:
    """Outer reductions: ``ceilDiv(rows, TIDx * V)`` column tiles of one block each, or (few
    tiles, long columns) the split variant, ``gridDim.y`` blocks per tile, as many as are
    resident at once (its barriers need every block resident; rows beyond the grid
    grid-stride). The vector variants (V adjacent columns per thread) run where ``vec``."""
    k = cg.kernel
    tx, ty = OUTER_BLOCK
    V = max(p.vector for p in variants)

    def index(vector: int, split: bool, block=OUTER_BLOCK):
        return next((i for i, p in enumerate(variants) if p.vector == vector and p.split == split
                     and p.block == block), None)

    scalar, scalar_split = index(1, False), index(1, True)
    wide, wide_split = (index(V, False), index(V, True)) if V > 1 else (None, None)
    narrow, narrow_split = (index(V, False, OUTER_NARROW_BLOCK), index(V, True, OUTER_NARROW_BLOCK)) \
        if V > 1 else (None, None)
    lines = [f"block, ty = ({tx}, {ty}, 1), {ty}"]
    if wide is not None and (wide_split is None) == (scalar_split is None):
        lines += [f"cols = {tx * V} if vec else {tx}",
                  f"j, js = ({wide}, {wide_split}) if vec else ({scalar}, {scalar_split})"]
        if narrow is not None and (narrow_split is None) == (scalar_split is None):
            # few columns: 16 x V of them per tile, 64 rows at a time (OUTER_NARROW_BLOCK)
            nx, ny = OUTER_NARROW_BLOCK
            lines += [f"if vec and rows <= {nx * V}:",
                      f"    block, ty, cols, j, js = ({nx}, {ny}, 1), {ny}, {nx * V}, {narrow}, {narrow_split}"]
    else:
        lines += [f"cols = {tx}", f"j, js = {scalar}, {scalar_split}"]
    lines.append("tiles = (rows + cols - 1) // cols")
    branch = "if True:"
    if scalar_split is not None:
        lines.append(f"if tiles < {OUTER_SPLIT_TILES} * _sms and nr >= {OUTER_SPLIT_MIN_ROWS}:")
        lines.append("    f = _fns[js + o] or _load(js + o)")
        lines.append(f"    cap = f.resident_blocks({tx * ty}, 0)")
        lines.append("    gx = tiles if tiles < cap else cap")
        lines.append("    gy, chunks = cap // gx, (nr + ty - 1) // ty")
        lines.append("    gy = chunks if chunks < gy else (gy if gy > 1 else 1)")
        lines.append("    grid = (gx, gy, 1)")
        lines.append(f"    wp, sp, keep = _scratch(_stream(_devidx), {len(k.reductions())} * rows * gy, tiles, "
                     "f.cooperative)")
        lines.append("    a = a + (wp, sp)")
        branch = "else:"
    lines.append(branch)
    lines.append("    f = _fns[j + o] or _load(j + o)")
    lines.append(f"    cap = {_grid_cap(tx * ty)}")
    lines.append("    grid = (tiles if tiles < cap else cap, 1, 1)")
    return lines


def auto_knobs(kernel) -> tuple[int, tuple[int, int], bool]:
    """(prefetch stages, (fewest threads per row, the same for wide rows), uncapped grid) for a
    kernel, unless the config sets them.

    Measured on an H200 (bf16 rows of 4096, three repetitions): pure reductions stream best
    with one stage; normalizations with one reduction phase (RMSNorm) keep two rows in flight
    (86% of copy bandwidth against 80% with one); those with two phases (layer norm, softmax),
    whose two block reductions a block waits on, want 256 threads a row with one stage once rows
    are wide (layer norm 4096: 81% against 76% with 128 threads) but few threads with many
    elements each on narrow rows (1024..3072: 80% with 64-96 threads, 65% with 128-384).

    Uncapped grid (one block per row, the hardware scheduling the next block onto an SM as
    one finishes, instead of as many blocks as fit at once striding over the rows): one-phase
    normalizations without column sums, where a row gets 64 threads or more (the launcher keeps
    the resident grid for one-warp blocks). H200, bf16, kernel time alone: RMSNorm 93-94% of copy
    bandwidth against 81-87% with the resident grid at rows of 1024..4096 (90% against 81% at
    16384), the one-pass layer norm 82-85% against 72% (rows of 1024..4096; 75% against 79% at
    16384). Softmax (two phases) keeps the resident grid: 84-88% against 79-82%. Rows of 96 or
    192 elements (one warp a row) are 2-3x slower uncapped."""
    stages, lo = config.cuda["reduction_prefetch_stages"], config.cuda["reduction_min_threads"]
    full = any(not kernel.is_row(p) for p, _ in kernel.stores)
    one_phase = full and kernel.reduction_phases() <= 1
    auto = (1, 64, 64) if not full else ((2, 64, 64) if one_phase else (1, 64, 256))
    per_sm = config.cuda["reduction_blocks_per_sm"]
    uncapped = one_phase and not kernel.has_columns() if per_sm is None else False
    return (auto[0] if stages is None else int(stages)), \
        ((auto[1], auto[2]) if lo is None else (int(lo), int(lo))), uncapped


WIDE_ROW_VECTORS = 512     # rows of this many vectors or more count as wide for the thread floor


SPLIT_ROWS = 2             # rows split across blocks when rows * SPLIT_ROWS <= SM count ...
SPLIT_MIN_VECTORS = 8192   # ... and a row has at least this many vectors
SPLIT_SYNC_ROWS = 2        # kernels with barriers: rows split when rows <= SPLIT_SYNC_ROWS * SM count ...
SPLIT_SYNC_MIN_VECTORS = 1024   # ... and a row has two blocks' worth of vectors (later passes re-read
                                # from L2 when the tensor fits there; one block per row leaves SMs idle)
OUTER_SPLIT_TILES = 2      # outer: columns split across blocks when tiles < OUTER_SPLIT_TILES * SM count ...
OUTER_SPLIT_MIN_ROWS = 256  # ... and a column has at least this many elements


def _splittable(kernel, nest, dialect) -> bool:
    """Whether the split variant renders (single-pass kernels with row outputs only)."""
    from ..codegen.schedule import ScheduleError

    try:
        render_reduction(kernel, nest, dialect, "probe")
    except ScheduleError:
        return False
    return True


def _grid_cap(threads, shared="0") -> str:
    """Python for the most blocks a reduction grid gets: the blocks that fit at once
    (``reduction_blocks_per_sm``: 0 or null) or that many per SM. Rows beyond it grid-stride."""
    per_sm = int(config.cuda["reduction_blocks_per_sm"] or 0)
    return f"_sms * {per_sm}" if per_sm else f"f.resident_blocks({threads}, {shared})"


def _magic_divisor() -> tuple[Callable, Callable]:
    """``magic_divisor`` and the lookup of its cache (a hit costs no Python frame)."""
    from .compiled import _MAGIC, magic_divisor

    return magic_divisor, _MAGIC.get


def _lazy_fallback(cg: ReductionGroup) -> Callable:
    """The group's eager program, built on the first call that needs it."""
    built: list[Callable] = []

    def run(*args):
        if not built:
            from .fusion_eager import eager_runner

            built.append(eager_runner(cg.sub, "fallback"))
        return built[0](*args)
    return run


def build_reduction_launcher(cg: ReductionGroup) -> Callable:
    k, plan = cg.kernel, cg.plan
    ns: dict[str, Any] = {"_empty": torch.empty_strided, "_empty_c": torch.empty, "_dev": cg.device, "_Defer": DeferToEager,
                           "_fallback": _lazy_fallback(cg), "_zeros": torch.zeros, "_threads": torch.get_num_threads(),
                           "torch": torch}
    for j, op in enumerate(plan.outputs):
        ns[f"_odt{j}"] = op.dtype
    arg_kind = {torch.float64: "f64", torch.int64: "i64", torch.bool: "i32"}
    n_index = k.n_dims + len(stride_args(k))
    scalar_kinds = [arg_kind[s.dtype] for s in k.scalars]
    slots = ["i64"] if k.has_columns() else []
    kinds = ["ptr"] * len(k.tensors) + ["i64"] * n_index + scalar_kinds + slots
    if cg.target == "cpu":
        from .compiled import cpu_kernels

        fns, ns["_pk"] = cpu_kernels(cg, [v[0] for v in cg.variants[:2]], kinds)
        ns.update(zip(("_fn", "_fn2"), fns))
    else:
        from ..runtime import cuda_driver, nvrtc
        from ..runtime.scratch import split_scratch

        idx = cg.device.index if cg.device.index is not None else torch.cuda.current_device()
        arch = cuda_driver.device_arch(idx)
        fns: list = [None] * len(cg.variants)

        def load(i: int):
            """Variants compile on first use: a launch shape that never occurs costs nothing."""
            fname, _, params, itype, divs, _ = cg.variants[i]
            vk = ["ptr"] * len(k.tensors) + ["i32" if itype == "int" else "i64"] * n_index + scalar_kinds \
                + ["u32", "u32"] * len(divs) + ["ptr", "ptr"] * params.split \
                + (["i32" if itype == "int" else "i64"] if slots else [])
            options = ("--fmad=false",) if cg.exact_products else ()     # (see exact_products)
            f = cuda_driver.CudaKernel(nvrtc.compile_cubin(cg.variant_sources[i], fname, arch, options), fname, idx, vk,
                                       cooperative=cg.grid_sync[i])
            shared = cg.variants[i][5] * MAX_THREADS
            if shared > 48 * 1024:
                f.set_max_dynamic_shared(shared)
            f.zero_columns = not cg.column_registers[i]      # (column partials added into memory)
            fns[i] = f
            return f

        ns["_fns"], ns["_load"] = fns, load
        ns["_stream"] = cuda_driver.RAW_STREAM
        ns["_devidx"] = idx
        ns["_maxgrid"] = cuda_driver.sm_count(idx) * int(config.cuda["blocks_per_sm"])
        ns["_sms"] = cuda_driver.sm_count(idx)
        ns["_scratch"] = split_scratch(cg.device).get      # partials and counters, kept per stream
        ns["_magic"], ns["_MG"] = _magic_divisor()
        columns = column_outputs(cg)
        if columns and finalized(cg, columns):
            from ..runtime.column_sums import column_sum_kernel

            ns["_colws"] = split_scratch(cg.device).columns
            ns["_colsum"] = column_sum_kernel(k.tensors[min(columns.values())].dtype,
                                              plan.outputs[next(iter(columns))].dtype, idx)
    src = launcher_source(cg)
    cg.launcher_source = src
    ns.update({"_broken": False, "_eager": None, "_fail": None})
    exec(compile(src, f"<graphfuser launcher {cg.name}>", "exec"), ns)
    run = ns["run"]
    run.namespace = ns
    return run
