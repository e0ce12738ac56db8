"""What one kernel can hold: the structural checks of a fusion group's members (movement ops,
loop axes of reductions, right-aligned broadcasting of pointwise inputs), which the partition asks
of each merge and a re-specialization asks of a whole group."""
from __future__ import annotations

from typing import Optional

from ..ir.graph import Node
from ..ir.types import TensorType
from ..ops import lookup
from ..ops.axes import analyze, dtype_only, needs_axes
from ..ops.movement import movement_misfit


def group_misfit(nodes: list[Node]) -> Optional[str]:
    """Why one kernel cannot hold ``nodes`` (the structural checks of a merge, for a whole group:
    re-specializations must pass them as the first partition's groups did)."""
    moved = movement_misfit(nodes)
    if moved:
        return moved
    if needs_axes(nodes):
        axes = analyze(nodes, columns=True)      # (column sums: ``column_sums.py``)
        if isinstance(axes, str):
            return axes
        if axes.columns:
            from .column_sums import rows_contiguous

            if not rows_contiguous(nodes, axes):
                # a group made with contiguous rows, re-specialized for another layout
                return "column sums need a row kernel over contiguous rows, and these rows are not"
        return None
    return pointwise_misfit(set(nodes))


def _widest(nodes: list[Node]) -> Optional[tuple[int, ...]]:
    sizes = [o.type.sizes for n in nodes for o in n.outputs
             if isinstance(o.type, TensorType) and o.type.sizes is not None]
    return max(sizes, key=len) if sizes else None


def same_shape(nodes: list[Node]) -> bool:
    """Pointwise horizontal siblings run over one iteration domain, right-aligned: every output's
    profiled shape is a suffix-aligned broadcast of the widest one's with equal sizes (a symbolic
    dim only with a symbolic dim), else sizes the guard must equate may be unrelated. Groups with
    reductions are checked by the loop-axes analysis instead."""
    if needs_axes(nodes):
        return True
    wide = _widest(nodes)
    if wide is None:
        return False
    for n in nodes:
        for o in n.outputs:
            t = o.type
            if not isinstance(t, TensorType) or t.sizes is None:
                continue
            if any(s != 1 and s != w for s, w in zip(reversed(t.sizes), reversed(wide))):
                return False
    return True


def pointwise_misfit(nodes: set[Node]) -> Optional[str]:
    """Why the tensor inputs of a pointwise group do not broadcast together right-aligned (the
    guard checks exactly that: a group violating it would miss on its own profiled inputs)."""
    outs = [o.type for n in nodes for o in n.outputs if isinstance(o.type, TensorType) and o.type.sizes is not None]
    if not outs:
        return None
    rank = max(t.rank for t in outs)
    seen: dict[int, tuple[int, str]] = {}
    values = {v for n in nodes for v in n.inputs if v.node not in nodes} | {o for n in nodes for o in n.outputs}
    values -= dtype_only(list(nodes))
    for v in values:
        t = v.type
        if not isinstance(t, TensorType) or t.sizes is None:
            continue
        for d, s in enumerate(t.sizes):
            if s == 1:
                continue
            od = rank - t.rank + d
            if od in seen and seen[od][0] != s:
                return (f"%{v.name} dim {d} (size {'*' if s == -1 else s}) and %{seen[od][1]} share a loop axis "
                        "but their profiled sizes differ")
            seen.setdefault(od, (s, v.name))
    from ..ops.random import RANDOM_ROWS

    for n in nodes:
        row = lookup(n.kind)
        if row is None or row.name not in RANDOM_ROWS or not isinstance(n.outputs[0].type, TensorType):
            continue
        t = n.outputs[0].type
        if t.sizes is None or t.rank != rank or any(t.sizes[od] == 1 for od in seen):
            # its numbers are keyed on its own output's linear index (codegen/lower.py)
            return f"{n.kind}'s output does not span the kernel's iteration space"
    return None
