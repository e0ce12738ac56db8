"""Where a reduction kernel reads and writes: the index half of the reduction walk
(``cstyle_reduction._Walk``; ``reduction_passes.PassPlan`` and ``reduction_rows.RowPipeline``
are its other mixins).

- bounds checks: the split checks the schedule needs (the innermost one folded into its loop's
  extent when predicate elimination is on), thread-bound leaves whose extent the launch rounds
  up, and the kept-only ones that guard row values;
- offsets: every tensor's offset as a sum over the roots, its kept part (the offset of the
  reduced segment's first element, which the moments' shift reads) and the index values hoisted
  to the loop depth where they stop changing (``index_hoist``);
- load text: full-size loads (from memory, a register vector or the prefetch array), row loads
  (guarded by the kept predicates) and first-element loads (also guarded by a non-empty segment).

Needs the walk's ``k``, ``nest``, ``o``, ``T``, ``vec``, ``first``, ``loops``, ``bound``,
``red``, ``idx``, ``root_idx``, ``prefix_vars``, ``lane_vars``, ``lane_leaves``, ``L`` before
``_checks`` runs.
"""
from __future__ import annotations

import math
from typing import Optional

from ..cstyle import _depth_of, _Emitter, _render_iexpr, _size, lanes_aligned, linear_lane_text
from ..dialects import STORAGE_TYPES
from ...ir.kir import FirstLoad, LastLoad, Load
from ..schedule import IExpr, iconst, iop, ivar


class IndexPlan:
    def _checks(self) -> None:
        nest, leaves = self.nest, self.nest.leaves
        checks = nest.split_checks()
        self.fold: Optional[tuple] = None
        if self.o.predicate_elimination:
            ids = {d.id for d in checks}
            checks = [d for d in checks if not (d.origin[0] == "outer" and d.origin[1].id in ids)]
            inner = leaves[self.loops[-1]] if self.loops else None
            if (not self.vec and inner is not None and self.loops[-1] == len(leaves) - 1
                    and inner.origin[0] == "inner" and inner.origin[3] and any(d is inner.origin[1] for d in checks)):
                base = nest.domain_indices({**{d.id: ivar(f"i{k}") for k, d in enumerate(leaves)},
                                            inner.id: iconst(0)})[inner.origin[1].id]
                self.fold = (inner, inner.origin[1], base)
                checks = [d for d in checks if d is not inner.origin[1]]
        preds = [(self.idx[d.id], d.extent) for d in checks]
        for k, d in enumerate(leaves):
            if self.bound[k] and d.extent.const is None:   # the launch rounds blockDim up
                preds.append((ivar(f"i{k}"), d.extent))
        if not self.o.predicate_elimination:
            preds += [(self.root_idx[r], ivar(f"n{r}")) for r in range(len(nest.roots))]
        kept_vars = self.prefix_vars | self.lane_vars
        self.kept_preds = [p for p in preds if p[0].vars() <= kept_vars]
        # even rows (the launcher's promise: a row is P vectors for each of blockDim.x threads):
        # no check along the row. The checks of a row's chunks kept a whole row of vectors from
        # reaching memory at once (each load sat in its own branch, after the one before it had
        # been used): a bf16 softmax over [16384, 4096] ran at 49% of copy bandwidth with them
        # and 90% without on an H200
        if self.o.even_rows:
            red_vars = {f"i{k}" for k in range(len(leaves)) if self.red[k]}
            preds = [p for p in preds if not p[0].vars() & red_vars]
            self.kept_preds = [p for p in self.kept_preds if p in preds]
        self.preds = preds

    def _offset_parts(self, root_idx: list[IExpr]) -> list[tuple[IExpr, IExpr]]:
        """Per tensor: (kept part, reduced part) of its offset at the given root indices."""
        red_roots = set(self.k.red_roots)
        out = []
        for p, t in enumerate(self.k.tensors):
            parts = [iconst(0), iconst(0)]
            for r, kind in enumerate(t.dim_kinds):
                term = None
                if kind == "unit":
                    term = root_idx[r]
                elif kind == "strided":
                    term = iop("*", root_idx[r], ivar(f"st{p}_{r}"))
                if term is not None:
                    j = int(r in red_roots)
                    parts[j] = iop("+", parts[j], term)
            if t.partials:          # this row worker's slot of the column-sum partials
                slot = ivar("gf_slot")
                for r in self.k.red_roots:
                    slot = iop("*", slot, ivar(f"n{r}"))
                parts[0] = iop("+", parts[0], slot)
            out.append((parts[0], parts[1]))
        return out

    def _offsets(self) -> None:
        parts = self._offset_parts(self.root_idx)
        kparts = [k for k, _ in parts]
        self.offsets: list[IExpr] = [iop("+", k, r) for k, r in parts]
        # kept vector: the lane's own element for scalar accesses (row loads, row stores, the
        # segment's first / last element); never hoisted (``v`` is the innermost lane loop)
        parts_v = self._offset_parts(self.root_idx_v) if self.kvec else parts
        self.offsets_v = [iop("+", k, r) for k, r in parts_v]
        self.first_offsets = [k for k, _ in parts_v]   # every reduced index 0: the segment's first element
        self.last_offsets = []               # every reduced index n - 1: its last element
        for p, t in enumerate(self.k.tensors):
            off = self.first_offsets[p]
            for r in self.k.red_roots:
                end = iop("-", ivar(f"n{r}"), iconst(1))
                if t.dim_kinds[r] == "unit":
                    off = iop("+", off, end)
                elif t.dim_kinds[r] == "strided":
                    off = iop("+", off, iop("*", end, ivar(f"st{p}_{r}")))
            self.last_offsets.append(off)
        depth = {f"i{k}": k + 1 for k in range(self.first)}
        if self.columns:
            depth["gf_slot"] = 1       # the slot loop encloses the row loop (``open_slots``)
        depth.update({f"i{k}": 0 for k in range(len(self.nest.leaves)) if self.bound[k] and self.red[k]})
        self.names: dict[IExpr, str] = {}
        self.decls: dict[int, list[tuple[str, IExpr]]] = {}
        if not self.o.index_hoist:
            return
        extents = [d.extent for d in self.nest.leaves] + [b for _, b in self.preds]
        wanted = sorted(self.root_idx + kparts + self.offsets + [a for a, _ in self.preds] + extents, key=_size)
        loop_vars = {f"i{k}" for k in range(len(self.nest.leaves))} | {"gf_slot"}
        for e in wanted:
            if e.op in ("var", "const") or e in self.names or not (e.vars() & loop_vars) <= set(depth):
                continue
            name = f"x{len(self.names)}"
            self.decls.setdefault(_depth_of(e, depth), []).append((name, e))
            self.names[e] = name

    def ix(self, e: IExpr) -> str:
        return _render_iexpr(e, self.names)

    def emit_decls(self, em: _Emitter, depth: int, skip: frozenset = frozenset()) -> None:
        """Declare the index values hoisted to ``depth``, but those reading a variable of ``skip``."""
        for name, e in self.decls.get(depth, []):
            if e.vars() & skip:
                continue
            em(f"const {self.T} {name} = {_render_iexpr(e, {x: v for x, v in self.names.items() if x != e})};")

    def lane(self) -> str:
        return self._linear(self.lane_leaves, bracket=True) if self.L > 1 else ""

    def _linear(self, ks: list[int], bracket: bool = False) -> str:
        terms, stride = [], 1
        for k in reversed(ks):
            var = "v" if self.vec and k == len(self.nest.leaves) - 1 else f"i{k}"
            terms.append(var if stride == 1 else f"{var} * {stride}")
            stride *= self.nest.leaves[k].extent.const or 1   # (scratch: one runtime loop)
        text = " + ".join(reversed(terms)) or "0"
        return f"[{text}]" if bracket else text

    def linear_index(self) -> str:
        """Row-major linear index of the current element in the random rows' output (the vector
        lane ``v`` included), as the pointwise walk computes it (``cstyle._linear_index``)."""
        nest, leaves = self.nest, self.nest.leaves
        idx = self.idx
        vr = self.vroot
        if self.vec and lanes_aligned(leaves[-1], self.V) and leaves[-1].origin[1] is nest.roots[vr] \
                and self.k.linear is not None and not self.k.linear[vr]:
            # lanes split the vector root itself, innermost in the row-major order: lane v is
            # lane 0's index plus v, lane 0's a multiple of V (the launcher's checks)
            return linear_lane_text("long long", self.ix(self._linear_expr(self.idx)), "1", True)
        if self.vec:
            idx = nest.domain_indices({**{d.id: ivar(f"i{k}") for k, d in enumerate(leaves)}, leaves[-1].id: ivar("v")})
        return self.ix(self._linear_expr(idx))

    def edge_linear_index(self, last: bool) -> str:
        """``linear_index`` at the segment's first (``last``: last) point: every reduced root's
        index 0 (its extent - 1), the kept roots' as the row's (lane included)."""
        red = set(self.k.red_roots)
        lin = iconst(0)
        for r, others in enumerate(self.k.linear or ()):
            st = iconst(1)
            for q in others:
                st = iop("*", st, ivar(f"n{q}"))
            i = (iop("-", ivar(f"n{r}"), iconst(1)) if last else iconst(0)) if r in red else self.root_idx_v[r]
            lin = iop("+", lin, iop("*", i, st))
        return self.ix(lin)

    def _linear_expr(self, idx: dict) -> IExpr:
        nest = self.nest
        lin = iconst(0)
        for r, others in enumerate(self.k.linear or ()):
            st = iconst(1)
            for q in others:
                st = iop("*", st, ivar(f"n{q}"))
            lin = iop("+", lin, iop("*", idx[nest.roots[r].id], st))
        return lin

    def cache_size(self) -> str:
        if self.scratch:
            return self.ix(self.nest.leaves[self.loops[0]].extent)
        return str(math.prod(self.nest.leaves[k].extent.const for k in self.cache_leaves))

    def raw_load(self, p: int, e: Load) -> str:
        t = self.k.tensors[e.tensor]
        if p == 1 and e.tensor in self.prefetch and not self.stages:
            return f"{self.prefetch[e.tensor]}[{self._linear(self.cache_leaves)}]"
        if self.vec and self.full[id(e)]:
            if t.dim_kinds[self.vroot] == "bcast":
                return f"s_{t.name}"
            # (a row's partial last vector: each lane reads its own element, vectors.py)
            return f"{t.name}[{self.lane_offset(e.tensor)}]" if self.lanewise else f"b_{t.name}[v]"
        return f"{t.name}[{self.ix(self.offsets[e.tensor])}]"

    def lane_offset(self, p: int) -> str:
        """Offset of lane ``v``'s element of tensor ``p`` in a vector along the row: the
        vector's first element plus ``v``, or ``v`` times the tensor's row stride where the
        tensor is strided along the row (gathered lane by lane, ``vectors.py``)."""
        step = "v" if self.k.tensors[p].dim_kinds[self.vroot] != "strided" else f"v * st{p}_{self.vroot}"
        return f"{self.ix(self.offsets[p])} + {step}"

    def first_load(self, e: "FirstLoad | LastLoad") -> str:
        """The segment's first (``LastLoad``: last) element, read only where the segment is not
        empty and the row exists (0 otherwise)."""
        t = self.k.tensors[e.tensor]
        offsets = self.last_offsets if isinstance(e, LastLoad) else self.first_offsets
        raw = f"{t.name}[{self.ix(offsets[e.tensor])}]"
        conds = [" && ".join(f"n{r} > 0" for r in self.k.red_roots)]
        conds += [f"{self.ix(a)} < {self.ix(b)}" for a, b in self.kept_preds]
        return f"(({' && '.join(conds)}) ? {raw} : ({STORAGE_TYPES[t.dtype]})0)"

    def row_load(self, e: Load) -> str:
        t = self.k.tensors[e.tensor]
        raw = f"{t.name}[{self.ix(self.offsets_v[e.tensor])}]"
        if self.kept_preds:
            cond = " && ".join(f"{self.ix(a)} < {self.ix(b)}" for a, b in self.kept_preds)
            return f"(({cond}) ? {raw} : ({STORAGE_TYPES[t.dtype]})0)"
        return raw
