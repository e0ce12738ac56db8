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
(2 x numel x itemsize bytes). Saving wins only for a value whose recomputation reads more
bytes than the value itself (a reduction over a large extent feeding a small result): a training
batch norm's per-channel statistics are saved (``saved.py``, the ``saved`` outputs below); other
such values (layer norm's per-row statistics, whose row the backward reads once anyway) are
recomputed.
Dead recomputations (forward values no formula uses) are removed by the pipeline's dce.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union

import torch

from ..config import config
from ..ir.graph import Graph, Value
from ..ir.types import TENSOR, TensorType, Type
from ..ops import bind, lookup
from ..ops.reduction import ReductionRow, scalar_type_code
from ..passes import dce
from ..ops.derivatives import DERIVATIVES, NON_DIFFERENTIABLE, REBUILDS, ZERO, Exact

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_TO_DTYPE = ("aten::to.dtype(Tensor(a) self, ScalarType dtype, bool non_blocking=False, bool copy=False, "
             "MemoryFormat? memory_format=None) -> Tensor(a)")


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


_COMPARISONS = frozenset({"aten::eq", "aten::ne", "aten::gt", "aten::ge", "aten::lt", "aten::le"})
_VIEWS = frozenset({"aten::unsqueeze", "aten::view", "aten::expand_as", "aten::expand"})


class D:
    """Emits aten nodes into the backward graph; what derivative formulas call."""

    def __init__(self, graph: Graph) -> None:
        self.g = graph
        self.row = ""
        self._consts: dict[tuple, Value] = {}
        self.ftypes: dict[Value, Type] = {}     # backward value -> profiled type of its forward value
        self.pats: dict[Value, Optional[tuple]] = {}   # backward value -> size-1 pattern (see pattern)
        # recomputed fp16 / bf16 forward values, which a fused kernel keeps in fp32 where eager
        # stored them rounded: a comparison reads them rounded (``stored``), so masks and ties
        # (amax's, maximum's, relu's) fall where eager's do
        self.rounded: dict[Value, torch.dtype] = {}
        self._stored: dict[Value, Value] = {}
        self._block = graph.block      # where ``op`` appends (a branch of ``branch`` while it runs)
        self._views: dict[tuple, Value] = {}

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
        if kind in _COMPARISONS:
            args = tuple(self.stored(a) for a in args)
        ins = [self._in(a) for a in args]
        # a view of the same value made twice (a batch norm's weight as [C, 1, 1] for the
        # rebuilt output and for the gradient) is one node: each runs on the host, outside the
        # kernels
        key = (kind, *ins) if kind in _VIEWS and self._block is self.g.block else None
        if key is not None and key in self._views:
            return self._views[key]
        node = self.g.create(kind, ins, [out])
        self._block.append(node)
        if kind in _VIEWS and args and args[0] in self.rounded:
            self.rounded[node.output] = self.rounded[args[0]]
        if key is not None:
            self._views[key] = node.output
        return node.output

    def branch(self, cond: Value, then: Callable[[], Value], other: Callable[[], Value]) -> Value:
        """``prim::If(cond)`` with one tensor output: ``then()`` and ``other()`` emit their nodes
        into the two blocks and return each block's value. A formula whose eager form takes a
        data-dependent path (``prod_backward``'s zero check) keeps the common path fused and runs
        the other only when it is taken."""
        node = self.g.create("prim::If", [cond], [TENSOR])
        self._block.append(node)
        outer, stored = self._block, dict(self._stored)
        for emit in (then, other):
            self._block = node.add_block()
            try:
                self._block.returns = [self._in(emit())]
            finally:
                # a value made inside the block is not visible after it
                self._block, self._stored = outer, dict(stored)
        return node.output

    def stored(self, v: Any) -> Any:
        """``v`` as eager stored it: a recomputed fp16 / bf16 value rounded to its dtype."""
        dt = self.rounded.get(v) if isinstance(v, Value) else None
        if dt is None:
            return v
        if v not in self._stored:
            r = self.to(self.to(v, torch.float32), dt)
            self._stored[v] = r
        return self._stored[v]

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

    def to(self, v: Value, dtype: torch.dtype) -> Value:
        """``v.to(dtype)``. A cast forward value keeps its forward type in ``ftypes`` (its rank and
        broadcast pattern, and the dtype eager's defaults read, such as RMSNorm's eps)."""
        from ..ops.aten import resolve_aten

        r = self.op("aten::to", v, scalar_type_code(dtype), False, False)
        r.node.schema = resolve_aten("aten::to", _TO_DTYPE)
        if v in self.ftypes:
            self.ftypes[r] = self.ftypes[v]
        return r

    def rank(self, v: Value) -> int:
        """Rank of a recomputed forward value (from profiling)."""
        return self.ftypes[v].rank

    def expand_like(self, g: Value, x: Value) -> Value:
        """``g`` as the gradient of ``x``. Where ``g``'s broadcast pattern is known it is returned
        as it is, narrower than ``x``: pointwise formulas downstream broadcast it for free, and the
        builder expands what is left narrow only where it must (``broadcast``). Otherwise it is
        broadcast now."""
        p, px = self.pattern(g), self.pattern(x)
        if isinstance(g, Value) and p is not None and px is not None and len(p) == len(px):
            return g
        return self.broadcast(g, x)        # (a number is never a tensor, even for a 0-dim x)

    def broadcast(self, g: Value, x: Value) -> Value:
        """``g`` broadcast to ``x``'s shape as a fusible pointwise op: ``where(x == x, g, g)``."""
        return self.where(self.op("aten::eq", x, x), g, g)

    def pattern(self, v: Value) -> Optional[tuple]:
        """The size-1 pattern of backward value ``v`` (one bool per dim; ``()`` for scalars), or
        None where it cannot be told. Forward values and output gradients have their profiled
        pattern; pointwise nodes broadcast their inputs'; ``sum(keepdim=True)``, ``unsqueeze``, a
        [C] -> [C, 1, ...] ``view`` and ``sum_to_size`` are followed; anything else is unknown."""
        if not isinstance(v, Value):
            return ()       # a Python number: a scalar
        if v in self.pats:
            return self.pats[v]
        if v in self.ftypes:
            p = _pattern(self.ftypes[v]) if isinstance(self.ftypes[v], TensorType) else ()
        elif v.node is None:
            p = None
        else:
            p = self._node_pattern(v.node)
        self.pats[v] = p
        return p

    def _node_pattern(self, n) -> Optional[tuple]:
        kind = n.kind
        if kind in ("prim::Constant", "aten::size", "aten::numel", "prim::ListConstruct"):
            return ()
        if kind in ("aten::type_as", "aten::to"):
            return self.pattern(n.inputs[0])
        if kind == "aten::unsqueeze":
            p, dim = self.pattern(n.inputs[0]), n.inputs[1]
            if p is None or not dim.is_constant:
                return None
            d = dim.constant() % (len(p) + 1)
            return p[:d] + (True,) + p[d:]
        if kind == "aten::view":          # a [C] tensor viewed as [C, 1, ...] (a per-channel parameter)
            p, size = self.pattern(n.inputs[0]), n.inputs[1]
            sizes = size.constant() if size.is_constant else None
            if p is None or len(p) != 1 or not sizes or list(sizes) != [-1] + [1] * (len(sizes) - 1):
                return None
            return p + (True,) * (len(sizes) - 1)
        if kind == "aten::sum_to_size":
            size = n.inputs[1].node
            return self.pattern(size.inputs[0]) if size is not None and size.kind == "aten::size" else None
        row = lookup(kind)
        if isinstance(row, ReductionRow) and "dim" in row.arg_names and "keepdim" in row.arg_names:
            return self._reduction_pattern(row, n)
        if row is None or row.kind not in ("pointwise", "cast"):
            return None
        out: Optional[tuple] = ()
        for i in n.inputs:
            p = self.pattern(i)
            if p is None:
                return None
            out = _broadcast(out, p)
        return out

    def _reduction_pattern(self, row: ReductionRow, n) -> Optional[tuple]:
        """A reduction over constant dims (sum, mean, var, amax ...): its input's pattern with the
        reduced dims size 1 (keepdim) or removed. The recomputed statistics of a normalization
        (mean / var with keepdim) broadcast along the normalized dims, so their gradients stay
        known: no ``expand_as`` of a gradient that already has its input's shape."""
        args, consts, _ = bind(row, n)
        x = args.get(row.promote[0])
        p = self.pattern(x) if isinstance(x, Value) else None
        if p is None or "dim" not in consts or not isinstance(consts.get("keepdim"), bool):
            return None
        dims = consts["dim"]
        dims = range(len(p)) if dims is None or dims == [] else [dims] if isinstance(dims, int) else dims
        if not p:
            return ()
        red = {d % len(p) for d in dims}
        if consts["keepdim"]:
            return tuple(True if i in red else b for i, b in enumerate(p))
        return tuple(b for i, b in enumerate(p) if i not in red)

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


class NoInputGradient(str):
    """``plan_backward``'s reason where no input gets a formula's gradient; ``zero_inputs``: those
    that still get zeros (behind ops whose derivative is 0: ``round``, ``sign``), as eager's
    backward nodes give them."""
    zero_inputs: list[int]


def _broadcast(a: tuple, b: tuple) -> tuple:
    """Size-1 pattern of a broadcast of patterns ``a`` and ``b`` (right-aligned)."""
    n = max(len(a), len(b))
    a, b = (True,) * (n - len(a)) + a, (True,) * (n - len(b)) + b
    return tuple(x and y for x, y in zip(a, b))


def _fit(d: D, r: Value, inp: Value, out: Value, vmap: dict) -> Value:
    """Gradient ``r`` of node output ``out`` (in its shape, or narrower) as the gradient of input
    ``inp``: summed over the dims ``inp`` was broadcast along (``sum_to_size``); left narrow where
    ``r`` is constant along dims ``inp`` has (pointwise consumers broadcast it for free;
    ``plan_backward`` expands what is returned narrow, as a view)."""
    pr, pi = d.pattern(r), _pattern(inp.type)
    if pr is None or pi is None:
        if pi != _pattern(out.type):
            return d.op("aten::sum_to_size", r, d.op("aten::size", vmap[inp], out=Type("int[]")))
        return r
    n = max(len(pr), len(pi))
    ar, ai = (True,) * (n - len(pr)) + pr, (True,) * (n - len(pi)) + pi
    po = _pattern(out.type)
    ao = (True,) * (n - len(po)) + po if po is not None and len(po) <= n else None
    # narrow where ``inp`` was broadcast too, along a dim the output has: the gradient there is
    # the sum of r over that dim, n times r, not r (a split bias add before a mean over the
    # spatial dims got 1 / (H * W) of its gradient)
    spread = ao is None or any(x and y and not z for x, y, z in zip(ar, ai, ao))
    wider = len(pr) > len(pi) or any(not x and y for x, y in zip(ar, ai)) or spread and any(
        x and y for x, y in zip(ar, ai))
    if not wider:
        return r
    if spread and any(x and y for x, y in zip(ar, ai)) or any(x and not y for x, y in zip(ar, ai)):
        # wider in some dims, narrower in others, or narrow along a dim the output broadcast
        # ``inp`` over: r at the output's shape first
        r = d.broadcast(r, vmap[out])
    pr = d.pattern(r)
    if pr is not None and len(pr) == len(pi):
        # same rank: a keepdim sum over the dims ``inp`` has as 1, whose dims are constants; a
        # size list read from ``inp`` would tie the sum to the group computing ``inp`` (RMSNorm's
        # per-row sum of its rstd's gradient could not join the row kernel: a cycle)
        return d.op("aten::sum", r, [j for j in range(n) if pi[j] and not pr[j]], True)
    return d.op("aten::sum_to_size", r, d.op("aten::size", vmap[inp], out=Type("int[]")))


def plan_backward(sub: Graph, defined: Optional[frozenset] = None, saved: int = 0) -> Union[BackwardPlan, str]:
    """The backward of the forward subgraph ``sub``, or the reason there is none. ``defined``
    (group output positions) limits it to the outputs whose gradient is defined: the others
    contribute nothing, not zeros (TorchScript's AutogradZero specialization). ``saved``: the
    last outputs of ``sub`` are statistics the forward saves (``saved.py``); they follow the
    gradients as inputs of the backward graph, and the nodes that made them are rebuilt from
    them (``REBUILDS``) or, where they are a node's outputs as they are, taken as they are; either
    way not recomputed."""
    n_out = len(sub.outputs) - saved
    diff: set[Value] = {v for v in sub.inputs if isinstance(v.type, TensorType) and v.type.requires_grad
                        and _is_float_tensor(v)}
    for n in sub.block.nodes:
        if n.blocks:
            return f"{n.kind} has blocks"
        row = lookup(n.kind)
        if row is not None and row.name in NON_DIFFERENTIABLE:
            continue
        # outputs eager marks non-differentiable (native_layer_norm's mean and rstd) carry none
        only = getattr(DERIVATIVES.get(row.name) if row is not None else None, "differentiable_outputs", None)
        # an argument the row ignores carries no gradient: type_as's ``other`` gives a dtype only
        # (fuzz graph 760 of seed 33552: frac(x).type_as(y) required grad where y did)
        ins = n.inputs if row is None or not row.ignored else \
            [v for k, v in bind(row, n)[0].items() if k not in row.ignored and isinstance(v, Value)]
        if any(i in diff for i in ins):
            diff.update(o for k, o in enumerate(n.outputs) if _is_float_tensor(o) and (only is None or k in only))
    g = Graph()
    vmap: dict[Value, Value] = {}
    for v in sub.inputs:
        vmap[v] = g.add_input(v.name, TENSOR if v.type.is_tensor else v.type)
    diff_outputs = [k for k, o in enumerate(sub.outputs[:n_out]) if o in diff and (defined is None or k in defined)]
    if not diff_outputs:
        return NO_GRADIENT
    grads: dict[Value, Value] = {}
    d = D(g)
    emulate = bool(config.emulate_precision_casts)
    for k in diff_outputs:
        gv = g.add_input(f"grad_{k}", TENSOR)
        o = sub.outputs[k]
        d.pats[gv] = _pattern(o.type)
        grads[o] = d.add(grads[o], gv) if o in grads else gv
    for j, o in enumerate(sub.outputs[n_out:]):
        vmap[o] = g.add_input(f"saved_{j}", TENSOR)
        d.pats[vmap[o]] = _pattern(o.type)
    for n in sub.block.nodes:        # the forward, recomputed
        if n.outputs and all(o in vmap for o in n.outputs):
            continue                 # saved by the forward (a long row's reduction: saved.py)
        row = lookup(n.kind)
        if row is not None and row.name in REBUILDS and all(o in vmap for o in n.outputs[1:]):
            bound, _, _ = bind(row, n)
            args = {k: vmap[v] if isinstance(v, Value) else v for k, v in bound.items()}
            y = REBUILDS[row.name](d, args, [vmap.get(o) for o in n.outputs], n.inputs[0].type, n.outputs[0].type)
            vmap[n.outputs[0]] = y
            if n.outputs[0].type.dtype in (torch.float16, torch.bfloat16):
                d.rounded[y] = n.outputs[0].type.dtype
            continue
        nn = g.create(n.kind, [vmap[i] for i in n.inputs],
                      [TENSOR if o.type.is_tensor else o.type for o in n.outputs], dict(n.attrs), n.source)
        nn.schema = n.schema
        g.block.append(nn)
        vmap.update(zip(n.outputs, nn.outputs))
        for o, no in zip(n.outputs, nn.outputs):
            if isinstance(o.type, TensorType) and o.type.dtype in (torch.float16, torch.bfloat16):
                d.rounded[no] = o.type.dtype
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
        # reductions' formulas need the full gradient, and so do those that sum it (bias_grad)
        full = row.kind not in ("pointwise", "cast") or getattr(formula, "full_gradient", False)

        def widen(gout, out):
            return d.broadcast(gout, vmap[out]) if full and gout is not None and \
                d.pattern(gout) != _pattern(out.type) else gout
        if multi:       # a row with several outputs gets them all, None where no gradient flows
            res = formula(d, args, tuple(widen(grads.get(o), o) for o in n.outputs),
                          tuple(vmap[o] for o in n.outputs))
        else:
            res = formula(d, args, widen(grads[n.output], n.output), vmap[n.output])
        for name, inp in bound.items():
            if not isinstance(inp, Value) or inp not in diff or name in row.ignored:
                continue            # (type_as's / to's ``other`` only names a dtype: no gradient)
            if name not in res:
                return f"{row.name} has no derivative with respect to {name}"
            r = res[name]
            if r is ZERO:
                if inp in sub.inputs:
                    zero.add(inp)
                    continue
                # eager's zeros_like(grad) flows on: the producer's formula multiplies it, and
                # 0 * inf is NaN there (ceil(x * nan) gives x a NaN gradient in eager)
                r = d.expand_like(0.0, vmap[n.outputs[0]])
            if isinstance(r, Exact):        # already summed to the input's shape by the formula
                r = r.value
            elif reducing and name == data_arg:
                pass    # a reduction's formula returns its data argument's gradient in that shape
            else:
                r = _fit(d, r, inp, n.outputs[0], vmap)
            if emulate and isinstance(inp.type, TensorType) and inp.type.dtype in (torch.float16, torch.bfloat16):
                # emulate_precision_casts: each gradient an fp16 / bf16 value receives is
                # rounded to its dtype, as autograd's engine casts what a node returns (before
                # the sum of a value's several uses, which the kernel rounds too): a float16
                # mean's gradient overflows to inf where eager's does
                r = d.to(r, inp.type.dtype)
            grads[inp] = d.add(grads[inp], r) if inp in grads else r
    grad_inputs = [i for i, v in enumerate(sub.inputs) if v in diff and v in grads]
    # zeros for the inputs that reach an output with a gradient (through ops whose derivative is
    # 0: eager's backward nodes return zeros); the others get none, as eager never runs the
    # nodes behind outputs without a gradient (a group norm of NaN rows behind an unused output
    # would otherwise multiply a zero gradient into NaN: fuzz graph 306 of seed 11313)
    # Only through differentiable edges: a comparison's mask carries none (the x0 of
    # ``masked_fill(x1, x0 / 0 > 0, 2.0)`` gets no gradient in eager: fuzz graph 2277 of seed 12020),
    # nor an argument the row ignores (type_as's ``other``)
    def carries(v: Any) -> bool:
        return isinstance(v, Value) and (_is_float_tensor(v) or str(v.type) == "Tensor[]")

    reach = {sub.outputs[k] for k in diff_outputs}
    for n in reversed(list(sub.block.nodes)):
        if any(o in reach and carries(o) for o in n.outputs):
            row = lookup(n.kind)
            args = list(n.inputs) if row is None else \
                [v for k, v in bind(row, n)[0].items() if k not in row.ignored]
            reach.update(v for v in args if carries(v))
    zero_inputs = [i for i, v in enumerate(sub.inputs) if v in diff and v not in grads and v in reach]
    returns = []
    for i in grad_inputs:
        v, r = sub.inputs[i], grads[sub.inputs[i]]
        if isinstance(v.type, TensorType) and v.type.dtype in (torch.float16, torch.bfloat16) \
                and r.node is not None and r.node.kind not in ("aten::to", "aten::type_as"):
            # the gradient in its input's dtype, as autograd's engine casts what a node returns
            # (an fp16 / bf16 input promoted by an add with an fp32 one gets the fp32 gradient):
            # cast in the kernel, not by a copy after it (a no-op where it is already that dtype)
            r = d.to(r, v.type.dtype)
        if d.pattern(r) != _pattern(v.type):     # a gradient left narrow: expanded as a view, as eager's
            r = d.op("aten::expand_as", r, vmap[v])
        returns.append(r)
    g.block.returns = returns
    if not g.block.returns:
        answer = NoInputGradient("no input of the group receives a gradient")
        answer.zero_inputs = zero_inputs
        return answer
    dce(g)      # formulas build gradients for every argument; drop the unused ones now
    return BackwardPlan(g, diff_outputs, grad_inputs, zero_inputs)
