"""Register vectors along a reduced row: the eighth mixin of the reduction walk (``render._Walk``).

A vector variant's thread reads V adjacent elements of a row at once (up to 16 bytes per
access), computes them lane by lane (the unrolled lane loop ``v``) and writes V at once.

Rows need not be a multiple of V long where a pass loops over a row's vectors at run time
(``ragged``: the multi-pass and split schedules): the launcher takes such a variant wherever
the pointers and row strides are aligned, and a row's last vector may hold m < V elements
(GPT-2's cross-entropy reads 50257 bf16 logits a row, rows 50304 apart: on scalar 2-byte loads
its fused forward took 554 us on an H200). The pass loop runs whole vectors only, as for rows a
multiple of V long (its bounds check is ``first + V <= n`` instead of ``first < n``), and the
loop's last iteration, which holds the partial vector, runs once more after the loop
(``emit_tail``): for the thread (and block) that owns it, lane by lane, each lane guarded by
``v < gf_lanes`` (the lanes in the row), loading, computing, accumulating and storing its own
element; lanes past the end load, store and reduce nothing. The loop is unrolled by 4, so one
tail after it costs one copy of the pass body, where masked accesses in the loop would cost
four; the NVRTC time of these variants still grew by about a quarter (layer norm, softmax;
measured on this project's CPU machine).

Persistent schedules (a constant number of vectors per thread, kept in registers and prefetched
a row ahead, the partial one in any of them) take rows a multiple of V long only: masking each
of their unrolled vectors grew their NVRTC time by 1.13x (one vector a thread) to 1.75x (four)
whatever the row length (layer norm, softmax), and they are the variants most groups run.

A tensor strided along the row (T5's position bias, a permuted [B, Q, K, H] embedding read as
[B, H, Q, K], beside dense attention scores) does not hold the others to scalar accesses: its V
elements of a vector are gathered (an output's scattered) lane by lane with its row stride, and
it is never staged by the prefetch, while the dense tensors keep their vector loads and stores
(``vector_width(gather=True)``, where a dense input is wider than every strided tensor; the
launcher checks only the dense tensors' alignment). The scalar variant's loads of the strided
tensor touch the same sectors; a transposed tile (``schedule.transposed_tile``) keeps the
scalar variants, and ``PYTORCH_NVFUSER_DISABLE=vector_gather`` keeps them everywhere.

Softmax's fused max / sum pair (``pairs.py``) advances once per whole vector
(``gf_online_vec``): the lanes' max, one rescale of the sum, one exp per lane, where the
element-wise update took two exps per element; the tail's lanes update it element-wise.

Needs the walk's ``k``, ``nest``, ``d``, ``T``, ``vec``, ``kvec``, ``V``, ``vroot``, ``root_idx``,
``persistent``, ``loops``, ``preds``, ``full``, ``prefetch``, ``stages``, ``offsets``,
``first_of``, ``acc``, ``ix``, ``leaf_extent`` and ``emit_body``.
"""
from __future__ import annotations

from ..cstyle import _Emitter
from ..dialects import COMPUTE_TYPES, STORAGE_TYPES
from ...ir.kir import LinearIndex, Load, Reduce
from .pairs import Pair


class RowVectors:
    def _ragged(self) -> bool:
        """Whether this variant's vectors take rows of any length: lanes along the reduced row
        (not a kept vector) split from the row's one root (lanes of a merged [R1, R2] would
        straddle two R1 rows where R2 is no multiple of V), one reduced loop of run-time extent
        whose last iteration the dialect can name, and no linear index (random draws share one
        Philox block among four lanes whose first linear index is a multiple of 4, which the
        launcher's n % V == 0 guarantees)."""
        if not self.vec or self.kvec or self.persistent or len(self.loops) != 1:
            return False
        if self.nest.leaves[self.loops[0]].ptype not in self.d.last_iteration:
            return False
        o = self.nest.leaves[-1].origin
        root = self.nest.roots[self.vroot]
        if not (o[0] == "inner" and o[1] is root and o[3]):
            return False
        checks = [j for j, (a, b) in enumerate(self.preds) if a == self.root_idx[self.vroot] and b == root.extent]
        self.vector_check = checks[0] if checks else None      # ``first < n`` of a vector's first element
        return bool(checks) and not any(isinstance(e, LinearIndex) for e in self.k.exprs())

    def pred_texts(self) -> list[str]:
        """The pass loop's bounds checks; ragged: the vector's last element inside the row
        (whole vectors only), or (the tail) its first inside and its last outside."""
        out = [f"{self.ix(a)} < {self.ix(b)}" for a, b in self.preds]
        if self.ragged:
            j = self.vector_check
            first, n = (self.ix(x) for x in self.preds[j])
            out[j] = f"{out[j]} && {n} - {first} < {self.V}" if self.lanewise else f"{first} + {self.V} <= {n}"
        return out

    def emit_tail(self, em: _Emitter, p: int, reds: list[Reduce], lane: str) -> None:
        """Pass ``p`` over the row's partial last vector: the loop's last iteration, run by the
        thread and block that own it, lane by lane."""
        start = em.depth
        i = self.loops[0]
        decl, cond = self.d.last_iteration[self.nest.leaves[i].ptype]
        fmt = dict(T=self.T, i=f"i{i}", ext=self.leaf_extent(i))
        em("{")
        em.depth += 1
        self.lanewise = True
        em(f"const {decl.format(**fmt)};")
        em("if (" + " && ".join(([cond.format(**fmt)] if cond else []) + self.pred_texts()) + ") {")
        em.depth += 1
        r = self.vroot
        em(f"const {self.T} gf_lanes = n{r} - {self.ix(self.root_idx[r])};")
        self.emit_body(em, p, reds, lane)
        self.lanewise = False
        while em.depth > start:
            em.depth -= 1
            em("}")

    def vector_pairs(self, reds: list[Reduce]) -> list[Pair]:
        """The fused softmax pairs among ``reds`` that advance once per (whole) vector."""
        if not self.vec or self.lanewise:
            return []
        pairs = [self.first_of.get(id(r)) for r in reds]
        return [pr for pr in pairs if pr is not None and pr.fused and pr.kind == "softmax"]

    def open_vector(self, em: _Emitter, p: int, order: list, stores: list, pairs: list[Pair]) -> None:
        """Pass ``p``'s vector loads (from memory, or the stage the prefetch filled), the
        buffers of its vector stores and per-vector pairs, and the lane loop; lane by lane
        (the tail), the loop and each lane's guard."""
        V = self.V
        for e in order:
            if not isinstance(e, Load) or not self.full[id(e)] or (p == 1 and e.tensor in self.prefetch
                                                                     and not self.stages):
                continue
            t = self.k.tensors[e.tensor]
            st, off = STORAGE_TYPES[t.dtype], self.ix(self.offsets[e.tensor])
            if p == 1 and e.tensor in self.prefetch:
                em(f"{st} b_{t.name}[{V}];")
                em(f"gf_load<{V}>(b_{t.name}, reinterpret_cast<const {st}*>({self.stage_addr(e.tensor, 'gf_cur')}));")
            elif t.dim_kinds[self.vroot] == "bcast":
                g = self.guard
                em(f"const {st} s_{t.name} = " + (f"gf_ld_if({t.name} + ({off}), {g});" if g else f"{t.name}[{off}];"))
            elif not self.lanewise:
                em(f"{st} b_{t.name}[{V}];")
                g = self.guard
                if t.dim_kinds[self.vroot] == "strided":
                    lane = self.lane_offset(e.tensor)
                    em("#pragma unroll")
                    em(f"for (int v = 0; v < {V}; ++v) b_{t.name}[v] = "
                       + (f"gf_ld_if({t.name} + ({lane}), {g});" if g else f"{t.name}[{lane}];"))
                elif g:
                    em(f"gf_load_if<{V}>(b_{t.name}, {t.name} + {off}, {g});")
                else:
                    em(f"gf_load<{V}>(b_{t.name}, {t.name} + {off});")
        for q, _ in stores:
            t = self.k.tensors[q]
            if not t.partials and not (self.lanewise and t.dim_kinds[self.vroot] != "bcast"):
                em(f"{STORAGE_TYPES[t.dtype]} b_{t.name}[{V}];")
        for pair in pairs:
            em(f"{COMPUTE_TYPES[pair.first.dtype]} gf_x{pair.tag}[{V}];")
        em("#pragma unroll")
        em(f"for (int v = 0; v < {V}; ++v) {{")
        em.depth += 1
        if self.lanewise:
            em("if (v < gf_lanes) {")
            em.depth += 1

    def store_text(self, q: int, val: str) -> str:
        """Lane ``v``'s element of a full-size output: into the vector, or (lane by lane) to memory."""
        t = self.k.tensors[q]
        if self.lanewise and t.dim_kinds[self.vroot] != "bcast":
            return f"{t.name}[{self.lane_offset(q)}] = {val};"
        return f"b_{t.name}[v] = {val};"

    def close_vector(self, em: _Emitter, stores: list, pairs: list[Pair]) -> None:
        """Close the lane loop; advance the per-vector pairs; store the vectors."""
        for _ in range(2 if self.lanewise else 1):
            em.depth -= 1
            em("}")
        for pair in pairs:
            a, b = self.acc[id(pair.first)], self.acc[id(pair.second)]
            em(f"gf_online_vec<{self.V}>({a}, {b}, nan{a[3:]}, gf_x{pair.tag});")
        g = self.guard                        # (a masked body, see maskable): rows inside only
        for q, _ in stores:
            t = self.k.tensors[q]
            if t.partials:
                continue
            off = self.ix(self.offsets[q])
            if g and not self.lanewise and t.dim_kinds[self.vroot] not in ("bcast", "strided"):
                em(f"gf_store_if<{self.V}>({t.name} + {off}, b_{t.name}, {g});")
                continue
            if g:
                em(f"if ({g}) {{")
                em.depth += 1
            # broadcast along the vectorized dim: the lanes hold one element (see cstyle._body)
            if t.dim_kinds and t.dim_kinds[self.vroot] == "bcast":
                em(f"{t.name}[{off}] = b_{t.name}[0];")
            elif not self.lanewise and t.dim_kinds[self.vroot] == "strided":
                em("#pragma unroll")     # strided along the row: scattered lane by lane
                em(f"for (int v = 0; v < {self.V}; ++v) {t.name}[{self.lane_offset(q)}] = b_{t.name}[v];")
            elif not self.lanewise:
                em(f"gf_store<{self.V}>({t.name} + {off}, b_{t.name});")
            if g:
                em.depth -= 1
                em("}")
