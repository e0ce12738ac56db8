"""Thread combines: the seventh mixin of the reduction walk (``render._Walk``).

Accumulators combine across the threads of a bound axis when a pass ends: one at a time
(``thread_reduce``, two of one op at once where the dialect has ``thread_reduce2``), or, where
the dialect has ``thread_reduce_k`` for the axis (CUDA's threadIdx.y of outer kernels), every
accumulator and kept-vector lane of one op and type together, through shared memory in rounds
(``gf_block_reduce_y_k``). The same batched form combines the partials of a reduction split
across blocks (``rows.py``'s ``emit_grid_combine``), read in one loop, a kept vector's lanes of
each value in one load.

Needs the walk's ``d``, ``nest``, ``bound``, ``acc``, ``V``, ``kvec``, ``k_arrays``,
``open_lanes`` and ``_close``.
"""
from __future__ import annotations

from typing import Optional

from ..cstyle import _Emitter
from ..dialects import COMPUTE_TYPES
from ..schedule import ParallelType
from ...ir.kir import Reduce


class ThreadCombines:
    def emit_thread_combines(self, em: _Emitter, ptype, reds: list[Reduce]) -> None:
        """Combine ``reds`` across the threads of a bound axis; two reductions of one op and
        dtype share one combine where the dialect has it (``thread_reduce2``: one round of
        shared-memory barriers for both, e.g. the shifted sums of the moments). Lanes of a kept
        vector combine one after the other."""
        if not reds or self.emit_batched_combines(em, ptype, reds):
            return
        two = self.d.thread_reduce2.get(ptype)
        left = list(reds)
        outer = em.depth
        lane = self.open_lanes(em)
        while left:
            r = left.pop(0)
            mate = next((q for q in left if two and q.op == r.op and q.dtype == r.dtype), None)
            if mate is not None:
                left.remove(mate)
                em(two.format(a=self.acc[id(r)] + lane, b=self.acc[id(mate)] + lane, op=r.op))
            else:
                em(self.d.thread_reduce[ptype].format(acc=self.acc[id(r)] + lane, op=r.op))
        self._close(em, outer)

    def _k_rounds(self, ptype, k: int, r: Reduce) -> Optional[tuple[int, int, int, int]]:
        """(values per round, block x, block y, scratch entries) of a batched combine of ``k``
        values of ``r``'s type across ``ptype``, or None (no such combine, or too little scratch)."""
        if ptype not in self.d.thread_reduce_k:
            return None
        ext = {self.nest.leaves[i].ptype: self.nest.leaves[i].extent.const for i in range(len(self.nest.leaves))
               if self.bound[i]}
        bx, by = ext.get(ParallelType.TIDx) or 1, ext.get(ParallelType.TIDy) or 1
        cap = self.d.shared_k_doubles * 8 // (8 if r.dtype.itemsize == 8 else 4)
        rounds = min(k, (cap - k * bx) // (bx * by))
        return (rounds, bx, by, cap) if rounds >= 1 else None

    def emit_batched_combines(self, em: _Emitter, ptype, reds: list[Reduce],
                              gather: Optional[tuple[dict, dict, str]] = None) -> bool:
        """Combine every accumulator (and kept-vector lane) of ``reds`` across ``ptype`` with one
        batched combine per op and type (``thread_reduce_k``): their values go through shared
        memory together. ``gather`` (grid templates, slots, valid): start from the partials of
        the blocks of a split reduction instead, read in one loop. False where the dialect has
        no batched combine for ``ptype`` or a group is too large for its scratch."""
        lanes = self.V if self.kvec else 1
        groups: dict[tuple[str, str], list[Reduce]] = {}
        for r in reds:
            groups.setdefault((r.op, COMPUTE_TYPES[r.dtype]), []).append(r)
        shapes = {key: self._k_rounds(ptype, len(rs) * lanes, rs[0]) for key, rs in groups.items()}
        if len(reds) * lanes < 2 or None in shapes.values():
            return False
        outer = em.depth
        for (op, ct), rs in groups.items():
            rounds, bx, by, cap = shapes[(op, ct)]
            k = len(rs) * lanes
            arr = f"gf_k{self.k_arrays}"
            self.k_arrays += 1
            em(f"{ct} {arr}[{k}];")
            at = (lambda j: f"{arr}[{j} * {lanes} + v]") if self.kvec else (lambda j: f"{arr}[{j}]")
            if gather is None:
                lane = self.open_lanes(em)
                for j, r in enumerate(rs):
                    em(f"{at(j)} = {self.acc[id(r)]}{lane};")
                self._close(em, outer)
            else:
                templates, where, valid = gather
                em("#pragma unroll")
                em(f"for (int gf_j = 0; gf_j < {k}; ++gf_j) {arr}[gf_j] = gf_op_{op}::template id<{ct}>();")
                em(templates["loop"].format(valid=valid) + " {")
                em.depth += 1
                loaded = {}
                if self.kvec and lanes > 1 and "load_lanes" in templates:
                    # every lane's partial of a value in one load (the row at lane 0: the lane
                    # loop's ``v`` held at 0 in a scope of its own)
                    for j, r in enumerate(rs):
                        loaded[j] = f"{arr}p{j}"
                        em(f"{ct} {loaded[j]}[{lanes}];")
                        em("{ const int v = 0; " + templates["load_lanes"].format(
                            ct=ct, dst=loaded[j], lanes=lanes, **where[id(r)]) + " }")
                self.open_lanes(em)
                for j, r in enumerate(rs):
                    load = f"{loaded[j]}[v]" if j in loaded else templates["load"].format(ct=ct, **where[id(r)])
                    em(f"{at(j)} = gf_op_{op}::f({at(j)}, {load});")
                self._close(em, outer)
            em(self.d.thread_reduce_k[ptype].format(op=op, ct=ct, k=k, r=rounds, bx=bx, by=by, cap=cap, arr=arr))
            lane = self.open_lanes(em)
            for j, r in enumerate(rs):
                em(f"{self.acc[id(r)]}{lane} = {at(j)};")
            self._close(em, outer)
        return True
