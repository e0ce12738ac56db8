"""How a reduction kernel moves between rows: the second mixin of the reduction walk
(``cstyle_reduction._Walk``; ``reduction_passes.PassPlan`` is the first).

- prefetch: a persistent schedule whose rows are the dialect's grid-stride loop loads the next
  row's first-pass inputs while it reduces this one, into a register array or (``stages``) as
  asynchronous copies into a ring of shared-memory stages;
- grid split: a reduced leaf on a grid axis spreads one row over several blocks, whose partial
  accumulators the row's last block combines before it stores the row outputs.

Needs the walk's ``k``, ``nest``, ``d``, ``o``, ``T``, ``vec``, ``V``, ``persistent``, ``first``,
``L``, ``loops``, ``preds``, ``offsets``, ``cache_leaves`` and pass plan before it runs.
"""
from __future__ import annotations

from ..cstyle import _Emitter
from ..dialects import COMPUTE_TYPES
from ...ir.kir import Load, Reduce
from ..schedule import ParallelType, ScheduleError, iop, ivar


class RowPipeline:
    def _prefetched(self) -> dict[int, str]:
        """Tensor params whose first-pass loads go through a register array that the previous
        row filled: a persistent schedule whose one prefix leaf is the dialect's grid-stride row
        loop loads row ``i0 + step`` right after its first pass, so the load latency overlaps
        this row's reductions and stores (software pipelining over rows)."""
        leaves = self.nest.leaves
        if not (self.o.prefetch and self.d.row_prefetch and self.persistent and self.first == 1
                and leaves[0].ptype is ParallelType.BIDx and self.L == 1):
            return {}
        kept = [r for r in range(len(self.nest.roots)) if r not in self.k.red_roots]
        out: dict[int, str] = {}
        for e in self.pass_order(1):
            if isinstance(e, Load) and self.full[id(e)]:
                t = self.k.tensors[e.tensor]
                # a tensor broadcast along every kept dim (a bias, a weight) is the same for
                # every row: loaded where it is used, it stays in L1. Copied with each row, every
                # SM's asynchronous copies (which skip L1) hit its few lines in one L2 slice at
                # once: a float32 layer norm of [200704, 96] after a bias add took 292 us with
                # the bias staged, 47 us without the stages (H200; Inductor 55)
                if kept and all(t.dim_kinds[r] == "bcast" for r in kept):
                    continue
                # (strided along the row: gathered lane by lane where it is used, vectors.py)
                if not (self.vec and t.dim_kinds[self.vroot] in ("bcast", "strided")):
                    out[e.tensor] = f"pf_{t.name}"
        return out

    def _check_grid_split(self) -> None:
        """A reduced leaf on a grid axis (a row split across blocks): each block combines its
        part across its threads and writes it to the workspace. A single-pass kernel with row
        outputs only lets the row's last block (a counter per row) combine the parts and store;
        any other (several passes, full-size stores) needs ``grid_sync``: after each reduction
        pass the blocks of the row meet at a barrier, then each combines every part itself."""
        leaves = self.nest.leaves
        self.grid_sync = self.n_passes != 1 or bool(self.pass_stores)
        ptype = leaves[self.grid_red[0]].ptype
        templates = self.d.grid_reduce[ptype]
        threads = [leaves[i].ptype for i in range(self.first, len(leaves)) if self.bound[i] and self.red[i]]
        if len(self.grid_red) > 1 or self.pairs or (self.L != 1 and not self.kvec) or len(threads) != 1 or threads[0] not in templates \
                or any(not self.bound[i] for i in range(1, self.first)) or (self.grid_sync and "sync" not in templates):
            raise ScheduleError("a reduction split across blocks needs one thread axis that reduces, kept rows on "
                                "the first leaf, no pairs, and (several passes or full-size stores) a grid barrier")
        self.grid_thread = threads[0]

    def _grid_row(self) -> tuple[str, str, str]:
        """(slot row, rows, condition of a real row) of the workspace: the kept linear index
        when kept leaves are thread-bound (outer schedules: a column per thread), else the row
        leaf ``i0``."""
        kept = [r for r in range(len(self.nest.roots)) if r not in self.k.red_roots]
        if self.first > 1:
            row = rows = None
            for r in kept:          # (kept vector: the lane's column, ``v``)
                ri = self.root_idx_v[r]
                row = ri if row is None else iop("+", iop("*", row, ivar(f"n{r}")), ri)
                rows = ivar(f"n{r}") if rows is None else iop("*", rows, ivar(f"n{r}"))
            valid = " && ".join(f"{self.ix(a)} < {self.ix(b)}" for a, b in self.kept_preds) or "true"
            return self.ix(row), self.ix(rows), valid
        if self.first:
            return "i0", self.ix(self.nest.leaves[0].extent), "true"
        return "0", "1", "true"

    def emit_grid_combine(self, em: _Emitter, reds: list[Reduce]) -> None:
        """Every block writes its partial accumulators (a slot per reduction and row); then
        either the row's last block reads them all back and goes on to the row outputs (the
        others to their next row), or (``grid_sync``) every block waits for the others and
        combines them, in one order for all."""
        g = self.d.grid_reduce[self.nest.leaves[self.grid_red[0]].ptype]
        t = g[self.grid_thread]
        row, rows, valid = self._grid_row()
        index = {id(q): j for j, q in enumerate(self.reduces)}     # a slot per reduction of the kernel
        where = {id(r): dict(slot=f"({index[id(r)]} * {rows} + {row})", n=index[id(r)], rows=rows, row=row,
                             valid=valid) for r in reds}
        outer = em.depth
        lane = self.open_lanes(em)
        for r in reds:
            em(t["put"].format(acc=self.acc[id(r)] + lane, ct=COMPUTE_TYPES[r.dtype], **where[id(r)]))
        self._close(em, outer)
        if self.grid_sync:
            em(g["sync"])
        else:
            leaf_row = "i0" if self.first else "0"
            em(g["last"].format(row=leaf_row, leave="continue" if self.first else "return"))
        # the partials of every accumulator and kept-vector lane in one batched combine, after a
        # barrier or in a tile's last block alike (one lane at a time, the last block of a float
        # column sum of [4096, 768] ran four block reductions one after the other)
        if "load" in t and self.emit_batched_combines(em, self.grid_thread, reds, (t, where, valid)):
            return
        lane = self.open_lanes(em)
        for r in reds:
            em(t["combine"].format(acc=self.acc[id(r)] + lane, ct=COMPUTE_TYPES[r.dtype], op=r.op, **where[id(r)]))
        self._close(em, outer)

    @staticmethod
    def _close(em: _Emitter, depth: int) -> None:
        while em.depth > depth:
            em.depth -= 1
            em("}")

    def _stages(self) -> int:
        """Shared-memory stages of the prefetch (0: the register array). With ``S`` stages,
        rows ``i0 + 1 .. i0 + S`` (in grid strides) are in flight as asynchronous copies into a
        ring of dynamic shared memory that each thread alone writes and reads back (no barrier),
        so the bytes in flight do not cost registers. Vector accesses of 4, 8 or 16 bytes only."""
        S = self.o.prefetch_stages
        return S if S and self._stageable() else 0

    def _stageable(self) -> bool:
        """Whether the prefetch can stage through shared memory (at any positive stage count)."""
        if not (self.prefetch and self.vec and self.d.async_copy):
            return False
        return all(self.V * self.k.tensors[q].dtype.itemsize in (4, 8, 16) for q in self.prefetch)

    def stage_bytes(self) -> int:
        """Dynamic shared memory per thread (times the block's threads at launch)."""
        return self.stages * self.bytes_per_stage()

    def bytes_per_stage(self) -> int:
        """Dynamic shared memory per thread of one prefetch stage, had the kernel any (a twin
        rendered with other stages than its wide variant takes this times its own)."""
        if not self._stageable():
            return 0
        P = int(self.cache_size()) // self.V
        return P * sum(self.V * self.k.tensors[q].dtype.itemsize for q in self.prefetch)

    def stage_addr(self, q: int, stage: str) -> str:
        """Where this thread's vector of chunk ``i1...`` of tensor ``q`` sits in ``stage``:
        [stage][tensor][chunk][thread], so a warp's 16-byte accesses are consecutive."""
        P = int(self.cache_size()) // self.V
        nbytes = {t: self.V * self.k.tensors[t].dtype.itemsize for t in self.prefetch}
        before = sum(b for t, b in nbytes.items() if t < q)
        chunk = self._linear(self.cache_leaves[:-1])
        threads, me = (self.d.block_threads, self.d.thread_linear) if self.multirow else \
            ("(int)blockDim.x", "(int)threadIdx.x")
        return (f"gf_stage + (({stage}) * {P * sum(nbytes.values())} + {P * before} + ({chunk}) * {nbytes[q]}) "
                f"* {threads} + {me} * {nbytes[q]}")

    def emit_prefetch(self, em: _Emitter, row: str, stage: str = "") -> None:
        """Load row ``row`` of every prefetched tensor into its register array, or start its
        asynchronous copy into shared-memory ``stage`` (a scope that re-declares the row index
        and the index values hoisted at row depth)."""
        start = em.depth
        em("{")
        em.depth += 1
        em(f"const {self.T} i0 = {row};")
        em(f"if (i0 < {self.ix(self.nest.leaves[0].extent)}) {{")
        em.depth += 1
        self.emit_decls(em, 1, frozenset({"gf_slot"}))     # (column partials are never loaded)
        for i in self.loops:
            self.open_leaf(em, i)
        if self.preds:
            em("if (" + " && ".join(f"{self.ix(a)} < {self.ix(b)}" for a, b in self.preds) + ") {")
            em.depth += 1
        for q, name in self.prefetch.items():
            t = self.k.tensors[q]
            src = f"{t.name}[{self.ix(self.offsets[q])}]"
            if self.stages:
                em(f"gf_cp_async<{self.V * t.dtype.itemsize}>({self.stage_addr(q, stage)}, &{src});")
            elif self.vec:
                base = self._linear(self.cache_leaves[:-1])
                em(f"gf_load<{self.V}>({name} + ({base}) * {self.V}, &{src});")
            else:
                em(f"{name}[{self._linear(self.cache_leaves)}] = {src};")
        while em.depth > start:
            em.depth -= 1
            em("}")
        if self.stages:
            em("gf_cp_commit();")

    # -- bounds checks ----------------------------------------------------------------------
