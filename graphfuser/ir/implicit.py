"""Number-typed values that may hold a tensor at run time.

TorchScript types ``True * t`` or ``s * t`` (``s: bool``) as number arithmetic: its schema matching
picks ``mul(int, int)`` and hands the tensor over through ``aten::IntImplicit`` (``FloatImplicit``,
``ScalarImplicit``). The Python program keeps the tensor, and eager's answer is the tensor's
arithmetic, so the host program keeps it too (``ops/aten._implicit``). Every number-typed value
computed from such a conversion may then be a tensor: the host program calls those nodes through
the op's packet (which picks the overload by the run-time types) and the partition fuses none of
them (a kernel's scalar argument is a number).
"""
from __future__ import annotations

from .graph import Graph, Node, Value

IMPLICIT_KINDS = frozenset({"aten::IntImplicit", "aten::FloatImplicit", "aten::ScalarImplicit",
                            "aten::ComplexImplicit"})


def implicit_tensors(graph: Graph) -> frozenset[Value]:
    """The number-typed values of ``graph`` an implicit conversion's tensor may reach: the
    conversions' outputs, every non-tensor output of a node that reads one, and the outputs of a
    control-flow node whose block returns one. Empty (and one scan) for graphs without them."""
    if not any(n.kind in IMPLICIT_KINDS for n in graph.all_nodes()):
        return frozenset()
    seen: set[Value] = set()
    changed = True
    while changed:                 # a loop-carried value can come back round: to a fixed point
        changed = False
        for n in graph.all_nodes():
            reached = n.kind in IMPLICIT_KINDS or any(v in seen for v in n.inputs) or \
                any(r in seen for b in n.blocks for r in b.returns)
            if not reached:
                continue
            for o in n.outputs:
                if not o.type.is_tensor and o not in seen:
                    seen.add(o)
                    changed = True
            for b in n.blocks:     # a loop's carried block parameters follow its inputs
                for p in b.params:
                    if not p.type.is_tensor and p not in seen and any(v in seen for v in n.inputs):
                        seen.add(p)
                        changed = True
    return frozenset(seen)


def reads_implicit_tensor(node: Node, tainted: frozenset[Value]) -> bool:
    """Does ``node`` read a value of ``implicit_tensors``?"""
    return bool(tainted) and any(v in tainted for v in node.inputs)
