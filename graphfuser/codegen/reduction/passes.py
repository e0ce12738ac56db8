"""Which reduction kernel pass computes what: the analysis half of the reduction walk.

Phases: a ``Reduce`` accumulates in pass 1 + the latest pass its input needs; full-size stores
go in the pass after their last reduction (the last one being the epilogue); values that do not
vary along the reduced axes are "row" values computed once per row, or once per lane where
the schedule keeps lanes (a kept vector, the CPU's simd lanes: ``reduction_row_values.py``).
Reduction pairs (``reduction_pairs.py``) shift phases: a fused pair
accumulates in one pass; a deferred pair's first reduction is final only after its second.
Persistent schedules keep in registers every full-size value that a later pass needs again
(or, with ``cache_computed`` off, only the loaded ones: later passes recompute the rest);
scratch ones (CPU) keep the computed ones in a per-row array (a buffer per OpenMP thread, rows up
to ``schedule.SCRATCH_ROWS`` long).
"""
from __future__ import annotations

from ...ir.kir import Call, Cast, Const, Expr, LinearIndex, Load, Reduce
from .pairs import Pair, find_pairs


CHEAP_CACHE_ELEMENTS = 16     # per-thread elements below which every reused value is kept
CHEAP_OPS = frozenset({"add", "sub", "mul", "neg", "lt", "le", "gt", "ge", "eq", "ne", "and", "or", "not",
                       "where", "fma", "maximum", "minimum", "round_half", "round_bf16"})


class PassPlan:
    """Mixin of ``_Walk``: needs ``k``, ``nest``, ``d``, ``L``, ``first``, ``bound``, ``red``,
    ``persistent`` and ``want_online`` set before ``_analyze`` runs."""

    def _analyze(self) -> None:
        k = self.k
        self.exprs = k.exprs()
        self.depth: dict[int, int] = {}
        self.full: dict[int, bool] = {}
        self.phase: dict[int, int] = {}         # reductions: the pass they accumulate in
        self.pairs = self._pairs([e for e in self.exprs if isinstance(e, Reduce)])
        self.second_of = {id(p.second): p for p in self.pairs}
        self.first_of = {id(p.first): p for p in self.pairs}
        for e in self.exprs:
            args = getattr(e, "args", ()) or ((e.arg,) if isinstance(e, Cast) else ())
            dep = max([self.depth[id(a)] for a in args], default=0)
            if isinstance(e, Reduce):
                pair = self.second_of.get(id(e))
                phase = self.phase[id(pair.first)] + (0 if pair.fused else 1) if pair else dep + 1
                self.phase[id(e)] = phase
                deferred = id(e) in self.first_of and not self.first_of[id(e)].fused
                self.depth[id(e)] = phase + 1 if deferred else phase   # when its value is final
                self.full[id(e)] = False
            else:
                self.depth[id(e)] = dep
                self.full[id(e)] = (not k.is_row(e.tensor)) if isinstance(e, Load) else \
                    isinstance(e, LinearIndex) or any(self.full[id(a)] for a in args)
        self.reduces = [e for e in self.exprs if isinstance(e, Reduce)]
        self.n_phases = max(self.phase[id(r)] for r in self.reduces)
        self.row_stores = [(p, e) for p, e in k.stores if k.is_row(p)]
        self.pass_stores: dict[int, list] = {}
        for p, e in k.stores:
            if not k.is_row(p):
                self.pass_stores.setdefault(self.depth[id(e)] + 1, []).append((p, e))
        self.n_passes = max([self.n_phases] + list(self.pass_stores))
        self.acc = {id(r): f"acc{j}" for j, r in enumerate(self.reduces)}
        # Persistent schedules keep in registers every full-size value a later pass needs again
        # (the loaded row, softmax's exp(x - max) ...): a later pass stops at the first such
        # value on each path, so only that frontier is kept.
        self.first_seen: dict[int, int] = {}
        self.cached: dict[int, int] = {}
        for p in range(1, self.n_passes + 1):
            for e in self.pass_order(p):
                self.first_seen.setdefault(id(e), p)
        self.cache_name = {id(e): f"c{n}" for n, e in enumerate(self.exprs) if id(e) in self.cached}

    def _pairs(self, reduces: list[Reduce]) -> list[Pair]:
        """Fused pairs when asked (re-reading schedules); deferred ones when the schedule is
        persistent and reduces across threads the dialect can combine pairs across."""
        if self.L != 1:
            return []
        bound = {self.nest.leaves[i].ptype for i in range(self.first, len(self.nest.leaves))
                 if self.bound[i] and self.red[i]}
        fused = self.want_online
        if not fused and not (self.persistent and bound):
            return []
        return [p for p in find_pairs(reduces, fused)
                if all((p.kind, t) in self.d.thread_reduce_pair for t in bound)]

    def pass_roots(self, p: int) -> list[Expr]:
        return [self.second_of[id(r)].x if id(r) in self.second_of else r.args[0]
                for r in self.reduces if self.phase[id(r)] == p] + [e for _, e in self.pass_stores.get(p, [])]

    def stop(self, e: Expr) -> bool:
        return isinstance(e, (Reduce, Const)) or not self.full[id(e)]

    def hit(self, e: Expr, p: int) -> bool:
        """True when pass ``p`` reads ``e`` from the register cache (persistent schedules)."""
        keep = (self.persistent and (isinstance(e, Load) or (self.o.cache_computed and self._worth_caching(e)))) or \
            (self.scratch and not isinstance(e, Load))
        if not (keep and self.full[id(e)]) or isinstance(e, Const) or self.first_seen.get(id(e), p) >= p:
            return False
        self.cached.setdefault(id(e), self.first_seen[id(e)])
        return True

    def _worth_caching(self, e: Expr) -> bool:
        """A computed value is kept in registers when the per-thread cache is small, or when
        recomputing it costs more than arithmetic (``exp(x - max)``): wide rows that would hold
        ``x`` and ``x - mean`` both (layer norm) keep ``x`` alone and subtract again, so the
        block keeps its occupancy."""
        if self.cache_elements() <= CHEAP_CACHE_ELEMENTS:
            return True
        seen: set[int] = set()

        def costly(x: Expr) -> bool:
            if id(x) in seen or isinstance(x, (Load, Reduce, Const)) or not self.full[id(x)]:
                return False          # loads are cached themselves; row values are computed once
            seen.add(id(x))
            if isinstance(x, Call) and x.op not in CHEAP_OPS:
                return True
            return any(costly(a) for a in getattr(x, "args", ()) or ((x.arg,) if isinstance(x, Cast) else ()))

        return costly(e)

    def cache_elements(self) -> int:
        n = 1
        for k in self.cache_leaves:
            n *= self.nest.leaves[k].extent.const or 1
        return n

    def pass_order(self, p: int) -> list[Expr]:
        return self.order_from(self.pass_roots(p), p)

    def order_from(self, roots: list[Expr], p: int = 0) -> list[Expr]:
        seen: set[int] = set()
        out: list[Expr] = []

        def visit(e: Expr) -> None:
            if id(e) in seen:
                return
            seen.add(id(e))
            if p and self.hit(e, p):
                return
            if self.stop(e) and e not in roots:
                return
            if not isinstance(e, Reduce):
                for a in getattr(e, "args", ()) or ((e.arg,) if isinstance(e, Cast) else ()):
                    visit(a)
            out.append(e)

        for r in roots:
            visit(r)
        return [e for e in out if not isinstance(e, (Reduce, Const))]

