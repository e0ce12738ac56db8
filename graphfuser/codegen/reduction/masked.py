"""The masked row loop: the ninth mixin of the reduction walk (``render._Walk``).

A pass's body guarded by its bounds (``if (row < n) { loads; arithmetic; updates }``) is a
branch per iteration: the compiler cannot issue the loads of the next unrolled iteration before
the branch, so each iteration waits one memory latency for its own (an outer reduction's grid
loop: 32 rows of a tile per iteration). Where the dialect has predicated accesses
(``masked_loads``: ``gf_load_if`` / ``gf_ld_if`` / ``gf_store_if``, one predicated PTX
instruction each), the body runs for every iteration instead: its vector loads read zeros past
the end without touching memory, the arithmetic runs on them, each update takes the op's
identity for a row outside (``gf_ok ? v : identity``), paired updates and partial stores stay
under ``if (gf_ok)``, and the stores are predicated. The loop then runs four iterations a trip
(``dialect.masked_unroll``), the four one block of code with the iteration's own bound in
``gf_ok``, so their loads are in flight together. Only the outer reductions' vector variants
take it (batch norm's statistics and backward over channels-last activations: 4406 -> 4022
kernel us over resnet50's batch norms on an H200); ``PYTORCH_NVFUSER_DISABLE=masked_loads``
keeps the guard.
"""
from __future__ import annotations

from typing import Optional

from ..cstyle import _Emitter
from ...config import config
from ...ir.kir import FirstLoad, LastLoad, Load, Reduce
from ..schedule import ParallelType


class MaskedRows:
    def maskable(self, p: int, reds: list[Reduce]) -> bool:
        """Whether pass ``p``'s body can run for rows outside the bounds, loads predicated and
        updates masked (``dialect.masked_loads``): whole register vectors of an outer
        reduction's row loop, every load of the body a vector one and no per-vector pair. A
        guarded body is a branch per iteration, so the loads of the unrolled iterations wait
        for one another: a batch norm's statistics over channels-last [32, 128, 28, 28] took
        the grid loop's memory latency once per 32 rows."""
        if config.is_disabled("masked_loads"):
            return False
        if not (self.d.masked_loads and self.kvec and self.k.kind == "outer" and not self.lanewise
                and not self.prefetch and not self.stages and not self.vector_pairs(reds)):
            return False
        names = self.base_names(self.lane())
        for e in self.pass_order(p):
            if isinstance(e, (FirstLoad, LastLoad)):
                return False
            if isinstance(e, Load) and not self.full[id(e)] and id(e) not in names:
                return False
        return True

    def masked_unroll_leaf(self) -> Optional[int]:
        """The loop a masked body unrolls (``dialect.masked_unroll``): the one reduced loop
        of run-time extent, where it is the pass's only loop."""
        loops = [i for i in self.loops if self.nest.leaves[i].ptype is not ParallelType.Vectorize]
        if len(loops) != 1 or not self.d.masked_unroll:
            return None
        i = loops[0]
        d = self.nest.leaves[i]
        if not self.red[i] or d.extent.const is not None or self.fold is not None or self.columns:
            return None
        if d.ptype not in self.d.masked_unroll:
            return None
        return i

    def open_masked_unroll(self, em: _Emitter, i: int) -> str:
        """Open leaf ``i``'s loop U iterations a trip, the U unrolled without exits between
        them (the masked body runs past the end harmlessly); return the iteration's bound,
        which joins the body's predicate."""
        d, T, var = self.nest.leaves[i], self.T, f"i{i}"
        forms = self.d.masked_unroll[d.ptype]
        loop, index, bound = forms["reverse" if self.backwards and i in self.grid_red else "forward"]
        fmt = dict(T=T, i=var, ext=self.leaf_extent(i), U=self.d.masked_unroll["U"])
        em(loop.format(**fmt) + " {")
        em.depth += 1
        em("#pragma unroll")
        em(f"for (int gf_u = 0; gf_u < {fmt['U']}; ++gf_u) {{")
        em.depth += 1
        em(f"const {T} {var} = {index.format(**fmt)};")
        return bound.format(**fmt)
