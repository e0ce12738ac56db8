"""Capture: a torch-level FX graph (what Dynamo hands a backend) converted to graphfuser's IR.

Every FX call that has an aten spelling (``frontend/fx_ops.py``) becomes the node TorchScript
would have made for it: ``aten::<name>`` with its overload's schema, the arguments in schema
order, defaults filled in as constants, dtypes as ScalarType codes. From there it is the same
pipeline as a scripted function: profiling, partition, guards, codegen, caches.

Basic indexing (``x[:, :t, None]``) becomes TorchScript's views (``aten::slice`` / ``select`` /
``unsqueeze``). Whatever has no aten spelling (advanced indexing ``x[mask]``, a higher-order op,
arithmetic on symbolic sizes, ``x[i] = v``, grad mode and autocast switches) becomes a
``prim::PythonOp`` that the host program calls exactly as the FX graph would: it runs, unfused.
A call that may write a tensor or change global state is marked with effects, and nothing is
moved across it.

Why Dynamo's torch-level graphs and not AOTAutograd's ATen graphs: ``frontend/dynamo.py``
(training through graphfuser's own differentiable groups, the op vocabulary of TorchScript's
graphs, no second trace, the user's graph as written).

Placeholders are graph inputs, read from each call's arguments: parameters and buffers too
(Dynamo passes them in), and symbolic sizes (``SymInt`` placeholders) as run-time ints, never
specialized here.
"""
from __future__ import annotations

import operator
import os
import re
from typing import Any, Optional

import torch
import torch.fx

from ..executor.handlers import PyArg, PyCall
from ..executor.source import Captured, UnsupportedError
from ..ir.graph import Graph, Value
from ..ir.types import BOOL, FLOAT, INT, NONE, STR, TENSOR, Type
from ..ops.aten import DTYPE_CODES, resolve_aten
from .fx_losses import cross_entropy_rows, takes_rows
from .fx_ops import DEFAULT, aten_call, match_schema

_MEMORY_FORMATS = {torch.contiguous_format: 0, torch.preserve_format: 1, torch.channels_last: 2,
                   torch.channels_last_3d: 3}
_LAYOUTS = {torch.strided: 0, torch.sparse_coo: 1}
ANY = Type("Any")
UNKNOWN = object()      # the example value of an FX node without one: no schema fits it, type Any
# Python calls that change what the calls after them compute: nothing moves across them
_STATEFUL = {operator.setitem, operator.delitem, torch._C._set_grad_enabled, torch.manual_seed}
_STATEFUL_NAMES = ("_enter_autocast", "_exit_autocast", "set_grad_enabled", "_set_grad_enabled", "manual_seed",
                   "set_rng_state", "_foreach_")
_PURE_METHODS = frozenset({"size", "dim", "stride", "numel", "contiguous", "__getitem__", "view", "reshape",
                           "tolist", "item", "element_size", "is_contiguous"})
_STACK_RE = re.compile(r'File "([^"]+)", line (\d+)')


def type_of(x: Any) -> Type:
    """The IR type of an example value."""
    if isinstance(x, torch.Tensor):
        return TENSOR
    if isinstance(x, (bool, torch.SymBool)):
        return BOOL
    if isinstance(x, (int, torch.SymInt)):
        return INT
    if isinstance(x, (float, torch.SymFloat)):
        return FLOAT
    if x is None:
        return NONE
    if isinstance(x, str):
        return STR
    if isinstance(x, (list, tuple)) and x:
        items = {type_of(i).name for i in x}
        if len(items) == 1:
            return Type(items.pop() + "[]")
        if items <= {"Tensor", "NoneType"}:
            return Type("Tensor?[]")
    return ANY


def _code(x: Any) -> Any:
    """TorchScript's int code of a dtype, memory format or layout; anything else as it is."""
    if isinstance(x, torch.dtype):
        return DTYPE_CODES[x]
    if isinstance(x, torch.memory_format):
        return _MEMORY_FORMATS[x]
    if isinstance(x, torch.layout):
        return _LAYOUTS[x]
    return x


def _source(node: torch.fx.Node) -> Optional[str]:
    found = _STACK_RE.findall(node.meta.get("stack_trace") or "")
    if not found:
        return None
    path, line = found[-1]
    return f"{os.path.basename(path)}:{line}"


def _effects(op: str, target: Any) -> bool:
    if op == "call_method":
        if target.startswith("__") and target.endswith("__"):
            # Python's operators: only the in-place ones (``__iadd__``, ``__ior__``) and item
            # writes change anything; ``__eq__`` of HF's masks is a pure comparison
            return target.startswith("__i") and target not in ("__index__", "__invert__") \
                or target in ("__setitem__", "__delitem__")
        return target.endswith("_") and target not in _PURE_METHODS or target == "copy_"
    if op == "call_module":
        return True
    if target in _STATEFUL or isinstance(target, torch._ops.HigherOrderOperator):
        return True
    name = getattr(target, "__name__", "") or ""
    if any(s in name for s in _STATEFUL_NAMES):
        return True
    if isinstance(target, torch._ops.OpOverload):
        return target._schema.is_mutable
    module = getattr(target, "__module__", "") or ""
    return name.endswith("_") and not name.endswith("__") and (module.startswith("torch") or name.startswith("i"))


class _Converter:
    def __init__(self, gm: torch.fx.GraphModule) -> None:
        self.gm = gm
        self.g = Graph()
        self.values: dict[torch.fx.Node, Value] = {}
        self.outputs: dict[torch.fx.Node, list[Value]] = {}    # an aten node with several returns

    # -- values ------------------------------------------------------------------------------
    def example(self, x: Any) -> Any:
        if isinstance(x, torch.fx.Node):
            return x.meta.get("example_value", x.meta.get("val", UNKNOWN))
        if isinstance(x, (list, tuple)):      # FX's immutable_list, torch.Size of nodes included
            return (tuple if isinstance(x, tuple) else list)(self.example(i) for i in x)
        if isinstance(x, slice):
            return slice(self.example(x.start), self.example(x.stop), self.example(x.step))
        return x

    def value(self, x: torch.fx.Node) -> Value:
        v = self.values.get(x)
        if v is None:
            outs = self.outputs[x]
            node = self.g.create("prim::TupleConstruct", outs, [ANY])
            self.g.block.append(node)
            v = self.values[x] = node.output
        return v

    def constant(self, value: Any, type_: Optional[Type] = None) -> Value:
        value = _code(value)
        if isinstance(value, tuple):
            value = list(value)
        node = self.g.create("prim::Constant", [], [type_ or type_of(value)], {} if value is None else {"value": value})
        self.g.block.append(node)
        return node.output

    def argument(self, arg: Any, x: Any) -> Value:
        """The IR value for schema argument ``arg`` given ``x`` (an FX node, a constant, a list)."""
        t = arg.type
        if t.kind() == "OptionalType" and x is not None and x is not DEFAULT:
            t = t.getElementType()
        if x is DEFAULT:
            x = arg.default_value
        if t.kind() == "ListType" and not isinstance(x, (list, tuple, torch.fx.Node)) and x is not None:
            x = [x]                                   # an int[1] given one int
        if isinstance(x, torch.fx.Node):
            v = self.value(x)
            if t.kind() == "ListType" and v.type in (INT, FLOAT, BOOL):
                return self.list_of([v], t)             # an int[1] given one symbolic int
            return v
        if isinstance(x, (list, tuple)):
            if any(isinstance(i, torch.fx.Node) for i in x):
                items = [self.value(i) if isinstance(i, torch.fx.Node) else self.constant(self._as(i, t))
                         for i in x]
                return self.list_of(items, t)
            return self.constant([self._as(i, t) for i in x], Type(_list_type(t)))
        if t.kind() == "FloatType" and isinstance(x, int) and not isinstance(x, bool):
            x = float(x)
        if t.kind() == "DeviceObjType" and isinstance(x, str):
            x = torch.device(x)
        if isinstance(x, torch.device):
            return self.constant(x, Type("Device"))
        return self.constant(x)

    @staticmethod
    def _as(i: Any, t: Any) -> Any:
        elem = t.getElementType() if t.kind() == "ListType" else t
        if elem.kind() == "FloatType" and isinstance(i, int) and not isinstance(i, bool):
            return float(i)
        return _code(i)

    def list_of(self, items: list[Value], t: Any) -> Value:
        node = self.g.create("prim::ListConstruct", items, [Type(_list_type(t))])
        self.g.block.append(node)
        return node.output

    # -- nodes -------------------------------------------------------------------------------
    def convert(self) -> Graph:
        for n in self.gm.graph.nodes:
            if n.op == "placeholder":
                ex = self.example(n)
                self.values[n] = self.g.add_input(_param_name(n.name), type_of(ex))
            elif n.op == "output":
                outs = n.args[0]
                if isinstance(outs, (list, tuple)):
                    items = [self._operand(o) for o in outs]
                    tup = self.g.create("prim::TupleConstruct", items, [ANY])
                    self.g.block.append(tup)
                    self.g.block.returns = [tup.output]
                else:
                    self.g.block.returns = [self._operand(outs)]
            elif n.op == "get_attr":
                self.values[n] = self.constant(_fetch_attr(self.gm, n.target), ANY)
            elif n.op == "call_function" and n.target is operator.getitem and n.args[0] in self.outputs \
                    and isinstance(n.args[1], int):
                self.values[n] = self.outputs[n.args[0]][n.args[1]]
            else:
                self.call(n)
        return self.g

    def _operand(self, x: Any) -> Value:
        if isinstance(x, torch.fx.Node):
            return self.value(x)
        if isinstance(x, (int, float, bool, type(None))):
            return self.constant(x)
        raise UnsupportedError(f"graph output {x!r} is neither a value of the graph nor a number")

    def call(self, n: torch.fx.Node) -> None:
        if n.op == "call_function" and n.target is operator.getitem and self.basic_index(n):
            return
        if n.op == "call_function" and n.target is torch.nn.functional.cross_entropy and self.cross_entropy(n):
            return
        if n.op in ("call_function", "call_method"):
            found = aten_call(n.op, n.target, tuple(n.args), dict(n.kwargs), self.example)
            if found is not None and self.aten(n, *found):
                return
        target = n.target
        if n.op == "call_module":
            target = self.gm.get_submodule(n.target)
        self.values[n] = self.python(n, n.op, target, tuple(n.args), dict(n.kwargs), _effects(n.op, n.target))

    def cross_entropy(self, n: torch.fx.Node) -> bool:
        """``F.cross_entropy`` of class indices without label smoothing on a float32 / float64
        input: the ops eager's ``cross_entropy_loss`` runs, ``nll_loss_nd(log_softmax(x, c), t,
        weight, reduction, ignore_index)`` (c: the class dim, 1, or 0 for a 1-d input), so the
        log-softmax fuses with what makes its input (a language model's ``logits.float()``: one
        kernel reads the bf16 logits, where eager writes and reads a float32 copy first). Under
        autocast a float32 input is what both forms compute on. Other calls stay Python calls."""
        import inspect

        try:
            bound = inspect.signature(torch.nn.functional.cross_entropy).bind(*n.args, **n.kwargs)
        except TypeError:
            return False
        bound.apply_defaults()
        a = bound.arguments
        x, t = self.example(a["input"]), self.example(a["target"])
        reductions = {"none": 0, "mean": 1, "sum": 2}
        if not (isinstance(x, torch.Tensor) and isinstance(t, torch.Tensor) and x.dim() >= 1
                and x.dtype in (torch.float32, torch.float64) and not t.dtype.is_floating_point
                and a["size_average"] is None and a["reduce"] is None and a["label_smoothing"] == 0.0
                and a["reduction"] in reductions and isinstance(a["ignore_index"], int)
                and not isinstance(a["weight"], (torch.Tensor, list, tuple))):
            return False
        if a["weight"] is None and takes_rows(x, t):
            self.values[n] = cross_entropy_rows(self, n, _source(n), self.value(a["input"]), self.value(a["target"]),
                                                a["reduction"], a["ignore_index"], x.device)
            return True
        weight = self.value(a["weight"]) if isinstance(a["weight"], torch.fx.Node) else self.constant(None)
        lsm = self.g.create("aten::log_softmax", [self.value(a["input"]), self.constant(1 if x.dim() > 1 else 0),
                                                  self.constant(None)], [TENSOR], {}, _source(n), [None])
        lsm.schema = resolve_aten("aten::log_softmax", _LOG_SOFTMAX)
        self.g.block.append(lsm)
        loss = self.g.create("aten::nll_loss_nd", [lsm.output, self.value(a["target"]), weight,
                                                   self.constant(reductions[a["reduction"]]),
                                                   self.constant(a["ignore_index"])],
                             [type_of(self.example(n))], {}, _source(n), [n.name])
        loss.schema = resolve_aten("aten::nll_loss_nd", _NLL_LOSS_ND)
        self.g.block.append(loss)
        self.values[n] = loss.output
        return True

    def basic_index(self, n: torch.fx.Node) -> bool:
        """``x[:, :t, None, 0]`` on a tensor: the views TorchScript spells it with (``aten::slice``,
        ``aten::unsqueeze``, ``aten::select``), so that the optimized graph has no Python call
        there and views can sink below pointwise ops. Advanced indexing stays a Python call."""
        base, index = n.args
        ex = self.example(base)
        if not isinstance(ex, torch.Tensor):
            return False
        items = index if isinstance(index, tuple) else (index,)
        kinds = [_index_kind(self.example(i)) for i in items]
        if None in kinds or kinds.count("ellipsis") > 1:
            return False
        consumed = sum(k in ("int", "slice") for k in kinds)
        if consumed > ex.dim():
            return False
        v, dim = self.value(base), 0
        for item, kind in zip(items, kinds):
            if kind == "ellipsis":
                dim += ex.dim() - consumed
            elif kind == "none":
                v = self._view(n, _UNSQUEEZE, [v, self.constant(dim)])
                dim += 1
            elif kind == "int":
                v = self._view(n, _SELECT, [v, self.constant(dim), self._index(item)])
            elif item == slice(None):
                dim += 1
            else:
                step = 1 if item.step is None else item.step
                v = self._view(n, _SLICE, [v, self.constant(dim), self._index(item.start),
                                           self._index(item.stop), self._index(step)])
                dim += 1
        self.values[n] = v
        return True

    def _index(self, x: Any) -> Value:
        if isinstance(x, torch.fx.Node):
            return self.value(x)
        return self.constant(x, INT if x is not None else NONE)

    def _view(self, n: torch.fx.Node, schema: str, inputs: list[Value]) -> Value:
        kind = schema.split("(", 1)[0].split(".")[0]
        node = self.g.create(kind, inputs, [TENSOR], {}, _source(n), [n.name])
        node.schema = resolve_aten(kind, schema)
        self.g.block.append(node)
        return node.output

    def aten(self, n: torch.fx.Node, qualname: str, args: tuple, kwargs: dict) -> bool:
        only = n.target._schema if isinstance(n.target, torch._ops.OpOverload) else None
        matched = match_schema(qualname, args, kwargs, self.example, only)
        if matched is None:
            return False
        schema, bound = matched
        call = resolve_aten(qualname, str(schema))
        if call is None:
            return False
        ex = self.example(n)
        returns = list(schema.returns)
        if len(returns) > 1:
            if not isinstance(ex, (list, tuple)) or len(ex) != len(returns):
                return False
            out_types = [type_of(e) for e in ex]
        else:
            out_types = [type_of(ex)] if returns else []
        inputs = [self.argument(a, x) for a, x in bound]
        node = self.g.create(qualname, inputs, out_types, {}, _source(n), [n.name] * len(out_types))
        node.schema = call
        self.g.block.append(node)
        if len(out_types) > 1:
            self.outputs[n] = list(node.outputs)
        elif out_types:
            self.values[n] = node.output
        else:
            self.values[n] = self.constant(None, NONE)
        return True

    def python(self, n: torch.fx.Node, op: str, target: Any, args: tuple, kwargs: dict, effects: bool) -> Value:
        inputs: list[Value] = []

        def spec(x: Any) -> Any:
            if isinstance(x, torch.fx.Node):
                inputs.append(self.value(x))
                return PyArg(len(inputs) - 1)
            if isinstance(x, (list, tuple, dict)) and not _has_node(x):
                return x        # a constant as it is (a torch.Size, a named tuple)
            if isinstance(x, (list, tuple)):      # FX's immutable_list too
                return (tuple if isinstance(x, tuple) else list)(spec(i) for i in x)
            if isinstance(x, dict):
                return {k: spec(v) for k, v in x.items()}
            if type(x) is slice:
                return slice(spec(x.start), spec(x.stop), spec(x.step))
            return x

        a, kw = spec(args), {k: spec(v) for k, v in kwargs.items()}
        if op == "call_method":
            call = PyCall(f"Tensor.{target}", method=target, args=a, kwargs=kw, effects=effects)
        else:
            call = PyCall(_name_of(target), fn=target, args=a, kwargs=kw, effects=effects)
        node = self.g.create("prim::PythonOp", inputs, [type_of(self.example(n))], {"call": call}, _source(n), [n.name])
        self.g.block.append(node)
        return node.output


def _has_node(x: Any) -> bool:
    found = []
    torch.fx.node.map_arg(x, found.append)
    return bool(found)


_SLICE = ("aten::slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1)"
          " -> Tensor(a)")
_SELECT = "aten::select.int(Tensor(a) self, int dim, SymInt index) -> Tensor(a)"
_LOG_SOFTMAX = "aten::log_softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor"
_NLL_LOSS_ND = ("aten::nll_loss_nd(Tensor self, Tensor target, Tensor? weight=None, int reduction=Mean, "
                "SymInt ignore_index=-100) -> Tensor")
_UNSQUEEZE = "aten::unsqueeze(Tensor(a) self, int dim) -> Tensor(a)"


def _index_kind(x: Any) -> Optional[str]:
    """What one item of a basic index is (None: advanced indexing, a Python call)."""
    if x is None:
        return "none"
    if x is Ellipsis:
        return "ellipsis"
    if isinstance(x, (int, torch.SymInt)) and not isinstance(x, bool):
        return "int"
    if isinstance(x, slice) and all(v is None or (isinstance(v, (int, torch.SymInt)) and not isinstance(v, bool))
                                    for v in (x.start, x.stop)) \
            and (x.step is None or type(x.step) is int and x.step > 0):
        return "slice"
    return None


def _list_type(t: Any) -> str:
    elem = t.getElementType() if t.kind() == "ListType" else t
    k = elem.kind()
    if k == "OptionalType":
        return "Tensor?[]"
    return {"TensorType": "Tensor[]", "IntType": "int[]", "FloatType": "float[]", "BoolType": "bool[]"}.get(k, "Any[]")


def _name_of(target: Any) -> str:
    module = getattr(target, "__module__", None) or ""
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or type(target).__name__
    module = {"_operator": "operator", "torch._C._nn": "torch._C._nn"}.get(module, module)
    return f"{module}.{name}" if module and module != "builtins" else str(name)


def _param_name(name: str) -> str:
    return re.sub(r"\W", "_", name)


def _fetch_attr(gm: torch.fx.GraphModule, target: str) -> Any:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def capture(gm: torch.fx.GraphModule, name: str = "dynamo_graph") -> Captured:
    """Convert ``gm``'s graph; the ``Captured`` runs ``gm.forward`` itself where the host program
    cannot run a call (``scripted``)."""
    try:
        g = _Converter(gm).convert()
    except Exception as e:  # noqa: BLE001 - a construct the converter cannot read: run the graph module
        raise UnsupportedError(f"cannot capture the FX graph: {type(e).__name__}: {e}", gm) from e
    names = [v.name for v in g.inputs]
    # parameters and buffers: Dynamo passes them in without guarding their identity
    static = tuple(i for i, n in enumerate(p for p in gm.graph.nodes if p.op == "placeholder")
                   if (n.meta.get("tensor_dict") or {}).get("_dynamo_static_input_type") is not None)
    return Captured(g, None, names, {}, name, gm, static, fixed_sizes=_fixed_sizes(gm), loose_output_strides=True)


def _fixed_sizes(gm: torch.fx.GraphModule) -> bool:
    """No placeholder is a symbolic size or a tensor with one (Dynamo compiled ``gm`` for these
    sizes and guards them all), and every placeholder has an example value to tell."""
    for p in gm.graph.nodes:
        if p.op != "placeholder":
            continue
        v = p.meta.get("example_value", p.meta.get("val"))
        if v is None or isinstance(v, torch.SymInt):
            return False
        if isinstance(v, torch.Tensor) and not all(isinstance(s, int) for s in v.shape):
            return False
    return True
