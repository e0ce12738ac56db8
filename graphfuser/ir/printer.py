"""Print a Graph in TorchScript's syntax.

::

    graph(%x.1 : Float(2, 3, strides=[3, 1], requires_grad=0, device=cpu)):
      %1 : int = prim::Constant[value=1]()
      %12 : bool = prim::CpuFusionGuard[types=[Float(2, 3, ...)]](%x.1)
      %11 : Tensor = prim::If(%12)
        block0():
          %o.8 : Tensor = prim::CpuFusionGroup_0[cache_id=0](%x.1)
          -> (%o.8)
        block1():
          %o.7 : Tensor = prim::FallbackGraph_1(%x.1)
          -> (%o.7)
      return (%11)
    with prim::CpuFusionGroup_0 = graph(%2 : Float(...)):
      ...

Subgraph-holding nodes are numbered in order of appearance (``_0``, ``_1`` ...), and their
subgraphs follow the main graph in ``with`` sections, exactly as TorchScript prints them.
"""
from __future__ import annotations

from typing import Any

import torch

from .graph import Block, Graph, Node, Value
from .types import Type


# One line per node: newlines, tabs, quotes and backslashes in strings are escaped.
_STR_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def format_float(x: float) -> str:
    if x != x:
        return "nan"
    if x in (float("inf"), float("-inf")):
        return "inf" if x > 0 else "-inf"
    r = repr(float(x))
    return r[:-1] if r.endswith(".0") else r


def format_attr(value: Any, type_: Type | None = None) -> str:
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, float):
        return format_float(value)
    if isinstance(value, str):
        return '"' + "".join(_STR_ESCAPES.get(ch, ch) for ch in value) + '"'
    if isinstance(value, torch.device):
        return f'"{value}"'
    if isinstance(value, torch.dtype):
        from .types import DTYPE_NAMES

        return DTYPE_NAMES.get(value, str(value))
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_attr(v) for v in value) + "]"
    if isinstance(value, Type):
        return str(value)
    if isinstance(value, torch.Tensor):
        return "<Tensor>"
    return str(value)


# Extra text after a subgraph node's ``with`` section: callables (node, printed name) -> text or
# None. graphfuser.autodiff adds the prim::DifferentiableGraph of a group that runs under grad.
SECTION_HOOKS: list = []


class _Printer:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.subgraphs: list[tuple[str, Graph]] = []
        self.sub_nodes: list[Node] = []
        self.sub_names: dict[int, str] = {}

    def kind_name(self, node: Node) -> str:
        if node.subgraph is None:
            return node.kind
        key = id(node)
        if key not in self.sub_names:
            name = f"{node.kind}_{len(self.subgraphs)}"
            self.sub_names[key] = name
            self.subgraphs.append((name, node.subgraph))
            self.sub_nodes.append(node)
        return self.sub_names[key]

    def node(self, node: Node, indent: int) -> None:
        pad = "  " * indent
        outs = ", ".join(f"%{o.name} : {o.type}" for o in node.outputs)
        attrs = ""
        if node.attrs:
            attrs = "[" + ", ".join(f"{k}={format_attr(v)}" for k, v in node.attrs.items()) + "]"
        ins = ", ".join(f"%{v.name}" for v in node.inputs)
        lhs = f"{outs} = " if outs else " = "
        comment = f" # {node.source}" if node.source else ""
        self.lines.append(f"{pad}{lhs}{self.kind_name(node)}{attrs}({ins}){comment}")
        for i, b in enumerate(node.blocks):
            params = ", ".join(f"%{p.name} : {p.type}" for p in b.params)
            self.lines.append(f"{pad}  block{i}({params}):")
            self.block_body(b, indent + 2)
            self.lines.append(f"{pad}    -> ({', '.join('%' + r.name for r in b.returns)})")

    def block_body(self, block: Block, indent: int) -> None:
        for n in block.nodes:
            self.node(n, indent)

    def graph(self, g: Graph, header: str = "graph", indent: int = 0) -> None:
        pad = "  " * indent
        params = [f"%{p.name} : {p.type}" for p in g.inputs]
        lead = f"{pad}{header}("
        self.lines.append(lead + (",\n" + " " * len(lead)).join(params) + "):")
        self.block_body(g.block, indent + 1)
        self.lines.append(f"{pad}  return ({', '.join('%' + r.name for r in g.outputs)})")


def print_graph(g: Graph) -> str:
    p = _Printer()
    p.graph(g)
    done = 0
    while done < len(p.subgraphs):
        name, sub = p.subgraphs[done]
        done += 1
        p.graph(sub, header=f"with {name} = graph")
        for hook in SECTION_HOOKS:
            extra = hook(p.sub_nodes[done - 1], name)
            if extra:
                p.lines.extend(extra.rstrip("\n").splitlines())
    return "\n".join(p.lines) + "\n"


def value_ref(v: Value) -> str:
    return f"%{v.name}"
