"""Loop axes of a fusion group: which dims of which values walk the same loop.

A kernel iterates one domain of axes. Every dim of every tensor value in a group either is a
broadcast (size 1) or belongs to one axis; an op's row says how its arguments' dims and its
outputs' dims line up (``DimPlan``): right-aligned broadcasting for pointwise rows, the channel
dim for batch-norm parameters, removed or size-1 dims for reductions. Unifying those relations
over a group (union-find) gives each value's axes.

A group fits one kernel when

- no value walks one axis with two of its dims (that would be a transpose, e.g. ``x + x.sum(1)``
  with a square ``x``), and
- every reduction in it combines the same set of axes (reductions over size-1 dims combine
  nothing and fit anywhere), and
- every axis is walked by the group's reductions (an axis of their input): ``amin(b) + a`` with
  ``a`` as large as ``b`` would otherwise recompute the full reduction for every element of
  ``a``, so its cost would grow with the product of both sizes instead of their sum.

``analyze(nodes)`` returns the ``Axes`` or the reason the nodes do not fit; the partition pass
asks it before growing a group that holds a reduction or normalization, lowering uses its result,
and guards use it to check that the sizes of dims sharing an axis agree.

Example::

    >>> axes = analyze(group_nodes)            # doctest: +SKIP
    >>> axes.of[x], axes.of[s], axes.reduced   # x: [N, C], s = x.sum(1)   # doctest: +SKIP
    ((0, 1), (0,), frozenset({1}))
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence, Union

import sys

from ..ir.graph import Node, Value
from ..ir.types import TensorType
from .table import lookup

# the package (``bind``, ``memoized``), read at call time: this module loads while the package's
# ``__init__`` runs (its rows' modules import ``DimPlan``), before those are defined; a
# function-level ``from . import`` cost the partition's hot paths an import lookup per call
_ops = sys.modules[__name__.rpartition(".")[0]]


@dataclass
class DimPlan:
    """How one node's tensors line up, in the node's own domain of ``rank`` positions."""

    rank: int
    args: dict[str, tuple[int, ...]]               # tensor arg -> position of each of its dims
    outputs: list[tuple[Optional[int], ...]]       # per output: position of each dim (None: size 1)
    reduced: tuple[int, ...] = ()                  # positions the node reduces


@dataclass
class Axes:
    of: dict[Value, tuple[Optional[int], ...]]     # value -> axis of each dim (None: broadcast)
    reduced: frozenset[int]                        # axes the group's reductions combine
    node_reduced: dict[Node, frozenset[int]] = field(default_factory=dict)
    size_of: dict[int, int] = field(default_factory=dict)   # axis -> profiled size (-1 symbolic)
    # column sums (``analyze(columns=True)``): the kept axes, which the group's column sums
    # combine per block of rows (``codegen/reduction.py``); empty for plain reduction groups
    columns: frozenset[int] = frozenset()

    @property
    def all(self) -> set[int]:
        return {a for dims in self.of.values() for a in dims if a is not None}


def pointwise_plan(node: Node, args: dict) -> DimPlan:
    """Right-aligned broadcasting: every tensor argument lines up with the output's last dims."""
    rank = node.outputs[0].type.rank
    plan = {}
    for name, v in args.items():
        if isinstance(v, Value) and isinstance(v.type, TensorType) and v.type.rank is not None:
            plan[name] = tuple(range(rank - v.type.rank, rank))
    return DimPlan(rank, plan, [tuple(range(rank))])


def dim_plan(node: Node) -> Union[DimPlan, str]:
    """The node's ``DimPlan`` from its op-table row, or why it has none (from ``bind_memo``'s
    table while one is open: the partition plans each node once per candidate merge)."""
    return _ops.memoized(("dim_plan",), node, lambda: _dim_plan(node))


def _dim_plan(node: Node) -> Union[DimPlan, str]:
    row = lookup(node.kind)
    if row is None:
        return f"{node.kind} is not in the op table"
    args, consts, _ = _ops.bind(row, node)
    # arguments that only select an overload or a dtype (type_as's / to's `other`) have no dims here
    args = {k: v for k, v in args.items() if k not in row.ignored}
    plan_fn = getattr(row, "dim_plan", None)
    if plan_fn is None:
        return pointwise_plan(node, args)
    return plan_fn(node, args, consts)


def is_reduction_node(node: Node) -> bool:
    row = lookup(node.kind)
    return row is not None and row.kind in ("reduction", "normalization")


def analyze(nodes: Sequence[Node], columns: bool = False) -> Union[Axes, str]:
    """Axes of every tensor value the nodes read or write, or why they cannot share one kernel.

    ``columns``: a group may also hold *column sums*, sums over exactly the axes its other
    reductions keep, whose results no node of the group reads but a dtype cast (a norm backward's weight
    gradient next to the row kernel of its input gradient: ``passes/column_sums.py``); their
    axes are ``Axes.columns``."""
    scan = AxisScan()
    for node in nodes:
        why = scan.add(node)
        if why is not None:
            return why
    return scan.finish(columns)


class AxisScan:
    """``analyze`` in two parts: ``add`` takes the nodes one at a time, ``finish`` draws the
    conclusions. A scan of some nodes, copied and given a later node, is the scan of all of them:
    the partition grows a group node by node in block order, and analyzed the whole group again
    for each (``passes/partition.py`` keeps its groups' scans and extends them).

    The axis positions form a union-find with ``parent[a] <= a`` always (a union points the
    larger root at the smaller, compression points further down), so one forward pass resolves
    every root; a resolved table is still a valid union-find, so a finished scan can be copied
    and extended."""

    __slots__ = ("parent", "raw", "sizes", "node_red", "walked", "nodes")

    def __init__(self) -> None:
        self.parent: list[int] = []
        self.raw: dict[Value, tuple[Optional[int], ...]] = {}
        self.sizes: dict[int, int] = {}
        self.node_red: dict[Node, list[int]] = {}
        self.walked: list[int] = []     # positions of the reductions' own domains (their input dims)
        self.nodes: list[Node] = []

    def copy(self) -> "AxisScan":
        c = AxisScan.__new__(AxisScan)
        c.parent, c.raw, c.sizes = self.parent[:], dict(self.raw), dict(self.sizes)
        c.node_red, c.walked, c.nodes = dict(self.node_red), self.walked[:], self.nodes[:]
        return c

    def add(self, node: Node) -> Optional[str]:
        """Take ``node`` (after every node taken so far); why the nodes cannot share one kernel,
        or None. A scan that answered a reason is not to be extended."""
        self.nodes.append(node)
        row = lookup(node.kind)
        if row is None and not node.kind.startswith("aten::"):
            return None         # constants and other prim:: nodes; graphfuser:: rows take part
        plan = dim_plan(node)
        if isinstance(plan, str):
            return plan
        parent, raw, sizes = self.parent, self.raw, self.sizes
        args, _, _ = _ops.bind(row, node)
        base = len(parent)
        parent.extend(range(base, base + plan.rank))
        real = [False] * plan.rank
        for name, dims in plan.args.items():
            v = args.get(name)
            if not isinstance(v, Value) or not isinstance(v.type, TensorType) or v.type.sizes is None:
                continue
            va = raw.get(v)
            if va is None:      # a value from outside: a fresh position per dim (none for size 1)
                out = []
                for size in v.type.sizes:
                    if size == 1:
                        out.append(None)
                    else:
                        out.append(len(parent))
                        sizes[len(parent)] = size
                        parent.append(len(parent))
                va = raw[v] = tuple(out)
            if len(va) != len(dims):
                return f"{node.where()}: argument {name!r} has rank {len(va)}, the plan expects {len(dims)}"
            for d, p in enumerate(dims):
                a = va[d]
                if a is not None:
                    ra, rb = a, base + p
                    while parent[ra] != ra:
                        parent[ra] = ra = parent[parent[ra]]
                    while parent[rb] != rb:
                        parent[rb] = rb = parent[parent[rb]]
                    if ra < rb:
                        parent[rb] = ra
                    elif rb < ra:
                        parent[ra] = rb
                    real[p] = True
                    sizes[base + p] = sizes.get(a, -1)
        for o, omap in zip(node.outputs, plan.outputs):
            t = o.type
            if not isinstance(t, TensorType) or t.sizes is None or len(t.sizes) != len(omap):
                return f"{node.where()}: output %{o.name} does not match the row's dim plan"
            raw[o] = tuple(None if (p is None or t.sizes[d] == 1) else base + p for d, p in enumerate(omap))
        self.node_red[node] = [base + p for p in plan.reduced if real[p]]
        if row.kind in ("reduction", "normalization"):      # (is_reduction_node)
            self.walked += [base + p for p in range(plan.rank) if real[p]]
        return None

    def finish(self, columns: bool = False) -> Union[Axes, str]:
        root = self.parent      # resolved in place: each entry's parent is resolved before it
        for a in range(len(root)):
            root[a] = root[root[a]]
        of = {v: tuple(None if a is None else root[a] for a in dims) for v, dims in self.raw.items()}
        for v, dims in of.items():
            present = [a for a in dims if a is not None]
            if len(set(present)) != len(present):
                return (f"%{v.name} would walk one loop axis with two of its dims (a broadcast against a "
                        f"transposed or reduced value); it needs its own kernel")
        node_reduced = {n: frozenset(root[a] for a in r) for n, r in self.node_red.items()}
        sets = {s for s in node_reduced.values() if s}
        col: frozenset[int] = frozenset()
        if len(sets) == 2 and columns:
            found = _column_set(self.nodes, node_reduced, sets, {root[a] for a in self.walked})
            if isinstance(found, str):
                return found
            col = found
            sets.discard(col)
        if len(sets) > 1:
            return "reductions over different axes cannot share one kernel"
        if any(is_reduction_node(n) for n in self.node_red):
            domain = {root[a] for a in self.walked}
            for v, dims in of.items():
                extra = [a for a in dims if a is not None and a not in domain]
                if extra:
                    return (f"%{v.name} walks a loop axis that no reduction in the group walks: one kernel "
                            "would recompute the reduction for every element along it (not O(elements))")
        size_of: dict[int, int] = {}
        for a, size in self.sizes.items():
            r = root[a]
            if size_of.get(r, -1) == -1:
                size_of[r] = size
        return Axes(of, next(iter(sets)) if sets else frozenset(), node_reduced, size_of, col)


COLUMN_SUM_KINDS = ("aten::sum", "aten::sum_to_size")
COLUMN_CASTS = ("aten::type_as", "aten::to")     # what a column sum may feed inside its group


def column_output_misfit(o: Value, axes: Axes) -> Optional[str]:
    """Why column sum output ``o`` cannot be written from per-block partials: it must walk
    exactly the reduced axes of the row reduction, in row-major order (the launcher sums the
    slots of a [slots, reduced extents] tensor into it). A summand constant along a reduced axis
    (a per-row gradient summed to a [1] bias: fuzz graph 5274 of seed 8787) walks fewer: each
    row worker would add it once per column. The partition asks this before it merges column
    sums into a row kernel; the lowering asks it again."""
    t = o.type
    walked = {a for a in axes.of.get(o, ()) if a is not None}
    if walked != set(axes.reduced) or t.stride_order is None or list(t.stride_order) != sorted(t.stride_order):
        return f"column sum %{o.name} must walk exactly the reduced axes, in default order"
    return None


def _column_set(nodes: Sequence[Node], node_reduced: dict, sets: set, domain: set) -> Union[frozenset, str]:
    """The reduction set of ``sets`` that is made of column sums: plain sums, read by no node of
    the group, over the axes the other set keeps (the two sets partition the loop domain)."""
    a, b = sets
    if a & b or (a | b) != domain:
        return "reductions over different axes cannot share one kernel (not a row and a column reduction)"
    readers: dict[Value, list[Node]] = {}
    for n in nodes:
        for v in n.inputs:
            readers.setdefault(v, []).append(n)

    def unread(n: Node, casts: bool) -> bool:
        """No node reads ``n``'s results but (``casts``) dtype casts that nothing reads."""
        return all(casts and r.kind in COLUMN_CASTS and r.inputs[0] is o and unread(r, False)
                   for o in n.outputs for r in readers.get(o, ()))

    def columns_of(s: frozenset) -> bool:
        red = [n for n, r in node_reduced.items() if r == s]
        return all(n.kind in COLUMN_SUM_KINDS and unread(n, True) for n in red)

    # the later reduction is the column sum when both could be (the row one is found first)
    order = {n: i for i, n in enumerate(nodes)}
    last = max((n for n, r in node_reduced.items() if r), key=order.__getitem__)
    cands = [s for s in (a, b) if columns_of(s)]
    if not cands:
        return "reductions over different axes cannot share one kernel (neither is a column sum)"
    return node_reduced[last] if node_reduced[last] in cands else cands[0]


def needs_axes(nodes: Sequence[Node]) -> bool:
    """True when a group holds a reduction or normalization (and so needs ``analyze``)."""
    return any(is_reduction_node(n) for n in nodes)


def random_misfit(nodes: Sequence[Node], axes: Axes) -> Optional[str]:
    """Why random rows cannot share a reduction kernel with ``nodes``: their numbers are keyed on
    the row-major linear index of their output, so each one's output must walk every loop axis,
    all in one order (``codegen/reduction.py``)."""
    from .random import RANDOM_ROWS

    order: Optional[list[int]] = None
    domain = axes.all | set(axes.reduced)
    for n in nodes:
        row = lookup(n.kind)
        if row is None or row.name not in RANDOM_ROWS:
            continue
        mine = [a for a in axes.of.get(n.outputs[0], ()) if a is not None]
        if set(mine) != domain or len(mine) != len(set(mine)):
            return f"{n.kind}'s output does not walk every loop axis of the reduction kernel"
        if order is not None and mine != order:
            return "two random ops walk the loop axes in different orders"
        order = mine
    return None


def dtype_only(nodes: Sequence[Node]) -> set[Value]:
    """Tensor values the nodes read only through arguments that select a dtype or an overload
    (``type_as(s, m)``'s ``m``, ``to(s, other)``'s ``other``): their dims take part in nothing."""

    data: set[Value] = set()
    ignored: set[Value] = set()
    for node in nodes:
        row = lookup(node.kind)
        names = list(getattr(row, "arg_names", ())) if row is not None else []
        for i, v in enumerate(node.inputs):
            if row is not None and i < len(names) and names[i] in row.ignored:
                ignored.add(v)
            else:
                data.add(v)
    return {v for v in ignored - data if isinstance(v.type, TensorType)}


def input_axes(sub) -> Optional[list[tuple[Optional[int], ...]]]:
    """Axes of a group subgraph's tensor inputs, for the guard's size checks; None for groups
    that broadcast right-aligned only (pure pointwise groups without dtype-only inputs)."""
    nodes = list(sub.block.nodes)
    if not needs_axes(nodes):
        skip = dtype_only(nodes)
        if not skip:
            return None
        ranks = [o.type.rank or 0 for o in sub.outputs if isinstance(o.type, TensorType)]
        rank = max(ranks, default=0)
        return [tuple(None if v in skip or s == 1 else rank - len(v.type.sizes) + d for d, s in enumerate(v.type.sizes))
                for v in sub.inputs if isinstance(v.type, TensorType)]
    axes = analyze(nodes, columns=True)
    if isinstance(axes, str):
        return None
    out = []
    for v in sub.inputs:
        if isinstance(v.type, TensorType):
            out.append(axes.of.get(v, tuple(None for _ in v.type.sizes)))
    return out
