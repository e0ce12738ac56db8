"""The C-style walk: one renderer over the kernel IR, parameterized by a ``Dialect``.

``render_function`` prints one kernel function: signature (tensor pointers, root extents,
stride arguments, scalars), the loop nest produced by the schedule (each leaf realized as the
dialect spells its parallel type), index expressions (hoisted to the outermost loop they depend
on unless ``index_hoist`` is disabled), bounds checks (only those the schedule cannot prove
redundant unless ``predicate_elimination`` is disabled), loads with fp16/bf16 conversion,
the expression body, and stores. Nothing in the walk asks which dialect it is printing.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Optional

import torch

from .dialects import COMPUTE_TYPES, LOAD_CONVERT, STORAGE_TYPES, STORE_CONVERT, Dialect
from ..ir.kir import Call, Cast, Const, Kernel, LinearIndex, Load, ScalarArg, prim_text
from .schedule import IExpr, LoopNest, ParallelType, ScheduleError, iconst, iop, ivar


@dataclass
class RenderOptions:
    index_type: str = "long long"
    index_hoist: bool = True
    predicate_elimination: bool = True
    omp_threshold: int = 65536
    fast_div: bool = False          # 32-bit index: divide by run-time extents with magic numbers
    prefetch: bool = True           # persistent reductions: load the next row during this one
    prefetch_stages: int = 1        # ... into this many shared-memory stages (0: registers)
    cache_computed: bool = True     # persistent reductions keep computed values, not only loads
    multirow: bool = False          # persistent row kernels: blockDim.y rows per block, where they can
    even_rows: bool = False         # persistent row kernels: rows exactly P vectors a thread, blockDim.x
                                    # threads, one block each (no bounds checks, no row loop)


def c_literal(value, dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "true" if value else "false"
    if dtype in (torch.float32, torch.float64):
        suffix = "F" if dtype == torch.float32 else "D"
        if math.isnan(value):
            return f"GF_NAN_{suffix}"
        if math.isinf(value):
            return f"GF_INF_{suffix}" if value > 0 else f"(-GF_INF_{suffix})"
        text = repr(float(value))
        return text + ("f" if dtype == torch.float32 else "")
    if dtype == torch.int64:
        return f"{int(value)}LL"
    return f"(({COMPUTE_TYPES[dtype]}){int(value)})"


def cast_text(a: str, src: torch.dtype, dst: torch.dtype) -> str:
    """C text of compute value ``a`` (of ``src``'s compute type) converted to ``dst``'s, as torch
    converts: to bool by ``!= 0``; a floating value to uint8 through int64 (c10's rule, so that an
    out-of-range value wraps as eager's does on CPU and saturates through int64 as on CUDA)."""
    if dst == torch.bool:
        return f"(({a}) != 0)"
    ct = COMPUTE_TYPES[dst]
    if dst == torch.uint8 and (src.is_floating_point or src.is_complex):
        return f"(({ct})((long long)({a})))"
    return f"(({ct})({a}))"


class _Emitter:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 1

    def __call__(self, text: str) -> None:
        self.lines.append("  " * self.depth + text)


def _render_iexpr(e: IExpr, names: dict[IExpr, str], divs: Optional[dict] = None) -> str:
    """C text of an index expression; with ``divs`` (fast division on), ``/`` and ``%`` by a
    run-time extent use host-computed magic numbers (multiply-high and shift) instead of an
    integer division."""
    if e in names:
        return names[e]
    if e.op in ("var", "const"):
        return str(e.a)
    a, b = _render_iexpr(e.a, names, divs), _render_iexpr(e.b, names, divs)
    if divs is not None and e.op in ("/", "%") and e.b.const is None:
        k = divs.setdefault(e.b, len(divs))
        q = f"gf_udiv({a}, dm{k}, ds{k})"
        return q if e.op == "/" else f"({a} - {q} * {b})"
    if e.op == "ceildiv":
        return f"(({a} + {b} - 1) / {b})"
    if e.op == "min":
        return f"(({a}) < ({b}) ? ({a}) : ({b}))"
    return f"({a} {e.op} {b})"


def _size(e: IExpr) -> int:
    return 1 + sum(_size(x) for x in (e.a, e.b) if isinstance(x, IExpr))


def _depth_of(e: IExpr, var_depth: dict[str, int]) -> int:
    return max([var_depth.get(v, 0) for v in e.vars()], default=0)


def stride_args(kernel: Kernel) -> list[tuple[int, int]]:
    return [(p, r) for p, t in enumerate(kernel.tensors) for r, k in enumerate(t.dim_kinds) if k == "strided"]


def signature(kernel: Kernel, dialect: Dialect, opts: RenderOptions) -> list[str]:
    T = opts.index_type
    params = []
    for t in kernel.tensors:
        const = "" if t.is_output else "const "
        params.append(f"{const}{STORAGE_TYPES[t.dtype]}* {dialect.restrict} {t.name}")
    params += [f"{T} n{r}" for r in range(kernel.n_dims)]
    params += [f"{T} st{p}_{r}" for p, r in stride_args(kernel)]
    params += [f"{'int' if s.dtype == torch.bool else COMPUTE_TYPES[s.dtype]} {s.name}" for s in kernel.scalars]
    return params


def render_function(kernel: Kernel, nest: LoopNest, dialect: Dialect, fname: str,
                    opts: Optional[RenderOptions] = None, info: Optional[dict] = None) -> str:
    """C text of one kernel function. ``info`` (if given) receives ``divisors``: the run-time
    extents divided by with magic numbers, whose (multiplier, shift) pairs follow the other
    arguments."""
    opts = opts or RenderOptions()
    T = opts.index_type
    leaves = nest.leaves
    inner = leaves[-1] if leaves else None
    vec = (inner is not None and inner.ptype is ParallelType.Vectorize and dialect.vector_registers)
    V = inner.extent.const if vec else None
    if vec and (V is None or V < 1):
        raise ScheduleError("Vectorize needs a constant extent on this target (split by the vector width)")
    if vec and not opts.predicate_elimination:
        vec = False                       # per-lane bounds checks: scalar accesses
    if vec:
        accessed = kernel.accessed()
        for p, t in enumerate(kernel.tensors):
            if t.dim_kinds and t.dim_kinds[-1] == "strided" and p in accessed:
                raise ScheduleError(f"cannot vectorize: tensor {t.name} is not contiguous along the innermost axis")
    n_loops = len(leaves) - (1 if vec else 0)

    # index of every domain, with the vector lane at 0 when vectorized
    leaf_idx = {d.id: ivar(f"i{k}") for k, d in enumerate(leaves)}
    if vec:
        leaf_idx[inner.id] = iconst(0)
    idx = nest.domain_indices(leaf_idx)
    var_depth = {f"i{k}": k + 1 for k in range(len(leaves))}
    root_idx = [idx[r.id] for r in nest.roots]
    merged = nest.merged_all()

    # bounds checks
    checks = nest.split_checks()
    folded: Optional[tuple] = None
    if opts.predicate_elimination:
        checked = {d.id for d in checks}
        checks = [d for d in checks if not (d.origin[0] == "outer" and d.origin[1].id in checked)]
        if (not vec and inner is not None and inner.origin[0] == "inner" and inner.origin[3]
                and inner.ptype in (ParallelType.Serial, ParallelType.Vectorize)
                and any(d is inner.origin[1] for d in checks)):
            parent = inner.origin[1]
            base_idx = nest.domain_indices({**leaf_idx, inner.id: iconst(0)})[parent.id]
            folded = (parent, base_idx)
            checks = [d for d in checks if d is not parent]
    preds = [(idx[d.id], d.extent) for d in checks]
    if not opts.predicate_elimination:
        preds += [(root_idx[r], ivar(f"n{r}")) for r in range(len(nest.roots))]

    # tensor offsets
    offsets: list[IExpr] = []
    for p, t in enumerate(kernel.tensors):
        if t.dense and merged is not None:
            offsets.append(idx[merged.id])
            continue
        off = iconst(0)
        for r, kind in enumerate(t.dim_kinds):
            if kind == "unit":
                off = iop("+", off, root_idx[r])
            elif kind == "strided":
                off = iop("+", off, iop("*", root_idx[r], ivar(f"st{p}_{r}")))
        offsets.append(off)

    # hoisting: named index values, each declared at the loop level it depends on
    named: dict[IExpr, str] = {}
    decls: dict[int, list[tuple[str, IExpr]]] = {}
    if opts.index_hoist:
        wanted = sorted(root_idx + offsets + [p for p, _ in preds], key=_size)
        for e in wanted:
            if e.op in ("var", "const") or e in named:
                continue
            name = f"x{len(named)}"
            decls.setdefault(_depth_of(e, var_depth), []).append((name, e))
            named[e] = name
    divs: Optional[dict] = {} if (opts.fast_div and dialect.fast_div) else None

    def ix(e: IExpr) -> str:
        return _render_iexpr(e, named, divs)

    em = _Emitter()
    block = 1
    for d in leaves:
        if d.ptype in (ParallelType.TIDx, ParallelType.TIDy):
            block *= d.extent.const or 1
    prefix = dialect.kernel_prefix.format(block=block)
    work = " * ".join(f"n{r}" for r in range(kernel.n_dims)) or "1"
    for name, e in decls.get(0, []):
        em(f"const {T} {name} = {_render_iexpr(e, {k: v for k, v in named.items() if k != e}, divs)};")
    parallel_done = False
    for k in range(n_loops):
        d = leaves[k]
        i = f"i{k}"
        ext = ix(d.extent)
        if folded is not None and d is inner:
            parent, base = folded
            lim = f"(({ix(parent.extent)} - {ix(base)}) < {ext} ? ({ix(parent.extent)} - {ix(base)}) : {ext})"
            ext = lim
        if d.ptype in dialect.binds:
            em(dialect.binds[d.ptype].format(T=T, i=i))
        else:
            if d.ptype in (ParallelType.BIDx, ParallelType.BIDy) and dialect.parallel_pragma and not parallel_done:
                em(dialect.parallel_pragma.format(work=work, threshold=opts.omp_threshold))
                parallel_done = True
            elif d.ptype is ParallelType.Vectorize and dialect.simd_pragma:
                em(dialect.simd_pragma)
            elif d.ptype is ParallelType.Unroll and d.extent.const is not None:
                em(dialect.unroll_pragma.format(ext=d.extent.const))
            em(dialect.loops[d.ptype].format(T=T, i=i, ext=ext) + " {")
            em.depth += 1
        for name, e in decls.get(k + 1, []):
            em(f"const {T} {name} = {_render_iexpr(e, {x: v for x, v in named.items() if x != e}, divs)};")
    if preds:
        em("if (" + " && ".join(f"{ix(a)} < {ix(b)}" for a, b in preds) + ") {")
        em.depth += 1
    _body(em, kernel, offsets, ix, V if vec else None, _linear_index(kernel, nest, idx, root_idx, merged, ix),
          vec and lanes_aligned(inner, V))
    if preds:
        em.depth -= 1
        em("}")
    while em.depth > 1:
        em.depth -= 1
        em("}")
    params = signature(kernel, dialect, opts)
    if divs:
        order = sorted(divs.items(), key=lambda kv: kv[1])
        params += [f"unsigned int dm{k}, unsigned int ds{k}" for _, k in order]
        if info is not None:
            info["divisors"] = [str(d) for d, _ in order]
    out = [f"{prefix} {fname}(" + ", ".join(params) + ") {"] + em.lines
    out.append("}")
    return "\n".join(out)


def _linear_index(kernel: Kernel, nest: LoopNest, idx: dict, root_idx: list[IExpr], merged, ix) -> str:
    """C text of the row-major linear index of the current point (before the vector lane), and
    of the lane's step: ``(index, lane stride)``; ("0", "0") for kernels without random ops."""
    if kernel.linear is None:
        return ("0", "0")
    strides = []
    for others in kernel.linear:
        st = iconst(1)
        for q in others:
            st = iop("*", st, ivar(f"n{q}"))
        strides.append(st)
    if merged is not None and all(list(o) == list(range(r + 1, len(kernel.linear))) for r, o in enumerate(kernel.linear)):
        return (ix(idx[merged.id]), "1")      # row-major iteration order: the flat index
    lin = iconst(0)
    for r, st in enumerate(strides):
        lin = iop("+", lin, iop("*", root_idx[r], st))
    return (ix(lin), ix(strides[-1]) if strides else "1")


def lanes_aligned(leaf, V: Optional[int]) -> bool:
    """True when the vector leaf is an inner split by V (lane 0's index along the split domain is
    a multiple of V) and V is a multiple of 4: with the launcher's divisibility checks, lane 0's
    row-major linear index is then a multiple of 4 where the lanes step it by one, and the
    kernel says so (``gf_aligned4``), so four lanes' fp32 Philox draws share one block."""
    o = leaf.origin
    return bool(V) and V % 4 == 0 and o[0] == "inner" and o[2] == V and o[3]


def linear_lane_text(ct: str, base: str, step: str, aligned: bool) -> str:
    """The C text of lane ``v``'s linear index (lane 0 at ``base``, lanes ``step`` apart). Where
    lane 0's index is a multiple of 4 and lanes step it by one (``lanes_aligned``), a
    ``gf_lane4`` value instead: block ``base / 4``, lane ``v``, which the random draws take
    directly (an expression, never a variable of the index type)."""
    if aligned and step == "1":
        return f"gf_lane4{{({ct})({base}) >> 2, (int)v}}"
    return f"(({ct})({base}) + ({ct})v * ({ct})({step}))"


def _body(em: _Emitter, kernel: Kernel, offsets: list[IExpr], ix, V: Optional[int],
          linear: tuple[str, str] = ("0", "0"), aligned: bool = False) -> None:
    exprs = kernel.exprs()
    loads = [e for e in exprs if isinstance(e, Load)]
    if V is not None:
        for e in loads:
            t = kernel.tensors[e.tensor]
            st = STORAGE_TYPES[t.dtype]
            if t.dim_kinds and t.dim_kinds[-1] == "bcast":
                em(f"const {st} s_{t.name} = {t.name}[{ix(offsets[e.tensor])}];")
            else:
                em(f"{st} b_{t.name}[{V}];")
                em(f"gf_load<{V}>(b_{t.name}, {t.name} + {ix(offsets[e.tensor])});")
        for p, _ in kernel.stores:
            t = kernel.tensors[p]
            em(f"{STORAGE_TYPES[t.dtype]} b_{t.name}[{V}];")
        em("#pragma unroll")
        em(f"for (int v = 0; v < {V}; ++v) {{")
        em.depth += 1
    names: dict[int, str] = {}
    for n, e in enumerate(exprs):
        ct = COMPUTE_TYPES[e.dtype]
        if isinstance(e, Load):
            t = kernel.tensors[e.tensor]
            if V is None:
                raw = f"{t.name}[{ix(offsets[e.tensor])}]"
            elif t.dim_kinds and t.dim_kinds[-1] == "bcast":
                raw = f"s_{t.name}"
            else:
                raw = f"b_{t.name}[v]"
            text = LOAD_CONVERT.get(t.dtype, "{0}").format(raw)
        elif isinstance(e, Const):
            names[id(e)] = c_literal(e.value, e.dtype)
            continue
        elif isinstance(e, ScalarArg):
            text = f"(({ct})({kernel.scalars[e.index].name}))"
        elif isinstance(e, LinearIndex):
            # the vector lane steps the innermost root, hence the flat index, by one
            text = linear_lane_text(ct, linear[0], linear[1], aligned) if V is not None else f"(({ct})({linear[0]}))"
            if text.startswith("gf_lane4"):
                names[id(e)] = text
                continue
        elif isinstance(e, Cast):
            text = cast_text(names[id(e.arg)], e.arg.dtype, e.dtype)
        else:
            assert isinstance(e, Call)
            text = prim_text(e.op, e.dtype, [names[id(a)] for a in e.args])
        name = f"e{n}"
        em(f"const {ct} {name} = {text};")
        names[id(e)] = name
    for p, e in kernel.stores:
        t = kernel.tensors[p]
        val = STORE_CONVERT.get(t.dtype, "{0}").format(names[id(e)])
        if V is None:
            em(f"{t.name}[{ix(offsets[p])}] = {val};")
        else:
            em(f"b_{t.name}[v] = {val};")
    if V is not None:
        em.depth -= 1
        em("}")
        for p, _ in kernel.stores:
            t = kernel.tensors[p]
            if t.dim_kinds and t.dim_kinds[-1] == "bcast":
                # an output broadcast along the vectorized dim (smaller than the loop domain):
                # every lane computed the same element; one scalar store, never a vector one
                em(f"{t.name}[{ix(offsets[p])}] = b_{t.name}[0];")
            else:
                em(f"gf_store<{V}>({t.name} + {ix(offsets[p])}, b_{t.name});")


_PARALLEL = re.compile(r"^(\s*)#pragma omp parallel for( simd)? schedule\(static\) if \((.*?)\)(.*)$")


def serial_twin(fn: str) -> str:
    """A rendered CPU function whose OpenMP loop runs only above the dialect's work threshold
    (``#pragma omp parallel for ... if (work > threshold)``), split in two: ``static`` ``<name>_serial``
    without the parallel pragmas, which the exported function calls below the threshold.

    Below the threshold OpenMP still enters the runtime with a team of one and runs the loop as
    an outlined function that reaches the kernel's pointers through a shared struct, where
    ``__restrict__`` no longer holds: per-row values (a norm's scale and shift) are reloaded
    every element. At tiny sizes that was 0.6 us per call with nothing to compute, and a 16 x 1024
    batch-norm + hardswish took 3.7 us instead of 1.4. Functions without such a pragma are
    returned unchanged.

    Example: ``... if (n0 * n1 > 65536)`` becomes ``if (!(n0 * n1 > 65536)) { k_serial(t0, ..); return; }``
    at the top of ``k``."""
    lines = fn.split("\n")
    hits = [(i, m) for i, m in ((i, _PARALLEL.match(ln)) for i, ln in enumerate(lines)) if m]
    head = re.match(r"^(.*?)(\w+)\((.*)\) \{$", lines[0])
    if not hits or head is None:
        return fn
    prefix, name, params = head.groups()
    cond = hits[0][1].group(3)
    args = [re.search(r"(\w+)\s*$", p).group(1) for p in params.split(", ")] if params else []
    serial = list(lines)
    for i, m in reversed(hits):
        if m.group(2):          # parallel for simd (+ reduction clauses): the simd loop stays
            serial[i] = f"{m.group(1)}#pragma omp simd{m.group(4)}"
        else:
            del serial[i]
    serial[0] = f"static void {name}_serial({params}) {{"
    lines.insert(1, f"  if (!({cond})) {{ {name}_serial({', '.join(args)}); return; }}")
    return "\n".join(serial) + "\n\n" + "\n".join(lines)


def render_source(functions: list[str], dialect: Dialect) -> str:
    return dialect.prelude() + "\n\n" + "\n\n".join(functions) + "\n"
