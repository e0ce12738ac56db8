"""Deep copies of graphs and blocks, and copying nodes across graphs with a value map."""
from __future__ import annotations

from typing import Optional

from .graph import Block, Graph, Node, Value


def clone_node(node: Node, graph: Graph, value_map: dict[Value, Value],
               block: Optional[Block] = None) -> Node:
    """Copy ``node`` into ``graph`` (inputs looked up in ``value_map``, outputs added to it)."""
    new = graph.create(node.kind, [value_map[v] for v in node.inputs], [o.type for o in node.outputs],
                       dict(node.attrs), node.source, [o.name for o in node.outputs])
    new.schema = node.schema
    for old_out, new_out in zip(node.outputs, new.outputs):
        value_map[old_out] = new_out
    if block is not None:
        block.append(new)
    for b in node.blocks:
        nb = Block(graph, owner=new)
        new.blocks.append(nb)
        clone_block_into(b, nb, graph, value_map)
    if node.subgraph is not None:
        new.subgraph = clone_graph(node.subgraph)
    return new


def clone_block_into(src: Block, dst: Block, graph: Graph, value_map: dict[Value, Value]) -> None:
    for p in src.params:
        value_map[p] = dst.add_param(p.name, p.type)
    for n in src.nodes:
        clone_node(n, graph, value_map, dst)
    dst.returns = [value_map[r] for r in src.returns]


def clone_graph(g: Graph) -> Graph:
    new = Graph()
    clone_block_into(g.block, new.block, new, {})
    return new
