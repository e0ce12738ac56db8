"""The backward graph of a fusion group, built from the op table's derivative column.

Given a group's subgraph (the forward), ``plan_backward`` builds a graph::

    graph(<the group's inputs>, <one gradient per differentiable output>):
      <the forward, recomputed>
      <each node's derivative formula, last node first, gradients accumulated with aten::add
       and summed back to each input's shape with aten::sum_to_size>
      return (<one gradient per input that requires grad and receives one>)

What the backward saves and what it recomputes (the rule, after AOTAutograd's min-cut
rematerialization): the forward writes only its outputs, and the autograd node keeps the
group's *inputs* (tensors the caller holds anyway, so saving them costs no memory traffic and
no memory). Every intermediate is recomputed inside the backward kernel. For a pointwise
group this is always the cheaper side of the cut: the derivative formulas read the inputs
anyway (or values computed from them), so recomputing an intermediate costs arithmetic only,
while saving it would cost one write in the forward and one read in the backward
(2 x numel x itemsize bytes). Saving would win only for a value whose recomputation reads more
bytes than the value itself (a reduction over a large extent feeding a small result); such
values are recomputed too for now, at the price of one extra read of the reduced input.
Dead recomputations (forward values no formula uses) are removed by the pipeline's dce.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Union

import torch

from ..ir.graph import Graph, Value
from ..ir.types import TENSOR, TensorType, Type
from ..ops import bind, lookup
from ..ops.reduction import ReductionRow
from ..passes import dce
from ..ops.derivatives import DERIVATIVES, NON_DIFFERENTIABLE, ZERO, Exact

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _scalar_type(v: Any) -> Type:
    if v is None:
        return Type("NoneType")
    if isinstance(v, bool):
        return Type("bool")
    if isinstance(v, int):
        return Type("int")
    if isinstance(v, float):
        return Type("float")
    if isinstance(v, str):
        return Type("str")
    if isinstance(v, list) and all(isinstance(i, int) for i in v):
        return Type("int[]")
    raise TypeError(f"no constant of type {type(v).__name__} in a backward graph")


class D:
    """Emits aten nodes into the backward graph; what derivative formulas call."""

    def __init__(self, graph: Graph) -> None:
        self.g = graph
        self.row = ""
        self._consts: dict[tuple, Value] = {}
        self.ftypes: dict[Value, Type] = {}     # backward value -> profiled type of its forward value

    @staticmethod
    def is_value(x: Any) -> bool:
        return isinstance(x, Value)

    def _in(self, x: Any) -> Value:
        if isinstance(x, Value):
            return x
        key = (type(x), tuple(x) if isinstance(x, list) else x)
        if key not in self._consts:
            self._consts[key] = self.g.constant(x, _scalar_type(x))
        return self._consts[key]

    def op(self, kind: str, *args: Any, out: Type = TENSOR) -> Value:
        node = self.g.create(kind, [self._in(a) for a in args], [out])
        self.g.block.append(node)
        return node.output

    def mul(self, a: Any, b: Any) -> Value:
        return self.op("aten::mul", a, b)

    def div(self, a: Any, b: Any) -> Value:
        return self.op("aten::div", a, b)

    def add(self, a: Any, b: Any) -> Value:
        return self.op("aten::add", a, b, 1)

    def sub(self, a: Any, b: Any) -> Value:
        return self.op("aten::sub", a, b, 1)

    def rsub(self, a: Any, b: Any) -> Value:
        """``b - a``."""
        return self.op("aten::rsub", a, b, 1)

    def neg(self, a: Any) -> Value:
        return self.op("aten::neg", a)

    def where(self, c: Any, a: Any, b: Any) -> Value:
        return self.op("aten::where", c, a, b)

    def rank(self, v: Value) -> int:
        """Rank of a recomputed forward value (from profiling)."""
        return self.ftypes[v].rank

    def expand_like(self, g: Value, x: Value) -> Value:
        """``g`` broadcast to ``x``'s shape as a fusible pointwise op: ``where(x == x, g, g)``."""
        return self.where(self.op("aten::eq", x, x), g, g)

    def restore_dims(self, g: Value, dims: Any, keepdim: bool, rank: int) -> Value:
        """A reduction's output gradient with its reduced dims back as size-1 dims."""
        if keepdim or dims is None or rank == 0:
            return g
        dims = [dims] if isinstance(dims, int) else list(dims)
        if not dims:
            return g
        for dim in sorted(x % rank for x in dims):
            g = self.op("aten::unsqueeze", g, dim)
        return g


@dataclass
class BackwardPlan:
    """The backward graph of a group and how its inputs and outputs line up with the group's."""

    graph: Graph
    diff_outputs: list[int]                 # group outputs that take a gradient
    grad_inputs: list[int]                  # group inputs (positions) whose gradient the graph returns
    zero_inputs: list[int] = field(default_factory=list)   # inputs whose gradient is zero


def _is_float_tensor(v: Value) -> bool:
    t = v.type
    return isinstance(t, TensorType) and (t.dtype is None or t.dtype in _FLOATS)


def _pattern(t: Type) -> Optional[tuple]:
    if not isinstance(t, TensorType) or t.sizes is None:
        return None
    return tuple(s == 1 for s in t.sizes)


# plan_backward's answer for a group none of whose outputs carries a gradient (every path from an
# input requiring grad goes through detach or a non-differentiable output): its forward kernel is
# all there is to run, as eager's outputs would not require grad either.
NO_GRADIENT = "no output of the group carries a gradient"


def plan_backward(sub: Graph) -> Union[BackwardPlan, str]:
    """The backward of the forward subgraph ``sub``, or the reason there is none."""
    diff: set[Value] = {v for v in sub.inputs if isinstance(v.type, TensorType) and v.type.requires_grad
                        and _is_float_tensor(v)}
    for n in sub.block.nodes:
        if n.blocks:
            return f"{n.kind} has blocks"
        row = lookup(n.kind)
        if row is not None and row.name in NON_DIFFERENTIABLE:
            continue
        if any(i in diff for i in n.inputs):
            diff.update(o for o in n.outputs if _is_float_tensor(o))
    g = Graph()
    vmap: dict[Value, Value] = {}
    for v in sub.inputs:
        vmap[v] = g.add_input(v.name, TENSOR if v.type.is_tensor else v.type)
    diff_outputs = [k for k, o in enumerate(sub.outputs) if o in diff]
    if not diff_outputs:
        return NO_GRADIENT
    grads: dict[Value, Value] = {}
    d = D(g)
    for k in diff_outputs:
        gv = g.add_input(f"grad_{k}", TENSOR)
        o = sub.outputs[k]
        grads[o] = d.add(grads[o], gv) if o in grads else gv
    for n in sub.block.nodes:        # the forward, recomputed
        nn = g.create(n.kind, [vmap[i] for i in n.inputs],
                      [TENSOR if o.type.is_tensor else o.type for o in n.outputs], dict(n.attrs), n.source)
        nn.schema = n.schema
        g.block.append(nn)
        vmap.update(zip(n.outputs, nn.outputs))
    for v, bv in vmap.items():
        d.ftypes[bv] = v.type
    zero: set[Value] = set()
    for n in reversed(list(sub.block.nodes)):
        outs = [o for o in n.outputs if o in grads]
        if not outs:
            continue
        row = lookup(n.kind)
        formula = DERIVATIVES.get(row.name) if row is not None else None
        multi = getattr(formula, "multi_output", False)
        if formula is None or (len(n.outputs) != 1 and not multi):
            return f"{n.kind} has no derivative formula in the op table"
        bound, _, _ = bind(row, n)
        args = {k: vmap[v] if isinstance(v, Value) else v for k, v in bound.items()}
        d.row = row.name
        reducing, data_arg = isinstance(row, ReductionRow), row.promote[0]
        if multi:       # a row with several outputs gets them all, None where no gradient flows
            res = formula(d, args, tuple(grads.get(o) for o in n.outputs), tuple(vmap[o] for o in n.outputs))
        else:
            res = formula(d, args, grads[n.output], vmap[n.output])
        for name, inp in bound.items():
            if not isinstance(inp, Value) or inp not in diff:
                continue
            if name not in res:
                return f"{row.name} has no derivative with respect to {name}"
            r = res[name]
            if r is ZERO:
                zero.add(inp)
                continue
            if isinstance(r, Exact):        # already summed to the input's shape by the formula
                r = r.value
            elif reducing and name == data_arg:
                pass    # a reduction's formula returns its data argument's gradient in that shape
            elif _pattern(inp.type) != _pattern(n.outputs[0].type):
                size = d.op("aten::size", vmap[inp], out=Type("int[]"))
                r = d.op("aten::sum_to_size", r, size)
            grads[inp] = d.add(grads[inp], r) if inp in grads else r
    grad_inputs = [i for i, v in enumerate(sub.inputs) if v in diff and v in grads]
    zero_inputs = [i for i, v in enumerate(sub.inputs) if v in diff and v not in grads]
    g.block.returns = [grads[sub.inputs[i]] for i in grad_inputs]
    if not g.block.returns:
        return "no input of the group receives a gradient"
    dce(g)      # formulas build gradients for every argument; drop the unused ones now
    return BackwardPlan(g, diff_outputs, grad_inputs, zero_inputs)
