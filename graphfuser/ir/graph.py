"""Graph / Block / Node / Value: a small SSA IR shaped like TorchScript's.

A ``Graph`` owns one top-level ``Block``. A ``Block`` has parameters, an ordered node list and
returns. A ``Node`` has a kind (``aten::add``, ``prim::If``, ``prim::CpuFusionGroup`` ...), inputs,
outputs, attributes, nested blocks (control flow) and, for fusion groups and fallbacks, a
``subgraph``. Op meaning lives in the kind, not in a class per op.

Example::

    >>> from graphfuser.ir import parse_graph
    >>> g = parse_graph('''
    ... graph(%x : Tensor):
    ...   %1 : int = prim::Constant[value=1]()
    ...   %y : Tensor = aten::add(%x, %x, %1)
    ...   return (%y)''')
    >>> [n.kind for n in g.nodes()]
    ['prim::Constant', 'aten::add']
"""
from __future__ import annotations

from typing import Any, Iterator, Optional

from .types import TENSOR, Type

SUBGRAPH_KINDS = ("prim::CudaFusionGroup", "prim::CpuFusionGroup", "prim::FallbackGraph")


class _Marker:
    __slots__ = ("label",)

    def __init__(self, label: str) -> None:
        self.label = label

    def __repr__(self) -> str:
        return self.label


UNPROFILED = _Marker("UNPROFILED")   # ``Value.profiled`` of a value no profiling run recorded
VARIED = _Marker("VARIED")           # ``Value.profiled`` of a scalar that changed between runs


class Value:
    """An SSA value: produced by a node output or a block parameter.

    ``profiled`` holds what profiling saw of a non-tensor value that feeds a reduction's
    dims / keepdim / dtype / correction / eps: the one value every run passed, ``VARIED`` when
    runs disagreed, ``UNPROFILED`` when it was not recorded (tensor values keep theirs in
    ``type``). It is not printed and not copied by ``clone_graph``.
    """

    __slots__ = ("name", "type", "node", "block", "uses", "profiled")

    def __init__(self, name: str, type_: Type, node: Optional["Node"] = None,
                 block: Optional["Block"] = None) -> None:
        self.name = name
        self.type = type_
        self.node = node          # producing node; None for block parameters
        self.block = block        # owning block for parameters
        self.uses: list[tuple["Node", int]] = []  # (user node, input index); block returns excluded
        self.profiled: Any = UNPROFILED

    def __repr__(self) -> str:
        return f"%{self.name}"

    @property
    def is_tensor(self) -> bool:
        return self.type.is_tensor

    def constant(self) -> Any:
        """The value of a ``prim::Constant`` producer; raises if this value is not constant."""
        if self.node is None or self.node.kind != "prim::Constant":
            raise ValueError(f"%{self.name} is not a constant")
        return self.node.attrs.get("value")

    @property
    def is_constant(self) -> bool:
        return self.node is not None and self.node.kind == "prim::Constant"

    @property
    def is_profiled_constant(self) -> bool:
        """Every profiling run saw the same value (``profiled``)."""
        return self.profiled is not UNPROFILED and self.profiled is not VARIED

    def returned(self) -> bool:
        """Whether the block that makes this value, or a block around it, returns it."""
        b = self.node.owner if self.node is not None else None
        while b is not None:
            if self in b.returns:
                return True
            b = b.owner.owner if b.owner is not None else None
        return False


class Node:
    """One operation. ``attrs`` hold constant attributes (``value``, ``types``, ``cache_id`` ...)."""

    __slots__ = ("kind", "inputs", "outputs", "attrs", "blocks", "subgraph", "source", "owner", "schema", "__weakref__")

    def __init__(self, kind: str, attrs: Optional[dict[str, Any]] = None, source: Optional[str] = None):
        self.kind = kind
        self.inputs: list[Value] = []
        self.outputs: list[Value] = []
        self.attrs: dict[str, Any] = dict(attrs or {})
        self.blocks: list[Block] = []
        self.subgraph: Optional[Graph] = None
        self.source = source      # "file.py:6:8", printed as a trailing comment
        self.owner: Optional[Block] = None
        self.schema: Any = None   # how the host program calls it (executor.builtins.AtenCall); not printed

    def __repr__(self) -> str:
        return f"<Node {self.kind}({', '.join(map(repr, self.inputs))})>"

    @property
    def output(self) -> Value:
        assert len(self.outputs) == 1, f"{self.kind} has {len(self.outputs)} outputs"
        return self.outputs[0]

    def add_input(self, v: Value) -> None:
        v.uses.append((self, len(self.inputs)))
        self.inputs.append(v)

    def replace_input(self, i: int, v: Value) -> None:
        old = self.inputs[i]
        old.uses.remove((self, i))
        v.uses.append((self, i))
        self.inputs[i] = v

    def drop_inputs(self) -> None:
        for i, v in enumerate(self.inputs):
            v.uses.remove((self, i))
        self.inputs = []

    def add_block(self) -> "Block":
        b = Block(self.owner.graph if self.owner else None, owner=self)
        self.blocks.append(b)
        return b

    def where(self) -> str:
        return f"{self.kind}" + (f" at {self.source}" if self.source else "")

    def nested_returns(self) -> list[Value]:
        """Values returned by the blocks nested in this node, at any depth.

        Block returns are not uses (``Value.uses``), yet they read values of enclosing blocks:
        a pass that moves or replaces a value must look here too.
        """
        out: list[Value] = []
        for b in self.blocks:
            out += b.returns
            for n in b.nodes:
                out += n.nested_returns()
        return out


class Block:
    """Parameters, an ordered list of nodes and returns."""

    def __init__(self, graph: Optional["Graph"], owner: Optional[Node] = None) -> None:
        self.graph = graph
        self.owner = owner
        self.params: list[Value] = []
        self.nodes: list[Node] = []
        self.returns: list[Value] = []

    def add_param(self, name: str, type_: Type = TENSOR) -> Value:
        v = Value(self.graph.fresh_name(name), type_, block=self)
        self.params.append(v)
        return v

    def append(self, node: Node) -> Node:
        node.owner = self
        self.nodes.append(node)
        return node

    def insert_before(self, anchor: Node, node: Node) -> Node:
        node.owner = self
        self.nodes.insert(self.nodes.index(anchor), node)
        return node

    def insert_after(self, anchor: Node, node: Node) -> Node:
        node.owner = self
        self.nodes.insert(self.nodes.index(anchor) + 1, node)
        return node

    def remove(self, node: Node) -> None:
        node.drop_inputs()
        self.nodes.remove(node)
        node.owner = None

    def returned_within(self, v: Value) -> bool:
        """Whether a block nested in one of this block's nodes, at any depth, returns ``v`` (a
        read that ``Value.uses`` does not list). Only nodes with blocks are asked: passes ask
        this once per candidate value, and a model's graph has thousands of nodes, few of them
        with blocks."""
        return any(v in n.nested_returns() for n in self.nodes if n.blocks)

    def replace_return(self, old: Value, new: Value) -> None:
        if old in self.returns:     # Values compare by identity
            self.returns = [new if r is old else r for r in self.returns]

    def replace_return_everywhere(self, old: Value, new: Value) -> None:
        """``replace_return`` on this block and on every block nested in its nodes."""
        self.replace_return(old, new)
        for n in self.nodes:
            for b in n.blocks:
                b.replace_return_everywhere(old, new)


class Graph:
    """A function: one top-level block plus a name table for unique value names."""

    def __init__(self) -> None:
        self._names: set[str] = set()
        self._counter = 0
        self._suffix: dict[str, int] = {}      # the next ".k" to try per base name (no rescans from 1)
        self.block = Block(self)

    # -- construction ------------------------------------------------------------------
    def fresh_name(self, hint: Optional[str] = None) -> str:
        if hint is not None and hint.isdigit() and hint not in self._names:
            self._names.add(hint)
            return hint
        if hint is None or hint == "" or hint.isdigit():
            while True:
                self._counter += 1
                if str(self._counter) not in self._names:
                    name = str(self._counter)
                    break
        else:
            name = hint
            if name in self._names:
                base = name.rsplit(".", 1)[0] if "." in name and name.rsplit(".", 1)[1].isdigit() else name
                k = self._suffix.get(base, 1)
                while f"{base}.{k}" in self._names:
                    k += 1
                self._suffix[base] = k + 1
                name = f"{base}.{k}"
        self._names.add(name)
        return name

    def add_input(self, name: Optional[str] = None, type_: Type = TENSOR) -> Value:
        return self.block.add_param(name, type_)

    def create(self, kind: str, inputs: list[Value], out_types: list[Type],
               attrs: Optional[dict[str, Any]] = None, source: Optional[str] = None,
               out_names: Optional[list[Optional[str]]] = None) -> Node:
        """A new node (not yet inserted into a block)."""
        node = Node(kind, attrs, source)
        for v in inputs:
            node.add_input(v)
        names = out_names or [None] * len(out_types)
        for t, nm in zip(out_types, names):
            node.outputs.append(Value(self.fresh_name(nm), t, node=node))
        return node

    def constant(self, value: Any, type_: Type, block: Optional[Block] = None,
                 before: Optional[Node] = None) -> Value:
        node = self.create("prim::Constant", [], [type_], {} if value is None else {"value": value})
        blk = block or self.block
        if before is not None:
            blk.insert_before(before, node)
        else:
            blk.nodes.insert(0, node)
            node.owner = blk
        return node.output

    # -- access --------------------------------------------------------------------------
    @property
    def inputs(self) -> list[Value]:
        return self.block.params

    @property
    def outputs(self) -> list[Value]:
        return self.block.returns

    def nodes(self) -> Iterator[Node]:
        return iter(list(self.block.nodes))

    def all_nodes(self, block: Optional[Block] = None) -> Iterator[Node]:
        """Every node, depth first through nested blocks (not into subgraphs)."""
        for n in list((block or self.block).nodes):
            yield n
            for b in n.blocks:
                yield from self.all_nodes(b)

    def __str__(self) -> str:
        from .printer import print_graph

        return print_graph(self)

    def copy(self) -> "Graph":
        """A deep copy, via the printer and parser-free cloner."""
        from .clone import clone_graph

        return clone_graph(self)
