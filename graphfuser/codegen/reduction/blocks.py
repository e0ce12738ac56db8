"""Blocked float sums: the third mixin of the reduction walk (``cstyle_reduction._Walk``).

A loop that adds n floats into one accumulator makes an error that grows with n: a CPU lane
that sums 135,000 values of a batch-norm channel one after the other lost four digits of
float32 where eager, whose sums are a cascade, lost one. Where the dialect asks for it
(``Dialect.sum_block`` = B > 0, the CPU), a pass whose reductions are all float sums splits its
innermost reduced loop of run-time extent into chunks of B iterations: each chunk sums into
fresh block accumulators (one per lane, as the pass's own), which are then added into the pass
accumulators with Kahan's compensation (one compensation per accumulator and lane). Every value is then added into at most B / lanes + 1
partial sums and the chunk totals are compensated, so the error no longer grows with the
extent; the inner loop stays the same simd loop, and a chunk of B = 1024 iterations costs one
extra add per lane. When no row loop encloses the pass (one row), the chunk loop is the one
split across threads (its chunk totals then add without compensation: each thread's share is
a plain OpenMP reduction).

Needs the walk's ``d``, ``T``, ``L``, ``loops``, ``nest``, ``red``, ``first``, ``acc``,
``first_of``, ``second_of``, ``grid_red`` and ``k``.
"""
from __future__ import annotations

from typing import Optional

from ..cstyle import _Emitter
from ..dialects import COMPUTE_TYPES
from ...ir.kir import Reduce


class SumBlocks:
    def block_leaf(self, reds: list[Reduce]) -> Optional[int]:
        """The leaf whose loop this pass splits into chunks, or None."""
        B = self.d.sum_block
        if not B or not reds or self.grid_red:
            return None
        for r in reds:
            if r.op != "sum" or not r.dtype.is_floating_point or id(r) in self.first_of or id(r) in self.second_of:
                return None
        if self.first == 0 and self.L > 1:
            return None
        runtime = [i for i in self.loops if self.red[i] and self.nest.leaves[i].extent.const is None]
        return runtime[-1] if runtime else None

    def open_block(self, em: _Emitter, i: int, ext: str, reds: list[Reduce]) -> tuple[str, str]:
        """Open the chunk loop of leaf ``i`` (extent ``ext``) and declare the block
        accumulators; return (start, end) of the chunk for the leaf's own loop. The pass's
        accumulators are renamed to the block ones until ``close_block``."""
        B, T, L = self.d.sum_block, self.T, self.L
        self.block_saved = {id(r): self.acc[id(r)] for r in reds}
        if self.first == 0 and self.d.parallel_pragma:
            work = " * ".join(f"n{r}" for r in range(self.k.n_dims)) or "1"
            clauses = "".join(f" reduction(+:{self.acc[id(r)]})" for r in reds)
            em(self.d.parallel_pragma.format(work=work, threshold=self.o.omp_threshold) + clauses)
            self.block_kahan = False
        else:
            self.block_kahan = True
            for r in reds:
                ct, c = COMPUTE_TYPES[r.dtype], self.acc[id(r)] + "c"
                em(f"{ct} {c} = 0;" if L == 1 else f"{ct} {c}[{L}] = {{0}};")
        var = f"i{i}"
        em(f"for ({T} {var}b = 0; {var}b < {ext}; {var}b += {B}) {{")
        em.depth += 1
        for r in reds:
            name, ct = self.acc[id(r)] + "b", COMPUTE_TYPES[r.dtype]
            em(f"{ct} {name} = 0;" if L == 1 else f"{ct} {name}[{L}] = {{0}};")
            self.acc[id(r)] = name
        return f"{var}b", f"({var}b + {B} < {ext} ? {var}b + {B} : {ext})"

    def close_block(self, em: _Emitter, reds: list[Reduce]) -> None:
        """Add the block accumulators into the pass's (at the chunk loop's depth) and close it."""
        for r in reds:
            b, a = self.acc[id(r)], self.block_saved[id(r)]
            self.acc[id(r)] = a
            lane = "[l]" if self.L > 1 else ""
            a, b, c, ct = a + lane, b + lane, a + "c" + lane, COMPUTE_TYPES[r.dtype]
            loop = f"for (int l = 0; l < {self.L}; ++l) " if self.L > 1 else ""
            if self.block_kahan:
                # an infinite or NaN total ends the compensation (t - t is 0 only when t is finite)
                em(f"{loop}{{ const {ct} y = {b} - {c}; const {ct} t = {a} + y; "
                   f"{c} = t - t == 0 ? (t - {a}) - y : 0; {a} = t; }}")
            else:
                em(f"{loop}{a} += {b};")
        em.depth -= 1
        em("}")
