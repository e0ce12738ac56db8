"""Row values: the fifth mixin of the reduction walk (``cstyle_reduction._Walk``).

A row value is computed once per row (or per column tile of an outer kernel) from the
reductions a pass finishes: a mean, an rstd, the weight / bias / shift loads, a sum divided by
N. Schedules without lanes name each once; schedules with L lanes (a kept vector: V adjacent
columns per thread; the CPU's simd lanes over a column tile) hold one per lane, computed in
the lane loops after the pass that finishes it, into per-lane arrays ``h<n>[L]`` where a later
pass reads it; values only the row stores need wait for them. (Recomputed per element, a
batch norm backward's mean, variance and rstd cost divisions and an rsqrt per element and
pass: a CPU training step of batch norm + ReLU over [8, 64, 28, 28] channels-last took 1.33 ms
so, 0.97 ms with per-lane values.)

Needs the walk's ``exprs``, ``full``, ``depth``, ``L``, ``pass_rows``, ``hnames``,
``base_names``, ``lane``, ``text``, ``row_load`` and ``open_row_lanes``.
"""
from __future__ import annotations

import torch

from ..cstyle import _Emitter
from ..dialects import COMPUTE_TYPES
from ...ir.kir import Cast, Const, Expr, Reduce


class RowValues:
    def emit_row(self, em: _Emitter, p: int) -> None:
        """The row values that pass ``p`` finishes, once per row. With lanes, those its passes
        read are computed in the lane loops (the ones only row stores need wait for them); what
        is read outside the loops (by a pass, or a row value of another pass) goes to per-lane
        arrays ``h<n>[L]``, the rest stays local to the loops."""
        lanes = self.L > 1
        todo = [e for e in self.exprs
                if not (self.full[id(e)] or isinstance(e, (Const, Reduce)) or self.depth[id(e)] != p)]
        if lanes:
            todo = [e for e in todo if id(e) in self.pass_rows]
        if not todo:
            return
        lane = self.lane()
        names = self.base_names(lane)
        kept = self._rows_read_outside(todo) if lanes else set()
        slots: dict[int, str] = {}
        for e in todo:
            if id(e) in kept:
                # (bool lanes as int: GCC vectorizes no simd loop that loads a bool array; read
                # back as bool, so that a template of one type (gf_fmin(T, T)) takes them beside
                # a bool: fuzz graph 1554 of seed 33671, fmin of a bool and a row's isfinite)
                ct = "int" if e.dtype is torch.bool else COMPUTE_TYPES[e.dtype]
                em(f"{ct} h{len(self.hnames)}[{self.L}];")
                slots[id(e)] = f"h{len(self.hnames)}{lane}"
                self.hnames[id(e)] = f"((bool){slots[id(e)]})" if e.dtype is torch.bool else slots[id(e)]
        outer = em.depth
        if lanes:
            self.open_row_lanes(em)
        for n, e in enumerate(todo):
            text = self.text(e, names, self.row_load)
            if id(e) in kept:
                em(f"{slots[id(e)]} = {text};")
                names[id(e)] = self.hnames[id(e)]
                continue
            name = f"r{p}_{n}" if lanes else f"h{len(self.hnames)}"
            em(f"const {COMPUTE_TYPES[e.dtype]} {name} = {text};")
            names[id(e)] = name
            if not lanes:
                self.hnames[id(e)] = name
        while em.depth > outer:
            em.depth -= 1
            em("}")

    def _args(self, e: Expr) -> tuple:
        return getattr(e, "args", ()) or ((e.arg,) if isinstance(e, Cast) else ())

    def _is_row_value(self, e: Expr) -> bool:
        return not (self.full[id(e)] or isinstance(e, (Const, Reduce)))

    def _pass_readers(self) -> set[int]:
        """What a pass computes from row values: full-size values, reductions, and row values
        a pass stores to a full-size output (``ones * flag`` of a scalar argument broadcast to
        the output: CPU fuzz graph 774 of seed 34401 read its ``flag`` from no lane array)."""
        out = {id(e) for e in self.exprs if isinstance(e, Reduce) or self.full[id(e)]}
        return out | {id(e) for stores in self.pass_stores.values() for _, e in stores}

    def _pass_rows(self) -> set[int]:
        """The row values a pass reads (as an argument of a full-size value, a reduction or a
        store), directly or through other row values."""
        readers = self._pass_readers()
        stack = [a for e in self.exprs if id(e) in readers
                 for a in self._args(e) if self._is_row_value(a)]
        seen: set[int] = set()
        while stack:
            e = stack.pop()
            if id(e) not in seen:
                seen.add(id(e))
                stack.extend(a for a in self._args(e) if self._is_row_value(a))
        return seen

    def _rows_read_outside(self, todo: list[Expr]) -> set[int]:
        """Which of the row values ``todo`` (one pass's) are read outside their lane loop: by a
        full-size value, a reduction, or a pass-read row value of another pass."""
        mine = {id(e) for e in todo}
        readers = self._pass_readers()
        read: set[int] = set()
        for e in self.exprs:
            if id(e) in mine or not (id(e) in readers or id(e) in self.pass_rows):
                continue
            read.update(id(a) for a in self._args(e) if id(a) in mine)
        return read

    def _row_order(self, roots: list[Expr], names: dict[int, str]) -> list[Expr]:
        """Row values ``roots`` need that ``names`` does not hold yet, arguments first."""
        out: list[Expr] = []
        seen: set[int] = set()

        def visit(e: Expr) -> None:
            if id(e) in seen or id(e) in names or isinstance(e, (Const, Reduce)):
                return
            seen.add(id(e))
            for a in self._args(e):
                visit(a)
            out.append(e)
        for r in roots:
            visit(r)
        return out
