"""Reduction pairs: two reductions of one value that a kernel can finish together.

- softmax: ``max(x)`` and ``sum(exp(x - max(x)))``;
- variance: ``sum(x)`` and ``sum((x - sum(x) / N)^2)``, a two-pass variance written out in the
  graph (the rows' own moments are sums shifted by the segment's first element: one phase, no
  pair to find).

The walk (``cstyle_reduction.py``) uses a pair in one of two ways:

- *fused* (schedules that re-read memory every pass): both accumulate in one pass, online:
  the sum of exponentials is rescaled whenever the running max grows, and the variance is
  Welford's update; the pass over the row that the second reduction needed is gone;
- *deferred* (persistent schedules, whose passes read registers): each thread finishes the pair
  over its own elements (local max / local mean first), and one cross-thread combine merges
  (max, sum) or (count, sum, M2) pairs (Chan's formula), instead of two rounds of block
  reductions with their barriers.

Both are exact rewrites of what the rows compute: the variance stays a sum of squared
deviations from the mean, never ``E[x^2] - E[x]^2``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch

from ...ir.kir import PRIMS, Call, Expr, Reduce, ReductionSize


@dataclass
class Pair:
    kind: str          # "softmax" | "variance"
    first: Reduce      # max(x) | sum(x)
    second: Reduce     # sum(exp(x - max)) | sum((x - mean)^2)
    x: Expr
    fused: bool
    tag: str = ""      # suffix of the pair's helper variables

    def decls(self, ct: str) -> list[str]:
        """Per-thread state declared with the first reduction's accumulator."""
        if self.kind != "variance":
            return []
        return [f"{ct} cnt{self.tag} = 0;"] + ([f"{ct} wm{self.tag} = 0;"] if self.fused else [])

    def lines(self, stage: str, a: str, b: str, v: str, ct: str) -> list[str]:
        """Per-element updates: stage ``both`` (fused), ``first`` or ``second`` (deferred)."""
        t, exp = self.tag, PRIMS["exp"][1]
        one, zero, ninf = _lit(1, ct), _lit(0, ct), _lit(-math.inf, ct)
        if self.kind == "softmax":
            term = f"({v} == {ninf} ? {zero} : {exp.format(f'({v} - {a})')})"
            if stage == "first":
                return [f"{a} = {v} > {a} ? {v} : {a};"]
            if stage == "second":
                return [f"{b} += {term};"]
            return [f"const {ct} o{t} = {a};", f"{a} = {v} > {a} ? {v} : {a};",
                    f"{b} = {b} * (o{t} == {a} ? {one} : {exp.format(f'(o{t} - {a})')}) + {term};"]
        if stage == "first":
            return [f"{a} += {v};", f"cnt{t} += {one};"]
        if stage == "second":
            return [f"{b} += ({v} - lm{t}) * ({v} - lm{t});"]
        return [f"{a} += {v};", f"cnt{t} += {one};", f"const {ct} d{t} = {v} - wm{t};", f"wm{t} += d{t} / cnt{t};",
                f"{b} += d{t} * ({v} - wm{t});"]

    def after_first(self, a: str, ct: str) -> list[str]:
        """Deferred: per-thread values the second pass needs (the local mean)."""
        if self.kind == "variance":
            return [f"const {ct} lm{self.tag} = cnt{self.tag} > {_lit(0, ct)} ? {a} / cnt{self.tag} : {_lit(0, ct)};"]
        return []

    def combine(self, template: str, a: str, b: str) -> str:
        return template.format(a=a, b=b, n=f"cnt{self.tag}")


def _lit(value: float, ct: str) -> str:
    from ..cstyle import c_literal

    return c_literal(value, torch.float32 if ct == "float" else torch.float64)


def _softmax(s: Reduce) -> Optional[tuple[Reduce, Expr]]:
    e = s.args[0]
    if s.op != "sum" or not (isinstance(e, Call) and e.op == "exp"):
        return None
    d = e.args[0]
    if not (isinstance(d, Call) and d.op == "sub" and isinstance(d.args[1], Reduce)):
        return None
    m = d.args[1]
    return (m, d.args[0]) if m.op == "max" and m.args[0] is d.args[0] else None


def _variance(s: Reduce) -> Optional[tuple[Reduce, Expr]]:
    e = s.args[0]
    if s.op != "sum" or not (isinstance(e, Call) and e.op == "mul" and e.args[0] is e.args[1]):
        return None
    d = e.args[0]
    if not (isinstance(d, Call) and d.op == "sub"):
        return None
    x, mean = d.args
    if not (isinstance(mean, Call) and mean.op == "div" and isinstance(mean.args[1], ReductionSize)):
        return None
    total = mean.args[0]
    if isinstance(total, Reduce) and total.op == "sum" and total.args[0] is x:
        return total, x
    return None


# Which pairs the walk rewrites, by use. Measured on an H200 (bf16 rows, ``tools/bench_reductions``):
# a fused online softmax made a 65536-wide softmax 1.2x faster (two reads instead of three);
# Welford's update (a division per element) made a 16384-wide layer norm 1.4x slower than three
# passes; deferred combines (merges with divisions / exps at every shuffle level, in every
# thread) made 4096-wide softmax and layer norm 1.3x slower than two plain block reductions.
FUSED_KINDS: tuple[str, ...] = ("softmax",)
DEFERRED_KINDS: tuple[str, ...] = ()


def find_pairs(reduces: list[Reduce], fused: bool) -> list[Pair]:
    """Every softmax / variance pair among ``reduces`` (fp32 / fp64; each reduction in one pair)
    whose kind is enabled for this use (``FUSED_KINDS`` / ``DEFERRED_KINDS``)."""
    pairs: list[Pair] = []
    used: set[int] = set()
    kinds = FUSED_KINDS if fused else DEFERRED_KINDS
    for s in reduces:
        if not s.dtype.is_floating_point or s.dtype not in (torch.float32, torch.float64):
            continue
        for kind, match in (("softmax", _softmax), ("variance", _variance)):
            if kind not in kinds:
                continue
            found = match(s)
            if found and id(found[0]) not in used and id(s) not in used:
                pairs.append(Pair(kind, found[0], s, found[1], fused, str(len(pairs))))
                used |= {id(found[0]), id(s)}
    return pairs
