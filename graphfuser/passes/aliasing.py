"""May-alias sets of a graph's values, from TorchScript's schema alias annotations.

An aten schema marks an output that may share memory with an input by giving both the same
alias set: ``aten::to.dtype(Tensor(a) self, ...) -> Tensor(a)`` may return ``self`` itself (same
dtype, no copy), ``aten::view(Tensor(a) self, ...) -> Tensor(a)`` returns a view of it, and
``aten::add_(Tensor(a!) self, ...) -> Tensor(a!)`` returns the tensor it wrote. Those annotations,
not a hand list, decide what aliases what. A few ops return their input at run time without an
annotation saying so (``type_as`` to the same dtype, dropout in eval mode, ``sum_to_size`` to its own shape); they are listed in
``UNANNOTATED_ALIASING``.

Containers (lists, tuples) and control flow (``prim::If`` / ``prim::Loop`` outputs) may hold or
yield any of their tensor inputs, so their outputs join their inputs' sets. ``AliasSets`` is a
union-find over the whole graph (nested blocks included): two values in one set may share memory.
"""
from __future__ import annotations

import functools
from typing import Optional

import torch

from ..ir.graph import Block, Graph, Node, Value

# Ops that may return their input (or a view of it) although their schema has no alias annotation.
UNANNOTATED_ALIASING = frozenset({
    "aten::type_as", "aten::dropout", "aten::feature_dropout", "aten::alpha_dropout",
    "aten::feature_alpha_dropout",
    # returns ``self`` when ``size`` is already its shape
    "aten::sum_to_size",
    # return ``self`` when it already has that many dims
    "aten::atleast_1d", "aten::atleast_2d", "aten::atleast_3d",
})

# Value-producing prim kinds whose outputs can contain / be their tensor inputs.
_CONTAINER_KINDS = frozenset({
    "prim::ListConstruct", "prim::ListUnpack", "prim::TupleConstruct", "prim::TupleUnpack",
    "prim::TupleIndex", "aten::__getitem__", "prim::unchecked_cast", "prim::DictConstruct",
    "aten::__derive_index", "prim::TupleSlice",
})


def _schema_text(node: Node) -> Optional[str]:
    schema = getattr(node.schema, "schema", None)
    return schema or None


@functools.lru_cache(maxsize=None)
def _aliasing_from_schema(schema: str) -> tuple[tuple[int, ...], ...]:
    """Per output of ``schema``: the positions of the inputs it may alias."""
    parsed = torch._C.parse_schema(schema)
    sets_of_arg = [set(a.alias_info.before_set) if a.alias_info is not None else set() for a in parsed.arguments]
    out = []
    for r in parsed.returns:
        info = r.alias_info
        if info is None:
            out.append(())
            continue
        rsets = set(info.before_set) | set(info.after_set)
        wildcard = "*" in rsets
        out.append(tuple(i for i, s in enumerate(sets_of_arg) if s and (wildcard or "*" in s or s & rsets)))
    return tuple(out)


@functools.lru_cache(maxsize=None)
def _aliasing_any_overload(kind: str, n_outputs: int) -> tuple[tuple[int, ...], ...]:
    """Without a node schema (graphs parsed from text): the union over ``kind``'s overloads."""
    try:
        schemas = torch._C._jit_get_schemas_for_operator(kind)
    except RuntimeError:
        schemas = []
    acc: list[set[int]] = [set() for _ in range(n_outputs)]
    for s in schemas:
        for k, ins in enumerate(_aliasing_from_schema(str(s))[:n_outputs]):
            acc[k].update(ins)
    return tuple(tuple(sorted(a)) for a in acc)


def output_aliases(node: Node) -> list[list[Value]]:
    """For each output of ``node``: the input values it may alias (empty: a fresh value)."""
    kind = node.kind
    tensors = [v for v in node.inputs if v.type.is_tensor or not _is_scalar(v)]
    if kind in UNANNOTATED_ALIASING:
        return [[v for v in node.inputs if v.type.is_tensor] for _ in node.outputs]
    if kind in _CONTAINER_KINDS or kind == "prim::PythonOp":    # a Python call may return (a view of) an input
        return [list(tensors) for _ in node.outputs]
    if kind in ("prim::If", "prim::Loop"):
        carried = list(node.inputs[2:]) if kind == "prim::Loop" else []
        outs = []
        for k, _ in enumerate(node.outputs):
            vals = list(carried[k:k + 1])
            for b in node.blocks:
                ret = b.returns[k + (1 if kind == "prim::Loop" else 0):]
                if ret:
                    vals.append(ret[0])
            outs.append(vals)
        return outs
    if not kind.startswith("aten::"):
        return [[] for _ in node.outputs]
    schema = _schema_text(node)
    plan = _aliasing_from_schema(schema) if schema else _aliasing_any_overload(kind, len(node.outputs))
    return [[node.inputs[i] for i in (plan[k] if k < len(plan) else ()) if i < len(node.inputs)]
            for k in range(len(node.outputs))]


def may_alias_input(node: Node) -> bool:
    """Can an output of ``node`` be one of its inputs or a view of one (per its schema)?"""
    return any(vals for vals in output_aliases(node))


def _is_scalar(v: Value) -> bool:
    return v.type.name.rstrip("?") in ("int", "float", "bool", "str", "NoneType", "Device", "ScalarType",
                                        "Layout", "MemoryFormat", "number", "Scalar")


class AliasSets:
    """Union-find of may-alias sets over every value of a graph; with ``before``, over what the
    nodes that run before that node make alias (a list built after it does not make the values
    it holds alias each other before it)."""

    def __init__(self, graph: Graph, before: Optional[Node] = None) -> None:
        self._stop = before
        self.parent: dict[Value, Value] = {}
        self.written: set[Value] = set()      # values some in-place op writes
        self._walk(graph.block)

    @classmethod
    def in_order(cls, graph: Graph) -> "AliasSets":
        """Empty sets that :meth:`advance_to` grows node by node: ``advance_to(n)`` leaves them
        equal to ``AliasSets(graph, before=n)`` for a pass that visits nodes in program order
        (nested blocks before their node) and changes no node before the one it visits."""
        self = cls.__new__(cls)
        self._stop = None
        self.parent, self.written = {}, set()
        self._steps = self._nodes_in_order(graph.block)
        return self

    def _nodes_in_order(self, block: Block):
        for node in block.nodes:
            for b in node.blocks:
                yield from self._nodes_in_order(b)
            yield node
            self._add(node)     # once the visitor is past the node, with its final kind

    def advance_to(self, node: Node) -> "AliasSets":
        for n in self._steps:
            if n is node:
                return self
        raise ValueError(f"{node.where()} is not after the last node visited")

    def _add(self, node: Node) -> None:
        """Union what ``node`` makes alias (a loop: its carried values with their sources)."""
        if node.kind == "prim::Loop":
            for b in node.blocks:
                for p, src in zip(b.params[1:], node.inputs[2:]):
                    self.union(p, src)
                for p, ret in zip(b.params[1:], b.returns[1:]):
                    self.union(p, ret)
        for out, ins in zip(node.outputs, output_aliases(node)):
            for v in ins:
                self.union(out, v)
        if writes(node):
            self.written.add(node.inputs[0])

    def find(self, v: Value) -> Value:
        p = self.parent.get(v, v)
        if p is v:
            return v
        root = self.find(p)
        self.parent[v] = root
        return root

    def union(self, a: Value, b: Value) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra is not rb:
            self.parent[ra] = rb

    def _walk(self, block: Block) -> bool:
        """Union the sets ``block``'s nodes make; True where the walk reached ``_stop``."""
        for node in block.nodes:
            if node is self._stop:
                return True
            stopped = False
            for b in node.blocks:
                stopped = self._walk(b) or stopped
            if stopped:
                return True     # the stop is inside this node: its outputs come after it
            self._add(node)
        return False

    def aliases(self, v: Value, among: list[Value]) -> list[Value]:
        """The values of ``among`` in ``v``'s set (``v`` excluded)."""
        root = self.find(v)
        return [u for u in among if u is not v and self.find(u) is root]

    def is_written(self, v: Value) -> bool:
        """Does some in-place op write ``v`` or a value that may alias it?"""
        root = self.find(v)
        return any(self.find(w) is root for w in self.written)


def writes(node: Node) -> bool:
    """Is ``node`` an in-place aten op (writes its first argument)? A Python call with effects
    (``prim::PythonOp``: ``x[i] = v``, an in-place method with no aten op) counts as one."""
    k = node.kind
    return k.startswith("aten::") and k.endswith("_") and not k.endswith("__") and bool(node.inputs) \
        or k == "aten::copy_" \
        or k == "prim::PythonOp" and getattr(node.attrs.get("call"), "effects", False) and bool(node.inputs)


def all_values(graph: Graph) -> list[Value]:
    out = list(graph.inputs)

    def walk(block: Block) -> None:
        out.extend(block.params)
        for n in block.nodes:
            out.extend(n.outputs)
            for b in n.blocks:
                walk(b)
    walk(graph.block)
    return out


def written_after(node: Node) -> list[int]:
    """Indices of ``node``'s inputs that an in-place op after it (in program order, nested blocks
    included, up the enclosing blocks) writes through a value that may alias them."""
    block = node.owner
    if block is None or block.graph is None:
        return []
    sets = AliasSets(block.graph)
    roots = [sets.find(v) for v in node.inputs]
    hit: set = set()

    def scan(nodes) -> None:
        for n in nodes:
            for b in n.blocks:
                scan(b.nodes)
            if writes(n):
                hit.add(sets.find(n.inputs[0]))

    cur: Optional[Node] = node
    while cur is not None and cur.owner is not None:
        nodes = cur.owner.nodes
        scan(nodes[nodes.index(cur) + 1:])
        cur = cur.owner.owner       # the node whose block holds this one (a loop body runs again:
        if cur is not None and cur.kind == "prim::Loop":          # the whole body is "after")
            for b in cur.blocks:
                scan(b.nodes)
    return [i for i, r in enumerate(roots) if r in hit]

