"""Column sums in a row kernel: the fourth mixin of the reduction walk (``cstyle_reduction._Walk``).

A kernel whose rows also feed column partials (``passes/column_sums.py``: the weight and bias
gradients of a norm backward summed over its rows) keeps one slot of partials per row worker (a
block, or a thread row of a several-rows block): the rows are a grid loop over slots, each thread accumulates its columns in registers
(persistent schedules) or in its slot's row, and writes them back after its last row; the
launcher reduces the slots.

Needs the walk's ``k``, ``d``, ``o``, ``T``, ``vec``, ``V``, ``persistent``, ``multirow``, ``first``, ``loops``,
``preds``, ``offsets``, ``cache_leaves``, ``names`` and ``decls``.
"""
from __future__ import annotations

from ..cstyle import _Emitter, c_literal
from ..dialects import COMPUTE_TYPES
from ..schedule import ParallelType


class ColumnSums:
    def column_slot(self, q: int) -> str:
        """Where this thread accumulates its current element of column partials ``q``: a
        register of its columns (persistent schedules), else the element of its slot."""
        if self.persistent:
            return f"ca_{self.k.tensors[q].name}[{self._linear(self.cache_leaves)}]"
        lane = " + v" if self.vec else ""
        return f"{self.k.tensors[q].name}[{self.ix(self.offsets[q])}{lane}]"

    def open_slots(self, em: _Emitter) -> None:
        """The slot loop (one slot per row worker, the dialect's grid loop over ``gf_slots``:
        spread over OpenMP threads, or one iteration per block) and the register accumulators."""
        if self.d.parallel_pragma:
            work = " * ".join(f"n{r}" for r in range(self.k.n_dims)) or "1"
            em(self.d.parallel_pragma.format(work=work, threshold=self.o.omp_threshold))
            self.parallel_done = True
        # (a several-rows block's thread rows are slots of their own: the launcher passes
        # gf_slots = gridDim.x * blockDim.y)
        loop = self.d.row_loop_multi if self.multirow else self.d.loops[ParallelType.BIDx]
        em(loop.format(T=self.T, i="gf_slot", ext="gf_slots") + " {")
        em.depth += 1
        if not self.persistent:
            return              # (the launcher zeroes the slots)
        n = self.cache_size()
        for q in self.columns:
            t = self.k.tensors[q]
            em(f"{COMPUTE_TYPES[t.dtype]} ca_{t.name}[{n}];")
            em(self.d.unroll_pragma.format(ext=n))
            em(f"for (int l = 0; l < {n}; ++l) ca_{t.name}[l] = {c_literal(0, t.dtype)};")

    def emit_column_writeback(self, em: _Emitter) -> None:
        """After the slot's last row: registers -> the slot's row of every column partials
        tensor. Only index values declared outside the row loop are named here."""
        if not self.persistent:
            return
        names = self.names
        outside = {n for n, _ in self.decls.get(0, [])}
        self.names = {e: n for e, n in names.items() if n in outside}
        outer = em.depth
        for i in self.loops:
            self.open_leaf(em, i)
        rows = {f"i{k}" for k in range(self.first)}
        preds = [f"{self.ix(a)} < {self.ix(b)}" for a, b in self.preds if not (a.vars() | b.vars()) & rows]
        if preds:
            em("if (" + " && ".join(preds) + ") {")
            em.depth += 1
        lane = ""
        if self.vec:
            lane = " + v"
            em("#pragma unroll")
            em(f"for (int v = 0; v < {self.V}; ++v) {{")
            em.depth += 1
        for q in self.columns:
            t = self.k.tensors[q]
            em(f"{t.name}[{self.ix(self.offsets[q])}{lane}] = ca_{t.name}[{self._linear(self.cache_leaves)}];")
        self._close(em, outer)
        self.names = names
