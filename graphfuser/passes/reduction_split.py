"""Give a reduction that could not join its producer's group its own copy of the pointwise chain
that feeds it (a partition step, run after the greedy grouping of ``partition.py``).

A group holds reductions over one set of axes. A reduction over other axes that reads a value
computed in a group (RMSNorm's weight gradient: the column sum of ``grad * y``, where ``y`` needs
the per-row ``rstd`` of the row kernel) would make the group write that full-size value only
for the reduction to read it back. When recomputing the value's pointwise chain from what it
is made of moves fewer bytes, the chain is copied next to the reduction and the two form a new
group, which reads the chain's full-size leaves (the group's own inputs, ``x`` and ``grad``) and
its narrow ones (``rstd``, which the first group now writes instead: one value per row).

The choice is by bytes, as AOTAutograd's min-cut partitioner chooses what to save: the
recomputing group reads each full-size leaf once more (a leaf computed in the first group that
is not already one of its outputs costs its write too), against the write and the read of the
value (a tie recomputes: the first group writes one tensor less, and the new group may merge
with a sibling reading the same leaves, as the bias gradient's sum); leaves narrower than the
value and expanded (stride-0) dims count as free. Pointwise nodes of the chain are copied,
so the first group keeps them where it needs them itself; those it no longer needs are dropped.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from ..ir.graph import Node, Value
from ..ir.types import TensorType, Type
from ..log import jit_log
from ..ops import lookup
from ..ops.axes import analyze, is_reduction_node, needs_axes

if TYPE_CHECKING:
    from .partition import _BlockPartition

_TO_DTYPE = ("aten::to.dtype(Tensor(a) self, ScalarType dtype, bool non_blocking=False, bool copy=False, "
             "MemoryFormat? memory_format=None) -> Tensor(a)")
_ITEM = {"float64": 8, "int64": 8, "float32": 4, "int32": 4, "float16": 2, "bfloat16": 2, "int16": 2}


def _bytes(t: TensorType) -> int:
    """Bytes a kernel reads of a value of type ``t``: expanded (stride-0) dims are read once."""
    strides = getattr(t, "strides", None)
    n = 1
    for d, s in enumerate(t.sizes):
        if strides is not None and d < len(strides) and strides[d] == 0:
            continue
        n *= max(s, 1) if s != -1 else 1024      # symbolic dims count alike on both sides
    return n * _ITEM.get(str(t.dtype).replace("torch.", ""), 1)


def _full(v: Value, like: TensorType) -> bool:
    t = v.type
    return isinstance(t, TensorType) and t.complete and t.sizes == like.sizes


def _data_inputs(n: Node) -> list[Value]:
    """``n``'s inputs but those its row reads only for a dtype (type_as's / to's ``other``)."""
    row = lookup(n.kind)
    names = list(getattr(row, "arg_names", ()))
    return [v for k, v in enumerate(n.inputs) if k >= len(names) or names[k] not in row.ignored]


def _copy(part: "_BlockPartition", n: Node, vmap: dict[Value, Value]) -> Node:
    """A copy of chain node ``n`` reading ``vmap``'s copies; a cast whose dtype comes from a
    computed value (``type_as(a, y)``) becomes a cast to that dtype, so that value need not leave
    its group."""
    g = part.block.graph
    data = _data_inputs(n)
    if len(data) < len(n.inputs) and any(v.type.is_tensor and v.node is not None for v in n.inputs if v not in data):
        from ..ops.aten import resolve_aten
        from ..ops.reduction import scalar_type_code

        code = scalar_type_code(n.outputs[0].type.dtype)
        consts = []
        for value, tname in ((code, "int"), (False, "bool"), (False, "bool"), (None, "NoneType")):
            c = g.create("prim::Constant", [], [Type(tname)], {} if value is None else {"value": value})
            part.block.insert_before(n, c)      # moved before the copy's place below
            consts.append(c)
        c = g.create("aten::to", [vmap.get(data[0], data[0])] + [k.output for k in consts],
                     [n.outputs[0].type], {}, n.source, [f"{n.outputs[0].name}_r"])
        c.schema = resolve_aten("aten::to", _TO_DTYPE)
        return c
    c = g.create(n.kind, [vmap.get(i, i) for i in n.inputs], [o.type for o in n.outputs],
                 dict(n.attrs), n.source, [f"{o.name}_r" for o in n.outputs])
    c.schema = n.schema
    return c


def _chain(part: "_BlockPartition", v: Value, members: set[Node]) -> Optional[tuple[list[Node], int]]:
    """The pointwise nodes of ``members`` that compute ``v`` from its leaves, in block order,
    and the bytes a copy of them reads beyond what the group already writes; None if ``v`` is
    not computed by a pointwise chain of the group."""
    like = v.type
    nodes: set[Node] = set()
    cost, seen, stack = 0, set(), [v]
    while stack:
        u = stack.pop()
        if u in seen:
            continue
        seen.add(u)
        p = u.node
        row = lookup(p.kind) if p is not None else None
        if p in members and row is not None and row.kind in ("pointwise", "cast") and len(p.outputs) == 1 \
                and _full(u, like):
            nodes.add(p)
            stack += [i for i in _data_inputs(p) if isinstance(i.type, TensorType)]
            continue
        if u is v:
            return None
        if not _full(u, like):
            continue                        # narrower than v (a per-row value): free
        external = p is None or p not in members or any(part._top(w) not in members for w, _ in u.uses)
        cost += _bytes(u.type) * (1 if external else 2)
    return sorted(nodes, key=part.index.__getitem__), cost


def _write_between(part: "_BlockPartition", first: Node, last: Node) -> Optional[Node]:
    """A node between ``first`` and ``last`` (block order) that writes memory (an in-place op, a
    running-stats update, a side effect): a copy of the chain moved from ``first``'s place to
    ``last``'s would read what that node wrote, where eager read the value before it."""
    from .partition import _mutates

    lo, hi = part.index[first], part.index[last]
    return next((n for n in part.nodes[lo + 1:hi] if _mutates(n)), None)


def split_reduction_chains(part: "_BlockPartition", next_id: int) -> None:
    """Form a group of each lone reduction and a copy of the chain that feeds it where that
    moves fewer bytes than reading the value from its producer's group (module docstring)."""
    changed = False
    for r in list(part.nodes):
        gid = part.group.get(r)
        if not is_reduction_node(r) or r.owner is not part.block or (gid is not None and len(part.members[gid]) > 1):
            continue
        if part.reason(r) is not None or not r.inputs:
            continue
        v = r.inputs[0]
        src = part.group.get(v.node) if v.node is not None else None
        if src is None or src == gid or not isinstance(v.type, TensorType) or not v.type.complete:
            continue
        members = set(part.members[src])
        if any(part._top(u) not in members and u is not r for u, _ in v.uses) or v in part.block.returns:
            continue                        # the group writes v for another reader anyway
        found = _chain(part, v, members)
        if found is None:
            continue
        chain, cost = found
        if cost > 2 * _bytes(v.type):
            continue                        # (a tie recomputes: one write and one kernel fewer)
        writer = _write_between(part, chain[0], r)
        if writer is not None:
            # the copy would read the chain's leaves at the reduction's place, after the write
            jit_log("partition", 1, f"{r.where()} keeps reading %{v.name}: {writer.where()} writes in between")
            continue
        if members & part._closure({r}, part.succ):
            continue                        # the group reads the reduction's result: a cycle
        vmap: dict[Value, Value] = {}
        copies = []
        for n in chain:
            c = _copy(part, n, vmap)
            for o, co in zip(n.outputs, c.outputs):
                vmap[o] = co
                co.profiled = o.profiled
            part.block.insert_before(r, c)
            copies.append(c)
        r.replace_input(0, vmap[v])
        axes = analyze(copies + [r])
        if not isinstance(axes, str):
            # what the source group keeps must still be one kernel: a node it drops may have been
            # what tied an output's axes to its reductions' (the weight gradient's product)
            rest = [n for n in part.members[src] if n not in _would_drop(part, src)]
            if needs_axes(rest):
                kept = analyze(rest, columns=True)
                axes = f"the rest of group {src} would not be one kernel: {kept}" if isinstance(kept, str) else axes
        if isinstance(axes, str):
            r.replace_input(0, v)
            for c in reversed(copies):
                part.block.remove(c)
            jit_log("partition", 1, f"{r.where()} keeps reading %{v.name}: {axes}")
            continue
        if gid is None:
            gid, next_id = next_id, next_id + 1
            part.members[gid] = [r]
            part.group[r] = gid
            part.device[gid] = r.outputs[0].type.device
        for c in copies:
            part.group[c] = gid
        part.members[gid] = copies + part.members[gid]
        _drop_dead(part, src)
        changed = True
        jit_log("partition", 1, f"{r.where()} recomputes %{v.name} from its leaves ({len(copies)} pointwise "
                                f"node(s)) instead of reading it from group {src}")
    if changed:                             # block order and edges with the copies
        part.nodes = list(part.block.nodes)
        part.index = {n: i for i, n in enumerate(part.nodes)}
        part.succ = {n: set() for n in part.nodes}
        part.pred = {n: set() for n in part.nodes}
        part._edges()


def _would_drop(part: "_BlockPartition", gid: int) -> set[Node]:
    """The members of group ``gid`` that ``_drop_dead`` would remove now."""
    dead: set[Node] = set()
    changed = True
    while changed:
        changed = False
        for n in part.members[gid]:
            if n in dead or n.nested_returns() or any(
                    o in part.block.returns or any(u not in dead for u, _ in o.uses) for o in n.outputs):
                continue
            dead.add(n)
            changed = True
    return dead


def _drop_dead(part: "_BlockPartition", gid: int) -> None:
    """Remove members of group ``gid`` whose results nobody reads any more."""
    changed = True
    while changed:
        changed = False
        for n in list(part.members[gid]):
            if any(o.uses or o in part.block.returns for o in n.outputs) or n.nested_returns():
                continue
            part.members[gid].remove(n)
            del part.group[n]
            part.block.remove(n)
            changed = True
