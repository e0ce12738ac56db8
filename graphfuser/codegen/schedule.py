"""Scheduling primitives: the iteration domain of a kernel, transformed by merge / split /
reorder / parallelize, and the index math that maps leaf loops back to the root dims.

A ``LoopNest`` starts with one root ``IterDomain`` per (coalesced) output dim, outermost first,
whose extents are the run-time sizes ``n0, n1, ...``. Transforms replace leaf domains:

- ``merge(i)``: leaves i and i+1 become one domain of extent ``e_i * e_{i+1}``
- ``split(i, f)``: leaf i becomes ``[ceilDiv(e_i, f), f]`` (``inner=False``: ``[f, ceilDiv(e_i, f)]``)
- ``reorder({old: new})``: permutes leaves
- ``parallelize(i, ParallelType.X)``: binds leaf i to BIDx/BIDy/TIDx/TIDy, or marks it
  Unroll / Vectorize / Serial

``root_indices`` inverts the transforms (split: ``outer * f + inner``; merge: ``/`` and ``%``),
``predicates`` lists the bounds checks the splits need. Index and extent expressions are small
hash-consed integer expression trees (``IExpr``), rendered by the dialect-neutral C walk.

Example (the seed's pointwise schedule)::

    >>> nest = LoopNest(2)
    >>> nest.merge(0); nest.split(0, 128); nest.split(0, 4)
    >>> nest.parallelize(0, ParallelType.BIDx); nest.parallelize(1, ParallelType.Unroll)
    >>> nest.parallelize(2, ParallelType.TIDx)
    >>> print(nest.loop_nest_str())
    for i0 in BIDx(ceilDiv(ceilDiv((n0 * n1), 128), 4)):
      for i1 in Unroll(4):
        for i2 in TIDx(128):
          T[...] at root indices (((i0 * 4 + i1) * 128 + i2) / n1, ((i0 * 4 + i1) * 128 + i2) % n1)
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional, Union


class ScheduleError(ValueError):
    """An illegal schedule: the message names the transform and why."""


class ParallelType(enum.Enum):
    Serial = "Serial"
    BIDx = "BIDx"
    BIDy = "BIDy"
    TIDx = "TIDx"
    TIDy = "TIDy"
    Unroll = "Unroll"
    Vectorize = "Vectorize"

    def __repr__(self) -> str:
        return f"ParallelType.{self.value}"


# -- integer expressions --------------------------------------------------------------------
@dataclass(frozen=True)
class IExpr:
    op: str                        # "var" | "const" | "+" | "*" | "/" | "%" | "ceildiv" | "min" | "-"
    a: Union["IExpr", str, int, None] = None
    b: Optional["IExpr"] = None

    def __str__(self) -> str:
        if self.op == "var":
            return str(self.a)
        if self.op == "const":
            return str(self.a)
        if self.op == "ceildiv":
            return f"ceilDiv({self.a}, {self.b})"
        if self.op == "min":
            return f"min({self.a}, {self.b})"
        return f"({self.a} {self.op} {self.b})"

    @property
    def const(self) -> Optional[int]:
        return self.a if self.op == "const" else None

    def vars(self) -> set[str]:
        if self.op == "var":
            return {self.a}
        out: set[str] = set()
        for x in (self.a, self.b):
            if isinstance(x, IExpr):
                out |= x.vars()
        return out


def ivar(name: str) -> IExpr:
    return IExpr("var", name)


def iconst(v: int) -> IExpr:
    return IExpr("const", int(v))


def iop(op: str, a: IExpr, b: IExpr) -> IExpr:
    """Build ``a op b`` with constant folding and the trivial identities."""
    ca, cb = a.const, b.const
    if ca is not None and cb is not None:
        if op == "+":
            return iconst(ca + cb)
        if op == "-":
            return iconst(ca - cb)
        if op == "*":
            return iconst(ca * cb)
        if op == "/":
            return iconst(ca // cb)
        if op == "%":
            return iconst(ca % cb)
        if op == "ceildiv":
            return iconst(-(-ca // cb))
        if op == "min":
            return iconst(min(ca, cb))
    if op == "*" and (ca == 1 or cb == 1):
        return b if ca == 1 else a
    if op == "*" and (ca == 0 or cb == 0):
        return iconst(0)
    if op == "+" and (ca == 0 or cb == 0):
        return b if ca == 0 else a
    if op in ("/", "ceildiv") and cb == 1:
        return a
    if op == "%" and cb == 1:
        return iconst(0)
    return IExpr(op, a, b)


# -- domains ----------------------------------------------------------------------------------
class IterDomain:
    __slots__ = ("id", "extent", "ptype", "origin")

    def __init__(self, id_: int, extent: IExpr, origin: tuple) -> None:
        self.id = id_
        self.extent = extent
        self.ptype = ParallelType.Serial
        self.origin = origin       # ("root", k) | ("outer", parent, f) | ("inner", parent, f) | ("merge", a, b)

    def __repr__(self) -> str:
        p = "" if self.ptype is ParallelType.Serial else f"{self.ptype.value}:"
        return f"iS{self.id}{{{p}{self.extent}}}"


class LoopNest:
    """The iteration domain of one kernel and the transforms applied to it."""

    def __init__(self, n_roots: int, extents: Optional[list[IExpr]] = None) -> None:
        self._ids = 0
        exts = extents or [ivar(f"n{k}") for k in range(n_roots)]
        self.roots = [self._new(e, ("root", k)) for k, e in enumerate(exts)]
        self.leaves = list(self.roots)
        self.history: list[str] = []
        # the root that is contiguous in memory: the innermost one, except in outer reduction
        # kernels (roots [kept..., reduced...] with the kept ones contiguous)
        self.contiguous_root = n_roots - 1

    @classmethod
    def over_axes(cls, n_roots: int, axes: list[Optional[int]]) -> "LoopNest":
        """A nest whose initial leaves are ``axes``: root ``k`` for an int, a new extent-1 domain
        for ``None``. Schedules written against a tensor's logical dims replay on it when the
        kernel's roots are those dims reordered (stride order) without the broadcast ones.

        >>> [str(d.extent) for d in LoopNest.over_axes(2, [1, None, 0]).leaves]
        ['n1', '1', 'n0']
        """
        nest = cls(n_roots)
        if sorted(a for a in axes if a is not None) != list(range(n_roots)):
            raise ScheduleError(f"over_axes({axes}): every one of the {n_roots} roots must appear once")
        nest.leaves = [nest.roots[a] if a is not None else nest._new(iconst(1), ("bcast",)) for a in axes]
        return nest

    def _new(self, extent: IExpr, origin: tuple) -> IterDomain:
        d = IterDomain(self._ids, extent, origin)
        self._ids += 1
        return d

    def _axis(self, axis: int, what: str) -> int:
        n = len(self.leaves)
        a = axis + n if axis < 0 else axis
        if not 0 <= a < n:
            raise ScheduleError(f"{what}: axis {axis} does not exist (the domain has {n} axes)")
        return a

    # -- transforms ---------------------------------------------------------------------------
    def merge(self, axis: int, axis2: Optional[int] = None) -> "LoopNest":
        a = self._axis(axis, "merge")
        b = self._axis(a + 1 if axis2 is None else axis2, "merge")
        if b != a + 1:
            raise ScheduleError(f"merge({axis}, {axis2}): only adjacent axes merge; reorder first")
        A, B = self.leaves[a], self.leaves[b]
        if A.ptype is not ParallelType.Serial or B.ptype is not ParallelType.Serial:
            raise ScheduleError(f"merge({axis}): parallelized axes cannot be merged")
        d = self._new(iop("*", A.extent, B.extent), ("merge", A, B))
        self.leaves[a:b + 1] = [d]
        self.history.append(f"merge({axis})")
        return self

    def split(self, axis: int, factor: int, inner_split: bool = True) -> "LoopNest":
        a = self._axis(axis, "split")
        if int(factor) < 1:
            raise ScheduleError(f"split({axis}, {factor}): the factor must be a positive integer")
        D = self.leaves[a]
        if D.ptype is not ParallelType.Serial:
            raise ScheduleError(f"split({axis}, {factor}): axis is already parallelized as {D.ptype.value}")
        f = iconst(factor)
        q = iop("ceildiv", D.extent, f)
        outer = self._new(q if inner_split else f, ("outer", D, factor, inner_split))
        inner = self._new(f if inner_split else q, ("inner", D, factor, inner_split))
        self.leaves[a:a + 1] = [outer, inner]
        self.history.append(f"split({axis}, {factor}" + ("" if inner_split else ", inner_split=False") + ")")
        return self

    def reorder(self, mapping: dict[int, int]) -> "LoopNest":
        n = len(self.leaves)
        src = {self._axis(k, "reorder"): self._axis(v, "reorder") for k, v in mapping.items()}
        if len(set(src.values())) != len(src):
            raise ScheduleError(f"reorder({mapping}): two axes moved to the same position")
        new: list[Optional[IterDomain]] = [None] * n
        for old, pos in src.items():
            new[pos] = self.leaves[old]
        rest = iter(d for i, d in enumerate(self.leaves) if i not in src)
        self.leaves = [d if d is not None else next(rest) for d in new]
        self.history.append(f"reorder({mapping})")
        return self

    def parallelize(self, axis: int, ptype: ParallelType) -> "LoopNest":
        a = self._axis(axis, "parallelize")
        if not isinstance(ptype, ParallelType):
            raise ScheduleError(f"parallelize({axis}, {ptype!r}): not a ParallelType")
        if ptype not in (ParallelType.Serial, ParallelType.Unroll, ParallelType.Vectorize):
            for i, d in enumerate(self.leaves):
                if i != a and d.ptype is ptype:
                    raise ScheduleError(f"parallelize({axis}, {ptype.value}): axis {i} is already bound to {ptype.value}")
        if ptype in (ParallelType.Unroll, ParallelType.Vectorize) and self.leaves[a].extent.const is None \
                and ptype is ParallelType.Unroll:
            raise ScheduleError(f"parallelize({axis}, Unroll): the axis needs a constant extent (split it first)")
        if ptype is ParallelType.Vectorize and not self.walks_innermost(a):
            raise ScheduleError(f"parallelize({axis}, Vectorize): only the innermost axis, when it steps through "
                                "the innermost dim with unit stride (that dim, an inner split of it, or a merge "
                                "ending in it), is contiguous in memory")
        self.leaves[a].ptype = ptype
        self.history.append(f"parallelize({axis}, {ptype!r})")
        return self

    def walks_innermost(self, axis: int) -> bool:
        """True if leaf ``axis`` is the innermost leaf and steps through the contiguous root
        (``contiguous_root``, the innermost unless set) with unit stride: that root itself, the
        inner part of a split of such a domain, or a merge whose inner operand is such a domain."""
        if axis != len(self.leaves) - 1 or not self.roots:
            return False
        d = self.leaves[axis]
        while d is not self.roots[self.contiguous_root]:
            o = d.origin
            if o[0] == "inner":
                d = o[1]
            elif o[0] == "merge":
                d = o[2]
            else:
                return False
        return True

    def copy_parallel_from(self, other: "LoopNest") -> None:
        """``parallelize_all_like``: same leaf structure required."""
        if [str(d.extent) for d in self.leaves] != [str(d.extent) for d in other.leaves]:
            raise ScheduleError("parallelize_all_like: the domains differ; apply the same transforms first")
        for mine, theirs in zip(self.leaves, other.leaves):
            mine.ptype = theirs.ptype

    # -- index math -----------------------------------------------------------------------
    def domain_indices(self, leaf_index: dict[int, IExpr]) -> dict[int, IExpr]:
        """Index expression of every domain (by id), derived from the leaf loop indices."""
        idx: dict[int, IExpr] = dict(leaf_index)
        known = {d.id: d for d in self.leaves}
        # Walk producers until all roots are known. Repeat passes: the graph is tiny.
        all_domains = self._all_domains()
        changed = True
        while changed:
            changed = False
            for d in all_domains:
                if d.id in idx:
                    continue
                kids = self._children(d, all_domains)
                if kids is None:
                    continue
                kind, parts = kids
                if kind == "split" and all(p.id in idx for p in parts):
                    outer, inner = parts
                    factor, inner_split = outer.origin[2], outer.origin[3]
                    if inner_split:
                        idx[d.id] = iop("+", iop("*", idx[outer.id], iconst(factor)), idx[inner.id])
                    else:
                        idx[d.id] = iop("+", iop("*", idx[outer.id], inner.extent), idx[inner.id])
                    changed = True
                elif kind == "merge" and parts[0].id in idx:
                    merged = parts[0]
                    a, b = merged.origin[1], merged.origin[2]
                    if d is a:
                        idx[d.id] = iop("/", idx[merged.id], b.extent)
                    else:
                        idx[d.id] = iop("%", idx[merged.id], b.extent)
                    changed = True
        del known
        return idx

    def _all_domains(self) -> list[IterDomain]:
        seen: dict[int, IterDomain] = {}
        stack = list(self.leaves)
        while stack:
            d = stack.pop()
            if d.id in seen:
                continue
            seen[d.id] = d
            o = d.origin
            if o[0] in ("outer", "inner"):
                stack.append(o[1])
            elif o[0] == "merge":
                stack += [o[1], o[2]]
        return list(seen.values())

    @staticmethod
    def _children(d: IterDomain, domains: list[IterDomain]):
        outer = inner = None
        for x in domains:
            o = x.origin
            if o[0] == "outer" and o[1] is d:
                outer = x
            elif o[0] == "inner" and o[1] is d:
                inner = x
            elif o[0] == "merge" and (o[1] is d or o[2] is d):
                return "merge", (x,)
        if outer is not None and inner is not None:
            return "split", (outer, inner)
        return None

    def merged_all(self) -> Optional[IterDomain]:
        """The domain that merges every root in order (its index is the linear index), if any."""
        for d in self._all_domains():
            if self._covers(d) == list(range(len(self.roots))):
                return d
        return None

    def _covers(self, d: IterDomain) -> list[int]:
        o = d.origin
        if o[0] == "root":
            return [o[1]]
        if o[0] == "merge":
            return self._covers(o[1]) + self._covers(o[2])
        return []

    def split_checks(self) -> list[IterDomain]:
        """Domains that were split by a factor that may not divide them: need ``idx < extent``."""
        out = []
        for d in self._all_domains():
            kids = self._children(d, self._all_domains())
            if kids and kids[0] == "split":
                factor = kids[1][0].origin[2]
                if d.extent.const is None or d.extent.const % factor:
                    out.append(d)
        return out

    # -- printing -------------------------------------------------------------------------
    def loop_nest_str(self, body: str = "") -> str:
        leaf_idx = {d.id: ivar(f"i{k}") for k, d in enumerate(self.leaves)}
        idx = self.domain_indices(leaf_idx)
        lines = []
        for k, d in enumerate(self.leaves):
            lines.append("  " * k + f"for i{k} in {d.ptype.value}({d.extent}):")
        roots = ", ".join(str(idx.get(r.id, "?")) for r in self.roots)
        pad = "  " * len(self.leaves)
        for d in self.split_checks():
            lines.append(pad + f"if {idx.get(d.id, '?')} < {d.extent}:")
            pad += "  "
        lines.append(pad + (body or f"T[...] at root indices ({roots})"))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"LoopNest(roots={self.roots}, leaves={self.leaves})"
