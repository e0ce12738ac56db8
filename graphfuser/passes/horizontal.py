"""Horizontal fusion (``set_horizontal_mode``, a partition step after the greedy grouping and
``reduction_split``): groups that read one tensor (siblings) merge where they have the same
shape, no path leads from one through an outside node to the other, and the merge fits one
kernel (``_BlockPartition.misfit``)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from ..ir.graph import Node
from ..log import jit_log
from .group_fit import same_shape

if TYPE_CHECKING:
    from .partition import _BlockPartition


def merge_siblings(part: "_BlockPartition") -> None:
    # merging groups moves no node into one: the last grouped position stays where it is
    last = max((part.index[n] for n in part.group), default=-1)
    # Siblings share a tensor input; a shared constant (None, alpha=1 ...) relates nothing.
    shared = [o for n in part.nodes for o in n.outputs]
    # values from outside the block's nodes: its params, the graph's inputs, and (in a nested
    # block) values of enclosing blocks, which a batch norm rewritten under If(training) reads
    free = list(part.block.params) + (part.block.graph.inputs if part.block.owner is None else [])
    for n in part.nodes:
        free += [v for v in n.inputs if v not in free and (v.node is None or v.node not in part.index)]
    for v in shared + free:
        if not v.type.is_tensor:
            continue
        sibs: list[int] = []
        for u, _ in v.uses:
            if u in part.group and part.group[u] not in sibs:
                sibs.append(part.group[u])
        _merge(part, sibs, last)


def reach_bound(part: "_BlockPartition", nodes: Sequence[Node], limit: int) -> int:
    """A position past which ``can_join``'s searches for a path between groups that hold
    ``nodes`` need not go: such a path ends before the last of them, and a node after a
    position that no group straddles can only lead further on (edges go forward in block
    order, and a group is reached whole). So: the last of ``nodes``, moved past every group
    that spans it. The horizontal merges searched to the last grouped node of the block
    (resnet50's training forward: ~20 ms a pair, most of its partition time)."""
    index = part.index
    bound = max(index[n] for n in nodes)
    spans = sorted((min(index[k] for k in mem), max(index[k] for k in mem)) for mem in part.members.values() if mem)
    for lo, hi in spans:            # (by start: one pass reaches the closure)
        if lo <= bound < hi:
            bound = hi
    return min(bound, limit)


def _merge(part: "_BlockPartition", sibs: list[int], last: int) -> None:
    while len(sibs) > 1:
        a, b = sibs[0], sibs[1]
        if a in part.members and b in part.members and part.device[a] == part.device[b] \
                and same_shape(part.members[a] + part.members[b]) \
                and part.can_join(part.members[a], part.members[b],
                                  reach_bound(part, part.members[a] + part.members[b], last)) \
                and not part.misfit(set(part.members[a]), set(part.members[b])):
            jit_log("partition", 2, f"horizontal: merged group {b} into group {a}")
            part.merge_groups(a, b)
            sibs.pop(1)
        else:
            sibs.pop(0)
