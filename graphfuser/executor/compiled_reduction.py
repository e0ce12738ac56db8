"""Compiled reduction / normalization groups: lower -> schedule variants -> render -> compile ->
a generated launcher.

``compile_group`` (``compiled.py``) takes this path when a group holds a reduction or a
normalization row. The launcher is straight-line generated Python like the pointwise one: sizes
of the root axes, outputs through ``torch.empty_strided``, the argument tuple, and (CUDA) the
choice of variant from the run-time row size:

- vector variants need every stride of the vectorized tensors divisible by the vector width
  and 16-byte aligned pointers, and, unless their vectors take rows of any length (the inner
  multi-pass and split variants: ``codegen/reduction/vectors.py``), the vector root's extent
  too (the innermost reduced root; outer kernels: the last kept root, V adjacent columns per
  thread); otherwise the scalar ones run;
- each variant exists with 32-bit and 64-bit indices; the 32-bit one runs when every tensor's
  largest offset is below ``INDEX_LIMIT``;
- variants compile (NVRTC) on first use, each from its own source; ``source`` holds them all;
- among the persistent variants the launcher takes the largest P that leaves a row between
  ``cuda.reduction_min_threads`` and ``MAX_THREADS`` threads (``ceilDiv(ceilDiv(R, V), P)``,
  rounded up to a warp), else the smallest P that fits; rows wider than that take the
  multi-pass variant;
- the grid is as many blocks as fit on the device at once (occupancy, with the prefetch
  stages' dynamic shared memory counted); rows beyond it grid-stride, so each block's next
  row is loading while it reduces this one; one-phase normalizations take one block per row;
- those choices are lines of the launcher that ``reduction_launch.py`` writes.
- split variants (few rows / column tiles, long reductions: statistics over N, H, W) spread
  each row or tile over ``gridDim.y`` blocks, with a float64-slot workspace for the partials
  and zeroed counters (kept per stream: ``runtime/scratch.py``); those with grid barriers
  (several passes) launch cooperatively with a grid of at most the resident blocks.

Measured on an H200 (``tools/sweep_reductions.py``, bf16 rows of 1024..16384): one prefetch
stage and up to 32 elements per thread put layer norm, softmax and RMSNorm at 78-86% of copy
bandwidth; without the prefetch they ran at 55-65%.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Optional

import torch

from ..codegen.cstyle import render_function, render_source, serial_twin, stride_args
from ..codegen.reduction.render import exact_products, render_reduction, render_reduction_source
from ..codegen.dialects import CPP, CUDA
from ..ir.kir import kernel_ir_text
from ..codegen.lower import LoweringError
from ..codegen.reduction.lower import lower_reduction_group
from ..codegen.reduction.schedule import (MAX_THREADS, SCRATCH_ROWS, ReductionParams, reduction_variants,
                                          schedule_reduction)
from ..ir.graph import Graph
from ..config import config
from ..ir.types import TensorType
from ..log import dump, jit_log
from ..runtime.pycode import define
from .compiled import allocation
from .reduction_launch import (NARROW_MIN_THREADS, auto_knobs, cuda_choice, even_rows_stages, even_rows_twin,
                               twin_stages)

class DeferToEager(Exception):
    """Raised inside a launcher for a call the kernel does not compute (see ``launcher_source``);
    the launcher runs the eager fallback for that call only."""




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
        self.multirow: list[bool] = []          # per variant: runs blockDim.y rows per block (the
                                                # twin of the variant before it)
        self.ragged: list[bool] = []            # per variant: its vectors take rows of any length
        self.even: list[bool] = []              # per variant: the even-rows twin of a persistent one
                                                # (rendered after it and its several-rows twin)
        dialect = CUDA if target == "cuda" else CPP
        fns: list = []      # a variant's function text, or what renders it on first use
        infos: list[dict] = []  # the launch facts of each schedule's 32-bit variant
        self.stages, self.min_threads, self.uncapped = auto_knobs(self.kernel)
        # rows of a warp's vectors or fewer, several to a block: few threads a row, each with
        # more of it (unless the knob sets the floor for every row)
        self.narrow_min_threads = NARROW_MIN_THREADS if config.cuda["reduction_min_threads"] is None else 0
        schedules = [(p, schedule_reduction(self.kernel, p))
                     for p in reduction_variants(self.kernel, target, int(config.cuda["reduction_register_elements"]))]
        schedules = [(p, n) for p, n in schedules if not p.split or _splittable(self.kernel, n, dialect)]
        for itype, tag in ((("int", "_i32"), ("long long", "_i64")) if target == "cuda" else (("long long", ""),)):
            opts = _render_opts(itype)
            opts.prefetch = not config.is_disabled("prefetch")
            opts.prefetch_stages = self.stages
            opts.cache_computed = bool(config.cuda["reduction_cache_computed"])
            for j, (params, nest) in enumerate(schedules):
                fname = f"{name}_{params.tag}{tag}" if target == "cuda" or self.variants else name
                opts.multirow = False
                opts.fast_div = params.kind == "none" and itype == "int"
                if itype == "long long" and target == "cuda":
                    # the 64-bit variants (offsets past 2^31) render on first use, their launch
                    # facts taken from the 32-bit variant of the same schedule, which the render
                    # checks: rendering both doubled a reduction group's build on the GIL, where
                    # a model's groups render one at a time (a 384-column layer norm: 18 renders,
                    # 50-90 ms; GPT-2's first kernels waited 0.34 s for the renders to compile)
                    info = dict(infos[j])
                    if params.kind == "none":
                        info["divisors"] = []       # (no magic-number division with 64-bit indices)
                    fns.append(functools.partial(_render_like, info, self.kernel, nest, dialect, fname,
                                                 dataclasses.replace(opts), params))
                else:
                    info = {}
                    fns.append(_render_like(None, self.kernel, nest, dialect, fname, opts, params, info))
                    infos.append(info)
                self._add_variant(fname, nest, params, itype, info, False)
                if target == "cuda" and info.get("multirow_capable"):
                    # a twin that runs several narrow rows per block (its row loop over blocks
                    # and thread rows), which the launcher takes for rows of a warp's threads or
                    # fewer; rendered when a launch first takes it, as NVRTC compiles every
                    # variant (a layer norm group renders in 11 ms, 17 with its twins rendered)
                    # (with its own prefetch stages: its launch's shared memory scales with them)
                    twin = f"{name}_{params.tag}_mr{tag}"
                    stages = twin_stages(self.kernel)
                    fns.append(functools.partial(render_reduction, self.kernel, nest, dialect, twin,
                                                 dataclasses.replace(opts, multirow=True, prefetch_stages=stages),
                                                 params.max_threads, params.online, params.scratch, {}))
                    shared = info.get("shared_per_stage", 0) * stages
                    self._add_variant(twin, nest, params, itype, dict(info, shared_per_thread=shared), True)
                if target == "cuda" and even_rows_twin(self.kernel, params):
                    # a twin for rows that fill the block exactly (P vectors for each of
                    # blockDim.x threads, a multiple of 32): no bounds checks, one block a row,
                    # its own prefetch stages (``reduction_launch._even_choice``,
                    # ``even_rows_stages``); rendered on first use
                    twin = f"{name}_{params.tag}_e{tag}"
                    stages = even_rows_stages(self.kernel) if opts.prefetch else 0
                    fns.append(functools.partial(render_reduction, self.kernel, nest, dialect, twin,
                                                 dataclasses.replace(opts, even_rows=True, prefetch=bool(stages),
                                                                     prefetch_stages=stages),
                                                 params.max_threads, params.online, params.scratch, {}))
                    shared = info.get("shared_per_stage", 0) * stages
                    self._add_variant(twin, nest, params, itype, dict(info, shared_per_thread=shared, ragged=False),
                                      False, even=True)
        self.exact_products = exact_products(self.kernel)
        if self.kernel.kind == "none":
            render = render_source
        else:
            def render(functions: list[str], d) -> str:
                return render_reduction_source(functions, d, contract=not self.exact_products)
        if target == "cpu":
            fns = [serial_twin(fn) for fn in fns]      # no OpenMP runtime below its threshold
        self._render, self._dialect = render, dialect
        # every variant but the twins (dumps, repros), in the variants' order
        self._main = [i for i, (m, e) in enumerate(zip(self.multirow, self.even)) if not (m or e)]
        self._source: Optional[str] = None
        # one NVRTC program per variant, each rendered on first use (the twins dumped then)
        self.variant_sources = _Sources(fns, lambda fn: render([fn], dialect), name, self._main) \
            if target == "cuda" else []
        self._fns = fns
        nest, params = self.variants[-1][1], self.variants[-1][2]
        dump("fusion_ir", f"Fusion IR of {name}", str(sub))
        dump("scheduler_params", f"Reduction schedule of {name}",
             "\n".join(f"{p}\n" + "\n".join(f"  tv.{h}" for h in n.history) for p, n in schedules))
        dump("kernel_ir", f"Kernel IR of {name}", self.kernel_ir_text())
        option = "cuda_kernel" if target == "cuda" else "cpp_kernel"
        if config.dumps(option):
            dump(option, f"Kernel {name}", self.source, "cuda" if target == "cuda" else "cpp")

    @property
    def source(self) -> str:
        """Every variant but the twins in one source (dumps, repros, checks): renders the deferred
        64-bit variants."""
        if self._source is None:
            texts = [self.variant_sources.function(i) for i in self._main] if self.target == "cuda" \
                else [fn for fn in self._fns if isinstance(fn, str)]
            self._source = self._render(texts, self._dialect)
        return self._source

    def _add_variant(self, fname: str, nest, params: ReductionParams, itype: str, info: dict, multirow: bool,
                     even: bool = False) -> None:
        self.variants.append((fname, nest, params, itype, info.get("divisors", []), info.get("shared_per_thread", 0)))
        self.grid_sync.append(bool(info.get("grid_sync")))
        self.column_registers.append(bool(info.get("column_registers")))
        self.multirow.append(multirow)
        self.even.append(even)
        self.ragged.append(bool(info.get("ragged")))

    def kernel_ir_text(self) -> str:
        k = self.kernel
        return kernel_ir_text(k, self.variants[-1][1],
                              f"kernel {k.name} ({k.kind} reduction, reduced roots {list(k.red_roots)}):")


def _render_like(expect: Optional[dict], kernel, nest, dialect, fname: str, opts, params: ReductionParams,
                 info: Optional[dict] = None) -> str:
    """One variant's function text (``render_function`` for a pointwise-shaped schedule,
    ``render_reduction`` otherwise). ``expect``: the launch facts the launcher was built with (a
    deferred variant's, taken from its 32-bit twin): a render that finds others raises, so that a
    launch never runs with another kernel's shared memory, grid barriers or divisors."""
    info = {} if info is None else info
    if params.kind == "none":
        text = render_function(kernel, nest, dialect, fname, opts, info)
    else:
        text = render_reduction(kernel, nest, dialect, fname, opts, params.max_threads, params.online,
                                params.scratch, info)
    if expect is not None:
        differ = sorted(k for k in set(expect) | set(info) if expect.get(k, []) != info.get(k, []))
        if differ:
            raise LoweringError(f"{fname}: the 64-bit variant's launch facts differ from its 32-bit twin's: "
                                f"{', '.join(f'{k} {info.get(k)!r} != {expect.get(k)!r}' for k in differ)}")
    return text


class _Sources:
    """The CUDA source of each variant, a list whose deferred entries (functions that render a
    kernel: the twins, the 64-bit variants) render on first read; a twin is dumped then (the
    group's dump holds the others)."""

    def __init__(self, fns: list, render: Callable[[str], str], name: str, main: Optional[list[int]] = None) -> None:
        self._fns, self._render, self._name = fns, render, name
        self._main = set(range(len(fns)) if main is None else main)
        self._texts: dict[int, str] = {}
        self._done: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self._fns)

    def function(self, i: int) -> str:
        """Variant ``i``'s function text (rendered now where it was deferred)."""
        if i not in self._texts:
            fn = self._fns[i]
            self._texts[i] = fn if isinstance(fn, str) else fn()
        return self._texts[i]

    def __getitem__(self, i: int) -> str:
        if i not in self._done:
            self._done[i] = self._render(self.function(i))
            if i not in self._main:
                dump("cuda_kernel", f"Kernel {self._name} (a twin of another variant)", self._done[i], "cuda")
        return self._done[i]

    def __iter__(self):
        return (self[i] for i in range(len(self)))


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
        L += ["        " + line for line in cuda_choice(cg, len(args))]
        launch = "        f.launch(grid, block, _stream(_devidx), *a" + (", shared_mem=sh)" if k.kind == "inner" else ")")
        if columns and finalized(cg, columns):
            L.append("        slots = grid[0] * block[1]")   # a slot per thread row (several-rows blocks)
            L += ["        " + line for line in _finalized_lines(cg, columns, size, launch)]
            L.append(f"    return {ret}")
            return _armed(L, n_in)
        if columns:
            L.append("        slots = grid[0] * block[1]")   # a slot per thread row (several-rows blocks)
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
    partials of one dtype, at most ``MAX_OUTPUTS`` outputs (each of its own dtype)."""
    from ..runtime.column_sums import MAX_OUTPUTS, supported

    accs = {cg.kernel.tensors[p].dtype for p in columns.values()}
    return len(accs) == 1 and len(columns) <= MAX_OUTPUTS \
        and all(supported(*accs, cg.plan.outputs[j].dtype) for j in columns)


def finalized_dtypes(cg: ReductionGroup, columns: dict[int, int]) -> tuple:
    """The finalized outputs' dtypes, in the order of their partials (the launch's rows)."""
    by_partials = {p: j for j, p in columns.items()}
    return tuple(cg.plan.outputs[by_partials[p]].dtype for p in sorted(columns.values()))


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
    lines.append(f"grid, block = _colshape(nr, {len(order)}, slots, _sms)")
    lines.append(f"_colsum.launch(grid, block, _stream(_devidx), wp, span, slots, nr, {', '.join(ptrs)})")
    return lines


def _armed(L: list[str], n_in: int) -> str:
    """The compiled.py launcher convention: after a failure, the eager fallback runs."""
    params = ", ".join(f"x{i}" for i in range(n_in))
    return "\n".join([L[0], "    if _broken:", f"        return _eager({params})", "    try:"]
                     + ["    " + ln for ln in L[1:]]
                     + ["    except _Defer:", "        pass",
                        "    except Exception as e:", f"        return _fail(e, ({params}{',' if n_in == 1 else ''}))",
                        f"    return _fallback({params})"]) + "\n"


def _splittable(kernel, nest, dialect) -> bool:
    """Whether the split variant renders (single-pass kernels with row outputs only)."""
    from ..codegen.schedule import ScheduleError

    try:
        render_reduction(kernel, nest, dialect, "probe")
    except ScheduleError:
        return False
    return True


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
            from ..runtime.column_sums import column_sum_kernel, launch_shape

            ns["_colws"] = split_scratch(cg.device).columns
            ns["_colshape"] = launch_shape
            ns["_colsum"] = column_sum_kernel(k.tensors[min(columns.values())].dtype,
                                              finalized_dtypes(cg, columns), idx)
    src = launcher_source(cg)
    cg.launcher_source = src
    ns.update({"_broken": False, "_eager": None, "_fail": None})
    define(src, f"<graphfuser launcher {cg.name}>", ns)
    run = ns["run"]
    run.namespace = ns
    if cg.target == "cuda":
        _compile_expected_variant(cg, src, ns)
    return run


class _Forecast(Exception):
    """Raised where the forecast's launcher would launch (its stream)."""


def _forecast_stop(_device: int) -> None:
    raise _Forecast


def _profiled_arguments(cg: ReductionGroup) -> Optional[list]:
    """Arguments like the profiled call's: meta tensors of the profiled sizes, strides and dtypes;
    an int input the kernel checks against an axis (a layer norm's normalized size) that axis'
    size; 1 / 1.0 / False for other numbers. None where a type is not complete."""
    out: list = []
    for v in cg.sub.inputs:
        t = v.type
        if isinstance(t, TensorType):
            if t.sizes is None or t.strides is None or t.dtype is None \
                    or any(n is None or n < 0 for n in (*t.sizes, *t.strides)):
                return None     # (a size the profile left open: the launcher compiles on first use)
            out.append(torch.empty_strided(t.sizes, t.strides, dtype=t.dtype, device="meta"))
        else:
            out.append({"int": 1, "float": 1.0, "bool": False}.get(getattr(t, "name", ""), None))
    for a, e in cg.plan.size_checks:
        if isinstance(e, tuple):
            i, d = cg.plan.axis_source[a] if a is not None else (None, None)
            out[e[1]] = 1 if i is None else out[i].shape[d]
    return out


def _compile_expected_variant(cg: ReductionGroup, src: str, ns: dict) -> None:
    """Compile the variant the launcher will take at the profiled sizes, now. Variants compile
    on first use, and a reduction's variant takes NVRTC 0.15-0.45 s (H200 host): resnet50's
    training step compiled 11 of them one after the other on the calling thread in its 5th and
    7th calls, 4.7 s of the 9.6 s to its first steady call. Built from the pool of
    ``executor._prebuild``, the forecast compiles them beside the other groups' builds. It runs
    the launcher's own choice on meta tensors of the profiled types (outputs allocated on the
    meta device too) and stops where it would launch; the real launcher's first call finds the
    kernel loaded. A forecast that fails, or that the run-time sizes prove wrong, costs nothing
    but its compile: the launcher compiles what it needs, as before."""
    try:
        args = _profiled_arguments(cg)
    except Exception as e:  # noqa: BLE001 - a forecast never fails a build
        args = None
        jit_log("kernel_cache", 2, f"{cg.name}: no variant forecast: {type(e).__name__}: {e}")
    if args is None:
        return
    forecast = dict(ns)
    forecast.update({"_stream": _forecast_stop, "_dev": torch.device("meta"), "_broken": False,
                     "_fail": lambda e, a: None, "_fallback": lambda *a: None, "_eager": lambda *a: None})
    try:
        define(src, f"<graphfuser launcher forecast {cg.name}>", forecast)
        forecast["run"](*args)
    except Exception as e:  # noqa: BLE001 - a forecast never fails a build
        jit_log("kernel_cache", 2, f"{cg.name}: no variant forecast: {type(e).__name__}: {e}")
