"""The C-style walk for reduction kernels, shared by both dialects (as ``cstyle.py`` is for
pointwise kernels; it reuses that module's signature, literals, index printing and hoisting).

The leaves of the schedule split into a *prefix* (kept leaves before the first reduced leaf:
rows, rendered once) and the *inner* leaves, rendered once per pass:

- pass k (1..n) accumulates every ``Reduce`` of phase k (a reduction whose input reads phase
  k-1 results: softmax's max is phase 1, its sum phase 2); full-size stores that need phase k
  results go in pass k+1, the last one being the epilogue pass;
- per-thread accumulators are scalars, or arrays over the inner kept leaves ("lanes": the CPU
  outer reduction keeps one accumulator per simd lane); max / min carry a NaN flag so that
  NaN propagates while the loop stays a plain compare-select, unless the dialect has a
  NaN-propagating instruction for them (``nan_combine``: ``max.NaN.f32`` on CUDA);
- after a pass, accumulators combine across every reduced leaf the dialect binds to a thread
  index (``dialect.thread_reduce``: warp shuffles + shared memory on CUDA); a simd loop that
  accumulates gets the dialect's OpenMP reduction clause;
- when every reduced inner leaf is thread-bound or of constant extent (the persistent
  schedule), the first pass that loads a tensor keeps it in a register array and later passes
  read the array, so the input is read from memory once (computed values are kept too when
  the per-thread cache is small or recomputing them is not plain arithmetic);
- persistent schedules whose rows are a grid-stride loop (``dialect.row_prefetch``) prefetch:
  the next row's first-pass loads start right after this row's first pass, into a register
  array or, with ``prefetch_stages`` S > 0 and 4/8/16-byte vectors, as asynchronous copies into
  S shared-memory stages that each thread alone writes and reads back (``dialect.async_copy``),
  so a block keeps up to S rows in flight while it reduces and stores the current one;
- float sums over a run-time extent accumulate in chunks with compensated totals where the
  dialect asks for it (``blocks.py``: the CPU's lanes, a CUDA thread's serial loop); column
  partials of a norm backward ride in the row loop (``columns.py``);
- register vectors along the row (``vectors.py``): loads, stores and softmax's online pair
  once per vector; where the dialect names a loop's last iteration, a pass over a row that is
  no multiple of V long runs its whole vectors in the loop and the partial one after it;
- an outer reduction's vector pass runs its row loop masked where the dialect predicates
  accesses (``masked.py``): four iterations a trip, one block of code, no branch per row;
- values that do not vary along the reduced axes (means, rstd ...) are computed once per row
  after the pass that finishes them, and row-sized outputs are stored by the first thread.

Nothing here asks which dialect it prints: binds, pragmas, thread combines and scratch
declarations are dialect data.
"""
from __future__ import annotations

import math
from typing import Optional

import torch

from ..cstyle import RenderOptions, _Emitter, c_literal, cast_text, signature
from ..dialects import COMPUTE_TYPES, LOAD_CONVERT, STORAGE_TYPES, STORE_CONVERT, Dialect
from ...ir.kir import (Call, Cast, Const, EdgeIndex, Expr, FirstLoad, LastLoad, LinearIndex, Load, Reduce, ReductionSize,
                  ScalarArg, prim_text)
from .lower import ReductionKernel
from .masked import MaskedRows
from .blocks import SumBlocks
from .columns import ColumnSums
from .combines import ThreadCombines
from .index import IndexPlan
from .passes import PassPlan
from .row_values import RowValues
from .rows import RowPipeline
from .vectors import RowVectors
from ..schedule import IterDomain, LoopNest, ParallelType, ScheduleError, iconst, ivar

COMBINE = {"sum": "{a} += {v};", "prod": "{a} *= {v};",
           "max": "{a} = {v} > {a} ? {v} : {a};", "min": "{a} = {v} < {a} ? {v} : {a};"}
_INT_LIMITS = {torch.int64: ("(-9223372036854775807LL - 1)", "9223372036854775807LL")}


def identity(op: str, dtype: torch.dtype) -> str:
    """The C literal every accumulator of ``op`` starts from."""
    if op in ("sum", "prod"):
        return c_literal(0 if op == "sum" else 1, dtype)
    if dtype.is_floating_point:
        return c_literal(-math.inf if op == "max" else math.inf, dtype)
    if dtype in _INT_LIMITS:
        return _INT_LIMITS[dtype][0 if op == "max" else 1]
    info = torch.iinfo(dtype)
    return c_literal(info.min if op == "max" else info.max, dtype)


def _roots_under(d: IterDomain) -> set[int]:
    o = d.origin
    if o[0] == "root":
        return {o[1]}
    if o[0] == "merge":
        return _roots_under(o[1]) | _roots_under(o[2])
    return _roots_under(o[1])


class _Walk(IndexPlan, PassPlan, RowPipeline, RowValues, SumBlocks, ColumnSums, ThreadCombines, RowVectors,
            MaskedRows):
    def __init__(self, kernel: ReductionKernel, nest: LoopNest, dialect: Dialect, opts: RenderOptions,
                 online: bool = False, scratch: bool = False) -> None:
        self.k, self.nest, self.d, self.o = kernel, nest, dialect, opts
        self.want_online = online
        self.T = opts.index_type
        leaves = nest.leaves
        red_roots = set(kernel.red_roots)
        self.red = []
        for d in leaves:
            under = _roots_under(d)
            if under & red_roots and under - red_roots:
                raise ScheduleError("a leaf mixes kept and reduced roots")
            self.red.append(bool(under & red_roots))
        if True not in self.red:
            raise ScheduleError("the schedule has no reduced leaf")
        self.first = self.red.index(True)
        self.bound = [d.ptype in dialect.binds for d in leaves]
        last = leaves[-1]
        self.vec = last.ptype is ParallelType.Vectorize and dialect.vector_registers and opts.predicate_elimination
        # kept vector (outer kernels): each thread holds V adjacent columns, V accumulators
        self.kvec = self.vec and not self.red[-1]
        if last.ptype is ParallelType.Vectorize and dialect.vector_registers and not self.red[-1] and not self.vec:
            raise ScheduleError("register vectors along a kept axis need predicate elimination")
        self.vroot = nest.contiguous_root if self.kvec else len(nest.roots) - 1
        self.V = last.extent.const if self.vec else None
        inner = range(self.first, len(leaves))
        self.loops = [k for k in inner if not self.bound[k] and not (self.vec and k == len(leaves) - 1)]
        self.lane_leaves = [k for k in inner if not self.red[k] and not self.bound[k]]
        for k in self.lane_leaves:
            if leaves[k].extent.const is None:
                raise ScheduleError("kept leaves inside the reduction loops need constant extents")
        self.L = math.prod(leaves[k].extent.const for k in self.lane_leaves)
        self.persistent = all(self.bound[k] or leaves[k].extent.const is not None for k in inner if self.red[k])
        self.cache_leaves = [k for k in inner if not self.bound[k]]
        # CPU rows re-read memory each pass, but computed values (softmax's exponentials) can
        # go to a per-row scratch array when the dialect has one (one runtime-extent loop)
        self.scratch = (scratch and not self.persistent and dialect.row_scratch and self.L == 1
                        and len(self.loops) == 1 and not self.vec)
        leaf_idx = {d.id: ivar(f"i{k}") for k, d in enumerate(leaves)}
        if self.vec:
            leaf_idx[last.id] = iconst(0)
        self.idx = nest.domain_indices(leaf_idx)
        self.root_idx = [self.idx[r.id] for r in nest.roots]
        # kept vector: per-lane indices (``v`` is the lane loop's variable) for row loads, row
        # stores and the workspace slots; vector accesses use the lane-0 ones
        self.root_idx_v = self.root_idx
        if self.kvec:
            if self.lane_leaves != [len(leaves) - 1]:
                raise ScheduleError("a kept vector needs its lanes to be the only kept leaf inside the reduction")
            idx_v = nest.domain_indices({**leaf_idx, last.id: ivar("v")})
            self.root_idx_v = [idx_v[r.id] for r in nest.roots]
        self.prefix_vars = {f"i{k}" for k in range(self.first)} | {f"i{k}" for k in inner if self.bound[k]}
        self.lane_vars = {f"i{k}" for k in self.lane_leaves}
        # column-sum partials: rows on the one prefix leaf, which a slot loop encloses; each
        # thread owns its columns, so it accumulates them in registers (persistent schedules:
        # the row's elements of a thread are the same columns in every row) or in its slot
        self.columns = [q for q, t in enumerate(kernel.tensors) if t.partials]
        if self.columns and (self.first != 1 or leaves[0].ptype is not ParallelType.BIDx or self.L != 1 or self.kvec):
            raise ScheduleError("column sums need the rows on the first leaf (a grid loop) and no kept lanes")
        self._checks()
        self.ragged = self._ragged()        # rows of any length (vectors.py) ...
        self.lanewise = False               # ... whose partial last vector is being emitted
        self._offsets()
        self._analyze()
        self.prefetch = self._prefetched()
        self.stages = self._stages()
        self.grid_red = [k for k in inner if self.red[k] and leaves[k].ptype in dialect.grid_reduce]
        self.grid_sync = False
        self.backwards = False
        self.guard: Optional[str] = None     # the body's row predicate where it is masked (maskable)
        # several rows per block (the launcher's choice, blockDim.y > 1, for rows of few
        # threads): persistent schedules whose one prefix leaf is the row loop and whose threads
        # meet only in warp shuffles there, no grid split (column sums: a slot per thread row)
        self.multirow_capable = bool(dialect.row_loop_multi) and self.persistent and self.first == 1 \
            and leaves[0].ptype is ParallelType.BIDx and not self.grid_red \
            and self.L == 1 and all(leaves[k].ptype is ParallelType.TIDx for k in inner if self.bound[k])
        self.multirow = opts.multirow and self.multirow_capable
        self.row_step = dialect.row_prefetch_multi if self.multirow else dialect.row_prefetch
        if self.grid_red:
            if self.columns:
                raise ScheduleError("column sums cannot split a row across blocks")
            self._check_grid_split()

    def text(self, e: Expr, names: dict[int, str], raw_load) -> str:
        ct = COMPUTE_TYPES[e.dtype]
        if isinstance(e, Load):
            return LOAD_CONVERT.get(self.k.tensors[e.tensor].dtype, "{0}").format(raw_load(e))
        if isinstance(e, ScalarArg):
            return f"(({ct})({self.k.scalars[e.index].name}))"
        if isinstance(e, ReductionSize):
            return f"(({ct})(" + " * ".join(f"n{r}" for r in self.k.red_roots) + "))"
        if isinstance(e, LinearIndex):
            lin = self.linear_index()
            return lin if lin.startswith("gf_lane4") else f"(({ct})({lin}))"
        if isinstance(e, EdgeIndex):
            return f"(({ct})({self.edge_linear_index(e.last)}))"
        if isinstance(e, (FirstLoad, LastLoad)):
            return LOAD_CONVERT.get(self.k.tensors[e.tensor].dtype, "{0}").format(self.first_load(e))
        if isinstance(e, Cast):
            return cast_text(names[id(e.arg)], e.arg.dtype, e.dtype)
        assert isinstance(e, Call), e
        return prim_text(e.op, e.dtype, [names[id(a)] for a in e.args])

    def base_names(self, lane: str) -> dict[int, str]:
        names = {id(e): c_literal(e.value, e.dtype) for e in self.exprs if isinstance(e, Const)}
        for r in self.reduces:
            names[id(r)] = self.acc[id(r)] + lane
        names.update(getattr(self, "hnames", {}))
        return names

    # -- emission ------------------------------------------------------------------------------
    def leaf_extent(self, i: int) -> str:
        d = self.nest.leaves[i]
        ext = self.ix(d.extent)
        if self.fold is not None and d is self.fold[0]:
            lim = f"({self.ix(self.fold[1].extent)} - {self.ix(self.fold[2])})"
            ext = f"({lim} < {ext} ? {lim} : {ext})"
        return ext

    def open_leaf(self, em: _Emitter, i: int, pragma: Optional[str] = None,
                  chunk: Optional[tuple[str, str]] = None) -> None:
        """Open leaf ``i``'s loop (or bind it); ``chunk``: (start, end) of a blocked sum's chunk."""
        d, T = self.nest.leaves[i], self.T
        var, ext = f"i{i}", self.leaf_extent(i)
        if d.ptype in self.d.binds:
            em(self.d.binds[d.ptype].format(T=T, i=var))
            return
        if self.columns and i == 0:
            # the rows of this slot: gf_slot, gf_slot + gf_slots, ... (a grid-stride loop when
            # the slots are the blocks: the launcher passes gf_slots = gridDim.x)
            em(f"for ({T} {var} = gf_slot; {var} < {ext}; {var} += gf_slots) {{")
            em.depth += 1
            return
        if pragma is not None:
            if pragma:
                em(pragma)
        elif d.ptype in (ParallelType.BIDx, ParallelType.BIDy) and self.d.parallel_pragma and not self.parallel_done:
            work = " * ".join(f"n{r}" for r in range(self.k.n_dims)) or "1"
            em(self.d.parallel_pragma.format(work=work, threshold=self.o.omp_threshold))
            self.parallel_done = True
        elif d.ptype is ParallelType.Vectorize and self.d.simd_pragma:
            em(self.d.simd_pragma)
        elif d.ptype is ParallelType.Unroll and d.extent.const is not None:
            if self.fold is not None and d is self.fold[0] and self.d.simd_pragma:
                # the lanes of a tile cut at the kept dim's end run min(W, left) times: GCC
                # neither unrolls nor vectorizes that trip count; simd lanes with a tail do (the
                # CPU outer kernels: a GELU backward with its bias gradient over [16, 128] took
                # 40 us scalar, 4.5 us so, on this project's 2-core AVX-512 machine)
                em(self.d.simd_pragma)
            else:
                em(self.d.unroll_pragma.format(ext=d.extent.const))
        elif self.red[i] and d.extent.const is None and self.d.runtime_unroll:
            em(self.d.runtime_unroll)          # several loads in flight per thread
        loop = self.d.row_loop_multi if self.multirow and i == 0 else self.d.loops[d.ptype]
        if self.o.even_rows and i == 0 and d.ptype is ParallelType.BIDx and self.d.row_loop_once:
            loop = self.d.row_loop_once
        if self.backwards and i in self.grid_red:
            loop = self.d.grid_reduce[d.ptype]["reverse"]
        if chunk is not None:
            em(f"for ({T} {var} = {chunk[0]}; {var} < {chunk[1]}; ++{var}) {{")
        else:
            em(loop.format(T=T, i=var, ext=ext) + " {")
        em.depth += 1

    def simd_pragma(self, reds: list[Reduce], split: bool = True) -> str:
        """The simd pragma of a loop that accumulates ``reds``: with reduction clauses, or none;
        split across threads when no row loop encloses it, unless ``split`` is False."""
        clauses = []
        if any(id(r) in self.first_of or id(r) in self.second_of for r in reds):
            return ""                       # an online update is no OpenMP reduction
        for r in reds:
            j = self.acc[id(r)]
            if r.op not in self.d.simd_reduction:
                return ""
            clauses.append(f" reduction({self.d.simd_reduction[r.op]}:{j})")
            if self.nan_flag(r):
                if "or" not in self.d.simd_reduction:
                    return ""
                clauses.append(f" reduction({self.d.simd_reduction['or']}:nan{j[3:]})")
        if not self.d.simd_pragma:
            return ""
        if self.first == 0 and self.d.parallel_simd_pragma and split:
            # no row loop to spread over threads: the pass loop itself is split across them
            work = " * ".join(f"n{r}" for r in range(self.k.n_dims)) or "1"
            return self.d.parallel_simd_pragma.format(work=work, threshold=self.o.omp_threshold) + "".join(clauses)
        return self.d.simd_pragma + "".join(clauses)

    def nan_flag(self, r: Reduce) -> bool:
        """Float max / min carry a NaN flag, unless the dialect has a NaN-propagating combine
        for them (one instruction: ``max.NaN.f32`` on CUDA) and they are not half of a pair."""
        if r.op not in ("max", "min") or not r.dtype.is_floating_point:
            return False
        return (r.op, r.dtype) not in self.d.nan_combine or id(r) in self.first_of or id(r) in self.second_of

    def combine(self, r: Reduce) -> str:
        if self.nan_flag(r):
            return COMBINE[r.op]
        return self.d.nan_combine.get((r.op, r.dtype), COMBINE[r.op])

    def emit_exprs(self, em: _Emitter, order: list[Expr], names: dict[int, str], p: int) -> None:
        for n, e in enumerate(order):
            if id(e) in names:
                continue
            raw = (lambda x: self.raw_load(p, x)) if self.full[id(e)] else self.row_load
            text = self.text(e, names, raw)
            if text.startswith("gf_lane4"):         # (see cstyle.linear_lane_text)
                names[id(e)] = text
                continue
            name = f"e{n}"
            em(f"const {COMPUTE_TYPES[e.dtype]} {name} = {text};")
            names[id(e)] = name
            if self.cached.get(id(e)) == p:
                em(f"{self.cache_name[id(e)]}[{self._linear(self.cache_leaves)}] = {name};")

    def emit_pass(self, em: _Emitter, p: int) -> None:
        reds = [r for r in self.reduces if self.phase[id(r)] == p]
        L, lane = self.L, self.lane()
        for r in reds:
            j, ct, init = self.acc[id(r)], COMPUTE_TYPES[r.dtype], identity(r.op, r.dtype)
            flag = f"nan{j[3:]}"
            if L == 1:
                em(f"{ct} {j} = {init};")
                if self.nan_flag(r):
                    em(f"int {flag} = 0;")
                if id(r) in self.first_of:
                    for line in self.first_of[id(r)].decls(ct):
                        em(line)
            else:
                em(f"{ct} {j}[{L}];")
                em(f"for (int l = 0; l < {L}; ++l) {j}[l] = {init};")
                if self.nan_flag(r):
                    em(f"int {flag}[{L}] = {{0}};")
        if p == 1 and self.stages:
            em(f"gf_cp_wait<{self.stages - 1}>();")      # this row's copies are done
        outer = em.depth
        # a split kernel's passes alternate direction over the block's chunks: a pass starts
        # with what the previous one read last, which is still in L2 (chunks of a grid barrier
        # kernel; the L2 is a fraction of the tensor, so a pass in the same order would miss)
        self.backwards = self.grid_sync and p % 2 == 0
        blk, inner = self.block_leaf(reds), outer
        if blk is not None:
            self.block_decls(em, reds)
        masked = bool(self.preds) and self.maskable(p, reds)
        unrolled = self.masked_unroll_leaf() if masked and blk is None else None
        bounds: list[str] = []
        for i in self.loops:
            chunk = None
            if i == blk:
                chunk = self.open_block(em, i, self.leaf_extent(i), reds)
                inner = em.depth
            if i == unrolled:
                bounds.append(self.open_masked_unroll(em, i))
                continue
            simd = self.nest.leaves[i].ptype is ParallelType.Vectorize and L == 1 and (reds or self.first == 0)
            self.open_leaf(em, i, self.simd_pragma(reds, blk is None) if simd else None, chunk)
        if masked:
            # one basic block: predicated loads, the arithmetic for every row, masked updates
            em("const bool gf_ok = " + " && ".join(bounds + self.pred_texts()) + ";")
            self.guard = "gf_ok"
        elif self.preds:
            em("if (" + " && ".join(self.pred_texts()) + ") {")
            em.depth += 1
        self.emit_body(em, p, reds, lane)
        self.guard = None
        while em.depth > inner:
            em.depth -= 1
            em("}")
        if blk is not None:
            self.close_block(em, reds)
        while em.depth > outer:
            em.depth -= 1
            em("}")
        if blk is not None:
            self.finish_blocks(em, reds)
        if self.ragged:
            self.emit_tail(em, p, reds, lane)
        if p == 1 and self.prefetch:
            step = self.row_step[1]
            em(f"const {self.T} gf_next = i0 + {f'{self.stages} * ' if self.stages > 1 else ''}{step};")
            self.emit_prefetch(em, "gf_next", "gf_cur")
            if self.stages:
                em(f"gf_cur = gf_cur + 1 == {self.stages} ? 0 : gf_cur + 1;")
        bound_red = [i for i in range(self.first, len(self.nest.leaves)) if self.bound[i] and self.red[i]]
        if bound_red and L > 1 and not self.kvec:
            raise ScheduleError("thread-bound reduced leaves with lane accumulators are not supported")
        plain: list[Reduce] = []
        for r in reds:
            j = self.acc[id(r)]
            if self.nan_flag(r):
                nan = c_literal(math.nan, r.dtype)
                if L == 1:
                    em(f"{j} = nan{j[3:]} ? {nan} : {j};")
                else:
                    em(f"for (int l = 0; l < {L}; ++l) {j}[l] = nan{j[3:]}[l] ? {nan} : {j}[l];")
            first, second = self.first_of.get(id(r)), self.second_of.get(id(r))
            if first is not None and not first.fused:
                for line in first.after_first(j, COMPUTE_TYPES[r.dtype]):
                    em(line)
                continue                      # combined once the second reduction is done
            if second is not None and second.fused:
                continue                      # combined with its first
            pair = first or second
            if pair is None:
                plain.append(r)
                continue
            for i in bound_red:
                ptype = self.nest.leaves[i].ptype
                em(pair.combine(self.d.thread_reduce_pair[(pair.kind, ptype)],
                                self.acc[id(pair.first)], self.acc[id(pair.second)]))
        for i in bound_red:
            self.emit_thread_combines(em, self.nest.leaves[i].ptype, plain)
        if self.grid_red and reds:
            self.emit_grid_combine(em, reds)

    def open_lanes(self, em: _Emitter) -> str:
        """Open the lane loop of a kept vector (variable ``v``) and return the lane suffix of
        the accumulators; nothing without lanes."""
        if not self.kvec:
            return ""
        em("#pragma unroll")
        em(f"for (int v = 0; v < {self.V}; ++v) {{")
        em.depth += 1
        return "[v]"

    def open_row_lanes(self, em: _Emitter) -> None:
        """Open the lanes a row value is computed for: a kept vector's lane loop, or the
        kept leaves inside the reduction (the CPU's simd lanes, a cut tile's tail included)."""
        if self.kvec:
            self.open_lanes(em)
            return
        for i in self.lane_leaves:
            self.open_leaf(em, i, self.d.simd_pragma if self.nest.leaves[i].ptype is ParallelType.Vectorize else None)

    def emit_body(self, em: _Emitter, p: int, reds: list[Reduce], lane: str) -> None:
        order = self.pass_order(p)
        names = self.base_names(lane)
        if self.cache_name:
            ci = self._linear(self.cache_leaves)
            names.update({k: f"{c}[{ci}]" for k, c in self.cache_name.items() if self.cached[k] < p})
        stores = self.pass_stores.get(p, [])
        vpairs = self.vector_pairs(reds)
        if self.vec:
            self.open_vector(em, p, order, stores, vpairs)
        self.emit_exprs(em, order, names, p)
        per_vector = {id(r) for pair in vpairs for r in (pair.first, pair.second)}
        for pair in vpairs:
            em(f"gf_x{pair.tag}[v] = {names[id(pair.x)]};")
        g = self.guard
        for r in reds:
            if id(r) in per_vector:
                continue
            pair = self.first_of.get(id(r)) or self.second_of.get(id(r))
            j = self.acc[id(r)] + lane
            v = names[id(pair.x if pair else r.args[0])]
            if pair is not None:
                stage = "both" if pair.fused else ("first" if r is pair.first else "second")
                if not (pair.fused and r is pair.second):
                    lines = pair.lines(stage, self.acc[id(pair.first)], self.acc[id(pair.second)], v,
                                       COMPUTE_TYPES[r.dtype])
                    for line in ([f"if ({g}) {{", *lines, "}"] if g else lines):
                        em(line)
            else:
                if g:        # a masked row adds the identity
                    masked = f"gf_m{self.acc[id(r)][3:]}"
                    em(f"const {COMPUTE_TYPES[r.dtype]} {masked} = {g} ? {v} : {identity(r.op, r.dtype)};")
                    v = masked
                em(self.combine(r).format(a=j, v=v))
            if self.nan_flag(r):
                # (masked: a row outside computes on zeros, where 0 / 0 is NaN; flag rows inside only)
                em(f"nan{self.acc[id(r)][3:]}{lane} |= " + (f"{g} && {v} != {v};" if g else f"{v} != {v};"))
        for q, e in stores:
            t = self.k.tensors[q]
            val = STORE_CONVERT.get(t.dtype, "{0}").format(names[id(e)])
            if t.partials:
                em(f"{'if (' + g + ') ' if g else ''}{self.column_slot(q)} += {val};")
                continue
            em(self.store_text(q, val) if self.vec else f"{t.name}[{self.ix(self.offsets[q])}] = {val};")
        if self.vec:
            self.close_vector(em, stores, vpairs)

    def emit_row_stores(self, em: _Emitter) -> None:
        if not self.row_stores:
            return
        outer = em.depth
        if not self.kvec:
            for i in self.lane_leaves:
                self.open_leaf(em, i, self.d.simd_pragma if self.nest.leaves[i].ptype is ParallelType.Vectorize else "")
        leaders = [f"i{i} == 0" for i in range(self.first, len(self.nest.leaves)) if self.bound[i] and self.red[i]]
        if self.grid_sync:      # every block of the row holds the row values: one stores them
            leaders.append(self.d.grid_reduce[self.nest.leaves[self.grid_red[0]].ptype]["leader"])
        conds = [f"{self.ix(a)} < {self.ix(b)}" for a, b in self.kept_preds] + leaders
        if conds:
            em("if (" + " && ".join(conds) + ") {")
            em.depth += 1
        self.open_lanes(em)
        names = self.base_names(self.lane())
        if self.L > 1:          # row values no pass read (see emit_row)
            self.emit_exprs(em, self._row_order([e for _, e in self.row_stores], names), names, self.n_passes + 1)
        for q, e in self.row_stores:
            t = self.k.tensors[q]
            val = STORE_CONVERT.get(t.dtype, "{0}").format(names[id(e)])
            em(f"{t.name}[{self.ix(self.offsets_v[q])}] = {val};")
        while em.depth > outer:
            em.depth -= 1
            em("}")

    def render(self, fname: str, max_threads: int) -> str:
        em, k, d, leaves = _Emitter(), self.k, self.d, self.nest.leaves
        self.parallel_done = False
        self.k_arrays = 0
        self.hnames: dict[int, str] = {}
        self.pass_rows = self._pass_rows() if self.L > 1 else set()
        params = signature(k, d, self.o)
        if self.grid_red:
            params += [f"double* {d.restrict} gf_work", f"unsigned int* {d.restrict} gf_sem"]
        if self.columns:
            params.append(f"{self.T} gf_slots")
        out = [f"{d.kernel_prefix.format(block=max_threads)} {fname}(" + ", ".join(params) + ") {"]
        bound_red = [i for i in range(self.first, len(leaves)) if self.bound[i] and self.red[i]]
        if bound_red:
            k_axes = {leaves[i].ptype for i in bound_red} & set(d.thread_reduce_k)
            x_only = {leaves[i].ptype for i in bound_red} == {ParallelType.TIDx} and d.shared_x_decl
            em(f"__shared__ double gf_smem[{d.shared_k_doubles}];" if k_axes else
               d.shared_x_decl if x_only else d.shared_decl)
        if self.grid_sync:
            em(d.grid_reduce[leaves[self.grid_red[0]].ptype]["sync_decl"])
        for i in range(self.first, len(leaves)):
            if self.bound[i]:
                em(d.binds[leaves[i].ptype].format(T=self.T, i=f"i{i}"))
        self.emit_decls(em, 0)
        if self.stages:
            em(d.async_copy)
            em("int gf_cur = 0;")
            for j in range(self.stages):
                self.emit_prefetch(em, f"{self.row_step[0]} + {j} * {self.row_step[1]}" if j else self.row_step[0],
                                   str(j))
        elif self.prefetch:
            for q, name in self.prefetch.items():
                em(f"{STORAGE_TYPES[k.tensors[q].dtype]} {name}[{self.cache_size()}];")
            self.emit_prefetch(em, self.row_step[0])
        if self.columns:
            self.open_slots(em)
        slot_depth = em.depth
        for i in range(self.first):
            self.open_leaf(em, i)
            self.emit_decls(em, i + 1)
        slot = 0
        for e in self.exprs:
            if id(e) in self.cached:
                ct, name = COMPUTE_TYPES[e.dtype], self.cache_name[id(e)]
                if self.scratch:
                    em(d.row_scratch_decl.format(ct=ct, name=name, n=self.cache_size(), slot=slot))
                    slot += 1
                else:
                    em(f"{ct} {name}[{self.cache_size()}];")
        self.emit_row(em, 0)
        for p in range(1, self.n_passes + 1):
            self.emit_pass(em, p)
            self.emit_row(em, p)
        self.emit_row_stores(em)
        if self.columns:
            self._close(em, slot_depth)
            self.emit_column_writeback(em)
        while em.depth > 1:
            em.depth -= 1
            em("}")
        return "\n".join(out + em.lines + ["}"])


def render_reduction(kernel: ReductionKernel, nest: LoopNest, dialect: Dialect, fname: str,
                     opts: Optional[RenderOptions] = None, max_threads: int = 512, online: bool = False,
                     scratch: bool = False, info: Optional[dict] = None) -> str:
    """One reduction kernel function in ``dialect`` (see the module docstring). ``online``: fuse
    softmax's max and sum passes (for schedules that re-read memory every pass); ``scratch``:
    keep computed values for later passes in a per-row array (the dialect's ``row_scratch``).
    ``info`` (if given) receives ``shared_per_thread``: dynamic shared memory bytes the launch
    gives per thread of the block (the prefetch stages; ``shared_per_stage``: of one stage), ``grid_sync``: whether blocks wait
    for each other (the launch must make every block resident at once), and ``column_registers``:
    whether column partials are accumulated in registers and written whole (else the kernel adds
    into its slots, which the launcher zeroes), and ``ragged``: whether its vectors take rows of
    any length (``vectors.py``; else the launcher runs it on rows a multiple of V long only)."""
    walk = _Walk(kernel, nest, dialect, opts or RenderOptions(), online, scratch)
    text = walk.render(fname, max_threads)
    if info is not None:
        info["shared_per_thread"] = walk.stage_bytes()
        info["shared_per_stage"] = walk.bytes_per_stage()
        info["grid_sync"] = walk.grid_sync
        info["column_registers"] = walk.persistent
        info["multirow"] = walk.multirow
        info["multirow_capable"] = walk.multirow_capable
        info["ragged"] = walk.ragged
    return text


def exact_products(kernel: ReductionKernel) -> bool:
    """Whether the kernel must round every product before it adds: one with a max / min
    reduction. Its later passes recompute the values it took the max of (softmax's ``x * s``)
    and subtract the max; contracted into a multiply-add, the max element's difference is the
    product's rounding error instead of 0 (8192 for 200 * 1e10 in float32), and exp of that
    is inf: a log_softmax of such a row came out -inf everywhere. CPU: a GCC pragma in the
    source; CUDA: NVRTC's ``--fmad=false`` for its variants."""
    return any(r.op in ("max", "min") for r in kernel.reductions())


def render_reduction_source(functions: list[str], dialect: Dialect, contract: bool = True) -> str:
    head = "" if contract or not dialect.no_contract_pragma else dialect.no_contract_pragma + "\n"
    return head + dialect.prelude() + "\n" + dialect.reduction_prelude + "\n\n" + "\n\n".join(functions) + "\n"
