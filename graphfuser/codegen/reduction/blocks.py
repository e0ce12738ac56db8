"""Blocked float sums: the third mixin of the reduction walk (``render._Walk``).

A loop that adds n floats into one accumulator makes an error that grows with n: a CPU lane
that sums 135,000 values of a batch-norm channel one after the other lost four digits of
float32 where eager, whose sums are a cascade, lost one. Where the dialect asks for it
(``Dialect.sum_block`` = B > 0), a pass whose reductions are all float sums splits its innermost
reduced loop of run-time extent into chunks of B iterations: each chunk sums into fresh block
accumulators (one per lane, as the pass's own), which are then added into the pass accumulators
with Kahan's compensation (one compensation per accumulator and lane, declared with the pass
accumulators so that it carries across every loop around the chunks); after the pass, the
accumulators take their last compensation back. A value is then added into at most B partial
sums (B / lanes where the loop is a simd one) and the chunk totals add almost exactly, so the
error is that of a B-term sum whatever the extent: a ResNet bottleneck's batch-norm gradients on
the CPU went from 4-18x eager's distance to float64 to 0.6-1.4x with B = 32, at no measurable
cost (``logs/reduction-accuracy-cpu.md``).

Sums of exponentials (softmax's and logsumexp's ``sum(exp(x - max))``) take chunks of the
dialect's ``exp_sum_block`` where it has one (the CPU's: 8 * B). Every term is positive, so
nothing cancels and a chunk's error is at most its length per lane in ulps of its total (32
float32 additions a lane with 256-long chunks and 8 lanes), where eager's vectorized softmax adds
a whole row per lane (512 a lane for 4096 columns); the chunk totals still add with the
compensation. Each chunk's horizontal reduction of the lanes costs about what its 32 additions
do: a bf16 softmax over rows of 4096 on 2 CPU threads took 94 ms with B-long chunks, 78-83 ms
with 8 * B.

When no row loop encloses the pass (one row), the chunk loop is the one split across threads:
the accumulators and their compensations are both in the OpenMP reduction clause, so each
thread compensates its own chunk totals and the threads' sums and compensations are added at
the end (a few terms). On CUDA the chunks are those of a thread's serial loop; the block's
threads then combine in a tree (``cuda_prelude``).

Needs the walk's ``d``, ``T``, ``L``, ``loops``, ``nest``, ``red``, ``first``, ``acc``,
``first_of``, ``second_of``, ``grid_red``, ``o`` and ``k``.
"""
from __future__ import annotations

from typing import Optional

from ..cstyle import _Emitter
from ..dialects import COMPUTE_TYPES
from ...ir.kir import Call, Reduce


def _exponential(r: Reduce) -> bool:
    """Whether every term of the sum ``r`` is an exponential (positive or zero)."""
    e = r.args[0]
    return isinstance(e, Call) and e.op == "exp"


class SumBlocks:
    def block_size(self, reds: list[Reduce]) -> int:
        """The chunk length of a pass whose reductions are ``reds`` (float sums)."""
        if self.d.exp_sum_block and all(_exponential(r) for r in reds):
            return self.d.exp_sum_block
        return self.d.sum_block

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

    def block_decls(self, em: _Emitter, reds: list[Reduce]) -> None:
        """The compensations of the pass's accumulators (with them, before every loop)."""
        for r in reds:
            ct, c = COMPUTE_TYPES[r.dtype], self.acc[id(r)] + "c"
            em(f"{ct} {c} = 0;" if self.L == 1 else f"{ct} {c}[{self.L}] = {{0}};")

    def open_block(self, em: _Emitter, i: int, ext: str, reds: list[Reduce]) -> tuple[str, str]:
        """Open the chunk loop of leaf ``i`` (extent ``ext``) and declare the block
        accumulators; return (start, end) of the chunk for the leaf's own loop. The pass's
        accumulators are renamed to the block ones until ``close_block``."""
        B, T, L = self.block_size(reds), self.T, self.L
        self.block_saved = {id(r): self.acc[id(r)] for r in reds}
        if self.first == 0 and self.d.parallel_pragma:
            work = " * ".join(f"n{r}" for r in range(self.k.n_dims)) or "1"
            clauses = "".join(f" reduction(+:{self.acc[id(r)]}) reduction(+:{self.acc[id(r)]}c)" for r in reds)
            em(self.d.parallel_pragma.format(work=work, threshold=self.o.omp_threshold) + clauses)
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
            # an infinite or NaN total ends the compensation (t - t is 0 only when t is finite)
            em(f"{loop}{{ const {ct} y = {b} - {c}; const {ct} t = {a} + y; "
               f"{c} = t - t == 0 ? (t - {a}) - y : 0; {a} = t; }}")
        em.depth -= 1
        em("}")

    def finish_blocks(self, em: _Emitter, reds: list[Reduce]) -> None:
        """After the pass's loops: each accumulator takes back its last compensation (the
        threads' summed ones where the chunks were split across threads)."""
        for r in reds:
            a = self.acc[id(r)]
            if self.L > 1:
                em(f"for (int l = 0; l < {self.L}; ++l) {a}[l] -= {a}c[l];")
            else:
                em(f"{a} -= {a}c;")
