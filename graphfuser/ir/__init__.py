"""The IR: Graph / Block / Node / Value, types, TorchScript-syntax printer and parser, verify()."""
from .clone import clone_graph, clone_node
from .graph import SUBGRAPH_KINDS, Block, Graph, Node, Value
from .parser import ParseError, parse_graph, parse_type
from .printer import print_graph
from .types import BOOL, DTYPE_NAMES, FLOAT, INT, NONE, STR, TENSOR, TensorType, Type, layout_of
from .verify import VerifyError, verify

__all__ = [
    "Block", "Graph", "Node", "Value", "Type", "TensorType", "TENSOR", "INT", "FLOAT", "BOOL", "STR",
    "NONE", "DTYPE_NAMES", "SUBGRAPH_KINDS", "parse_graph", "parse_type", "print_graph", "verify",
    "VerifyError", "ParseError", "clone_graph", "clone_node", "layout_of",
]
