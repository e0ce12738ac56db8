"""Make in-place ops on intermediates functional, so they can fuse.

``%b = aten::add_(%a, %x, %1)`` where ``%a`` is a fresh intermediate becomes
``%b = aten::add(%a, %x, %1)`` and every later use of ``%a`` reads ``%b``. That is only the same
program when nothing else can observe the difference, so the rewrite needs all of:

- ``%a`` is fresh: produced in the same block by an op-table op whose schema says its output is
  new memory (``aten::to`` / ``contiguous`` / views may return their input: ``passes.aliasing``),
  or by a chain of elementwise ops that may return their input (``.float()``, ``type_as``,
  dropout in eval) over such a value; not a graph input, not a block parameter, not used or
  returned in a nested block;
- no value that may alias ``%a`` (a view, ``.float()`` of a float tensor, a list holding it ...)
  is read after the write or returned: eager readers of those would see the write;
- eager's in-place rules hold on the profiled types: the other tensor arguments broadcast into
  ``%a``'s shape without growing it (``v.mul_(a)`` with ``v: [1]``, ``a: [64, 1]`` must raise), and
  the functional op's result dtype is ``%a``'s dtype.

The rewritten node is recorded in ``FUNCTIONALIZED``. A group's guard keeps the profiled
broadcast structure; where a functionalized node ends up outside every group, ``restore_unfused``
turns it back into the in-place op after partitioning (fusion was its only reason), and a group's
fallback runs the in-place op again where that is equivalent (``restore_in_fallback``), so eager's
shape errors survive a guard miss.
"""
from __future__ import annotations

import weakref
from typing import Optional

import torch

from ..ops.aten import resolve_aten
from ..ir.graph import Block, Graph, Node, Value
from ..ir.types import TensorType
from ..log import jit_log
from ..ops import fusible, lookup
from .aliasing import AliasSets, may_alias_input

# functional node -> the in-place kind it replaced
FUNCTIONALIZED: "weakref.WeakKeyDictionary[Node, str]" = weakref.WeakKeyDictionary()


def _fresh(node: Node) -> bool:
    """Does ``node`` produce new memory (an op-table op whose output aliases no input)?"""
    row = lookup(node.kind)
    return row is not None and row.kind in ("pointwise", "cast", "reduction", "normalization") \
        and not may_alias_input(node)


def _fresh_root(v: Value, block: Block) -> Optional[Value]:
    """The fresh intermediate ``v`` is, or may alias through elementwise ops that can return their
    input (``.float()`` of a float tensor, ``type_as``, dropout in eval): writing ``v`` writes that
    memory, which is ours (not a graph input) when such a root exists in ``block``."""
    while True:
        p = v.node
        if p is None or p.owner is not block:
            return None
        if _fresh(p):
            return v
        row = lookup(p.kind)
        if row is None or row.kind not in ("pointwise", "cast") or not p.inputs or not p.inputs[0].type.is_tensor:
            return None
        v = p.inputs[0]


def _shape_rule(node: Node, target: Value) -> Optional[str]:
    """Why the out-of-place op could give another shape than the in-place one (None: it cannot)."""
    t = target.type
    if not isinstance(t, TensorType) or t.sizes is None:
        return f"%{target.name} has no profiled shape"
    for v in node.inputs[1:]:
        s = v.type
        if not isinstance(s, TensorType):
            continue
        if s.sizes is None:
            return f"%{v.name} has no profiled shape"
        if len(s.sizes) > len(t.sizes):
            return f"%{v.name} has a higher rank than the in-place target %{target.name}"
        for a, b in zip(reversed(t.sizes), reversed(s.sizes)):
            if a == 1 and b != 1:
                return (f"%{v.name} would broadcast the in-place target %{target.name} (eager raises "
                        "\"output with shape ... doesn't match the broadcast shape\")")
    return None


def _overload_schema(kind: str, schema: str) -> Optional[str]:
    """``kind``'s schema with the overload name of ``schema`` (another op's), as torch registers it."""
    overload = str(torch._C.parse_schema(schema).overload_name)
    try:
        candidates = torch._C._jit_get_schemas_for_operator(kind)
    except RuntimeError:
        return None
    for c in candidates:
        if c.overload_name == overload:
            return str(c)
    return None


def _swap_kind(node: Node, kind: str) -> None:
    """Make ``node`` an ``kind`` node (the in-place / functional twin), with that op's own schema
    (its alias annotations differ: ``Tensor(a!) self`` only on the in-place one)."""
    node.kind = kind
    schema = getattr(node.schema, "schema", "") or None
    if schema:
        schema = _overload_schema(kind, schema)
    node.schema = resolve_aten(kind, schema) if schema else None  # None: resolved by the host program


def _later_reads(block: Block, pos: int, v: Value) -> bool:
    """Is ``v`` read after position ``pos`` of ``block`` (at any depth) or returned anywhere?"""
    for u, _ in v.uses:
        top = u
        while top is not None and top.owner is not block:
            top = top.owner.owner if top.owner is not None else None
        if top is None or block.nodes.index(top) > pos:
            return True
    g = block.graph
    if v in g.block.returns or any(v in n.nested_returns() for n in g.all_nodes() if n.blocks):
        return True
    return False


def _functionalize_block(block: Block, alias: AliasSets) -> int:
    """``alias``: the graph's alias sets grown in program order (``AliasSets.in_order``)."""
    changed = 0
    for node in list(block.nodes):
        for b in node.blocks:
            changed += _functionalize_block(b, alias)
        if not node.kind.endswith("_") or lookup(node.kind[:-1]) is None or not node.inputs:
            continue
        target = node.inputs[0]
        producer = target.node
        where = node.where()
        if producer is None or producer.owner is not block or _fresh_root(target, block) is None:
            jit_log("partition", 1, f"kept in-place {where}: %{target.name} is not a fresh intermediate")
            continue
        pos = block.nodes.index(node)
        users = [u for u, _ in target.uses if u is not node]
        if any(u.owner is not block for u in users) or block.returned_within(target):
            jit_log("partition", 1, f"kept in-place {where}: %{target.name} is used in a nested block")
            continue
        if any(block.nodes.index(u) < pos and lookup(u.kind) is None for u in users):
            jit_log("partition", 1, f"kept in-place {where}: %{target.name} may be aliased by an earlier use")
            continue
        # aliases made before the write (views, same-dtype casts ...) that are read after it; later
        # ones derive from a value read after the write, or from %a, whose uses are rewritten
        earlier = alias.advance_to(node).aliases(target, [o for n in block.nodes[:pos] for o in n.outputs])
        live = [a for a in earlier if _later_reads(block, pos, a)]
        if live:
            jit_log("partition", 1, f"kept in-place {where}: %{target.name} may be aliased by %{live[0].name}, "
                                    "which is read after the write")
            continue
        why = _shape_rule(node, target)
        if why:
            jit_log("partition", 1, f"kept in-place {where}: {why}")
            continue
        old_kind = node.kind
        _swap_kind(node, old_kind[:-1])
        why = fusible(node)
        if why and why.startswith("type promotion"):
            _swap_kind(node, old_kind)
            jit_log("partition", 1, f"kept in-place {where}: the functional op's {why}")
            continue
        FUNCTIONALIZED[node] = old_kind
        new = node.outputs[0]
        for u, i in list(target.uses):
            if u is not node and block.nodes.index(u) > pos:
                u.replace_input(i, new)
        block.returns = [new if r is target else r for r in block.returns]
        changed += 1
        jit_log("partition", 1, f"made {old_kind} functional on intermediate %{target.name}")
    return changed


def functionalize(graph: Graph) -> Graph:
    """Rewrite in-place ops on fresh, unaliased intermediates as functional ops (in place)."""
    _functionalize_block(graph.block, AliasSets.in_order(graph))
    return graph


def restore_unfused(graph: Graph) -> int:
    """Turn functionalized nodes that no group took back into the in-place ops they were."""
    restored = 0
    for node in list(graph.all_nodes()):
        kind = FUNCTIONALIZED.pop(node, None)
        if kind is not None and node.owner is not None:
            _swap_kind(node, kind)
            restored += 1
    return restored


def mark_clone(old: Node, new: Node) -> None:
    """``new`` is a copy of ``old``: it inherits ``old``'s functionalization record."""
    kind = FUNCTIONALIZED.get(old)
    if kind is not None:
        FUNCTIONALIZED[new] = kind


def restore_in_fallback(sub: Graph, group: Optional[Node] = None) -> None:
    """In a group's fallback subgraph, run functionalized ops in place again where that cannot
    change what any other node or output sees, so the fallback raises eager's shape errors.

    The target must be read by nothing after the op inside ``sub`` and not be returned. A target
    that is an input of the group (``group``'s outer value) must moreover be read only by nodes
    that run before ``group`` in its block: the fallback writes the outer tensor, as eager did."""
    nodes = list(sub.block.nodes)
    outer_of = dict(zip(sub.inputs, group.inputs)) if group is not None else {}
    sets = AliasSets(sub)
    values = list(sub.inputs) + [o for n in nodes for o in n.outputs]

    def seen_later(v: Value, node: Node, k: int) -> bool:
        return v in sub.block.returns or any(
            u is not node and (u.owner is not sub.block or nodes.index(u) > k) for u, _ in v.uses)

    for k, node in enumerate(nodes):
        kind = FUNCTIONALIZED.get(node)
        if kind is None or not node.inputs:
            continue
        target = node.inputs[0]
        if seen_later(target, node, k):
            continue
        # a write into the target is a write into every value it may alias (``type_as`` or
        # ``.float()`` of the same dtype return their input): none may be read after it
        root = sets.find(target)
        if any(v is not target and sets.find(v) is root and (v.node is None or seen_later(v, node, k))
               for v in values):
            continue
        if target.node is None and not _read_only_before(outer_of.get(target), group):
            continue
        _swap_kind(node, kind)


def _read_only_before(outer: Optional[Value], group: Optional[Node]) -> bool:
    if outer is None or group is None or group.owner is None or outer.node is None:
        return False
    block = group.owner
    if outer in block.returns or block.returned_within(outer):
        return False
    pos = block.nodes.index(group)
    for u, _ in outer.uses:
        if u is group:
            continue
        if u.owner is not block or block.nodes.index(u) > pos:
            return False
    return True
