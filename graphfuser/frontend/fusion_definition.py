"""``FusionDefinition``: nvFuser's Python frontend, building graphfuser's own IR.

A definition builds the same graph the scripted path captures: ``fd.ops.add(t0, t1)`` appends
an ``aten::add`` node with inputs ``(t0, t1, alpha=1)`` (constants are ``prim::Constant``
nodes), typed with ``TensorType``\\ s from ``define_tensor``. ``fd.ops`` has one method per row of
the op table (``graphfuser.ops.ROWS``): the row's name, its arguments in aten schema order with
their defaults, and its doc. ``Fusion.execute`` profiles the graph once per input signature and
runs it through ``executor.compiled.compile_group``, like any scripted fusion group.

Example::

    >>> import torch
    >>> from graphfuser.frontend import Fusion, FusionDefinition, DataType
    >>> fs = Fusion()
    >>> with FusionDefinition(fs) as fd:
    ...     t0 = fd.define_tensor(symbolic_sizes=[-1, 1, -1], contiguous=[True, True, True], dtype=DataType.Float)
    ...     t1 = fd.define_tensor(3)
    ...     c0 = fd.define_constant(3.0)
    ...     t2 = fd.ops.add(t0, t1)
    ...     t3 = fd.ops.mul(t2, c0)
    ...     fd.add_output(t3)
    >>> fs.execute([torch.ones(2, 1, 8), torch.ones(2, 4, 8)])[0].sum().item()
    384.0
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

import torch

from ..codegen.schedule import ParallelType, ScheduleError
from ..ir.graph import Graph, Node, Value
from ..ir.types import BOOL, FLOAT, INT, NONE, STR, TensorType, Type
from ..ir.verify import verify
from ..ops.table import OpRow
from ..ops.datatype import DataType
from .opcall import DefinitionError, default_of, infer_output_type, resolve, select_overload
from .operators import Operators, sync_operators
from .scheduling import ComputeAtMode, ScheduleState

if TYPE_CHECKING:  # pragma: no cover
    from .fusion import Fusion

class Tensor:
    """A tensor of a definition (``T<n>``); after ``fd.schedule()`` it carries a loop domain.

    Scheduling calls return the tensor, so they chain: ``t.merge(0).split(0, 128)``.
    """

    __slots__ = ("fd", "value", "index")
    is_tensor = True

    def __init__(self, fd: "FusionDefinition", value: Value, index: int) -> None:
        self.fd, self.value, self.index = fd, value, index

    def __repr__(self) -> str:
        return f"T{self.index}"

    @property
    def ndim(self) -> int:
        return len(self.value.type.sizes)

    @property
    def dtype(self) -> DataType:
        return DataType.of(self.value.type.dtype)

    @property
    def symbolic_sizes(self) -> list[int]:
        """-1 per symbolic dim, 1 per broadcast dim (as inferred at definition time)."""
        return list(self.value.type.sizes)

    # -- scheduling --------------------------------------------------------------------------
    def _sched(self) -> ScheduleState:
        self.fd._check_scheduling(f"{self!r} scheduling")
        return self.fd._schedule_state

    def merge(self, axis: int, axis2: Optional[int] = None) -> "Tensor":
        """Merge axes ``axis`` and ``axis + 1`` into one: ``[I0, I1] -> [I0*I1]``."""
        self._sched().apply(self, "merge", axis, axis2)
        return self

    def split(self, axis: int, factor: int, inner_split: bool = True) -> "Tensor":
        """Split ``axis`` by ``factor``: ``[I] -> [ceilDiv(I, factor), factor]``."""
        self._sched().apply(self, "split", axis, factor, inner_split)
        return self

    def reorder(self, mapping: dict[int, int]) -> "Tensor":
        """Move axes: ``{old position: new position}``; unnamed axes keep their relative order."""
        self._sched().apply(self, "reorder", dict(mapping))
        return self

    def parallelize(self, axis: int, ptype: ParallelType) -> "Tensor":
        """Bind ``axis`` to ``ParallelType.BIDx`` / ``TIDx`` / ``Unroll`` / ``Vectorize`` ..."""
        self._sched().apply(self, "parallelize", axis, ptype)
        return self

    def axis(self, i: int) -> "Axis":
        """Axis ``i`` of the loop domain: ``t.axis(0).parallelize(ParallelType.BIDx)``."""
        self._sched()
        return Axis(self, i)

    def compute_at(self, consumer: "Tensor", pos: int = -1,
                   mode: ComputeAtMode = ComputeAtMode.Standard) -> "Tensor":
        """Compute this producer inside ``consumer``'s loops up to ``pos`` (checked and recorded;
        graphfuser inlines every fusion into one loop nest). Replays ``consumer``'s transforms
        here so that ``parallelize_all_like`` maps axes one to one."""
        self._sched().compute_at(self, consumer, pos, mode)
        return self

    def inline_most(self) -> "Tensor":
        """Inline this tensor as far as possible (always the case in graphfuser)."""
        self._sched().inline_most([self])
        return self

    def parallelize_all_like(self, ref: Optional["Tensor"] = None) -> "Tensor":
        """With ``ref``: copy ``ref``'s parallel types onto this tensor. Without: this tensor is
        the reference, and every tensor transformed like it gets its parallel types."""
        state = self._sched()
        if ref is None:
            state.parallelize_all_like(self)
        else:
            self.fd._check_handle(ref, "parallelize_all_like")
            state.parallelize_all_like(ref, [self])
        return self

    def loop_nest(self) -> str:
        """The loops this tensor's domain describes, as text."""
        return self._sched().loop_nest_str(self)

    def print_loop_nest(self) -> None:
        """Print the loops this tensor's domain describes."""
        print(self.loop_nest())


class Axis:
    """One leaf of a tensor's loop domain (``t.axis(i)``)."""

    def __init__(self, tensor: Tensor, i: int) -> None:
        self.tensor, self.i = tensor, i

    def parallelize(self, ptype: ParallelType) -> "Axis":
        self.tensor.parallelize(self.i, ptype)
        return self

    def __repr__(self) -> str:
        nest = self.tensor.fd._schedule_state.nest(self.tensor)
        return repr(nest.leaves[self.i]) if -len(nest.leaves) <= self.i < len(nest.leaves) else "<no such axis>"


class Scalar:
    """A scalar of a definition (``S<n>``): a run-time input, a constant or an op result."""

    __slots__ = ("fd", "value", "index")
    is_tensor = False

    def __init__(self, fd: "FusionDefinition", value: Value, index: int) -> None:
        self.fd, self.value, self.index = fd, value, index

    def __repr__(self) -> str:
        return f"S{self.index}"


Handle = Union[Tensor, Scalar]


# -- the definition ------------------------------------------------------------------------------
def _constant_type(value: Any) -> Type:
    if value is None:
        return NONE
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, int):
        return INT
    if isinstance(value, float):
        return FLOAT
    if isinstance(value, complex):
        return Type("complex")
    if isinstance(value, str):
        return STR
    if isinstance(value, (list, tuple)):
        return Type("float[]" if any(isinstance(x, float) for x in value) else "int[]")
    raise DefinitionError(f"{type(value).__name__} {value!r} cannot be a constant")


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


class FusionDefinition:
    """Defines a ``Fusion`` inside a ``with`` block; see the module docstring for an example.

    Methods: ``define_tensor``, ``define_scalar``, ``define_constant``, ``add_output``, the
    operators ``fd.ops.<name>``, and ``schedule()`` to switch from defining to scheduling.
    """

    Operators = Operators

    def __init__(self, fusion: Optional["Fusion"] = None) -> None:
        from .fusion import Fusion

        fusion = Fusion() if fusion is None else fusion
        if not isinstance(fusion, Fusion):
            raise TypeError(f"FusionDefinition takes a Fusion, got {type(fusion).__name__}")
        if fusion.defined():
            raise DefinitionError(f"Fusion {fusion.id()} is already defined and cannot be re-entered; "
                                  "create a new Fusion() to define another fusion")
        sync_operators()
        self.fusion = fusion
        self.graph = Graph()
        self.ops = Operators(self)
        self._handles: list[Handle] = []
        self._inputs: list[Handle] = []
        self._outputs: list[Handle] = []
        self._scalar_dtypes: dict[Value, DataType] = {}
        self._state = "new"          # new -> defining -> scheduling -> done | failed
        self._schedule_state: Optional[ScheduleState] = None

    # -- context --------------------------------------------------------------------------------
    def __enter__(self) -> "FusionDefinition":
        if self._state != "new":
            raise DefinitionError("a FusionDefinition is entered once")
        if self.fusion._defining:
            raise DefinitionError("this Fusion is already being defined by another FusionDefinition")
        self.fusion._defining = True
        self._state = "defining"
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.fusion._defining = False
        if exc_type is not None:
            self._state = "failed"
            return False
        self._finish()
        return False

    def _finish(self) -> None:
        if not self._outputs:
            self._state = "failed"
            raise DefinitionError("the definition has no output: call fd.add_output(...) for every result")
        try:
            scheduler = self._schedule_state.finish() if self._schedule_state is not None else None
        except ScheduleError:
            self._state = "failed"
            raise
        verify(self.graph)
        self._state = "done"
        from .fusion import register

        register(self.fusion, self, scheduler)

    def _check_defining(self, what: str) -> None:
        if self._state == "defining":
            return
        if self._state == "new":
            raise DefinitionError(f"{what}: define inside `with FusionDefinition(fs) as fd:`")
        if self._state == "scheduling":
            raise DefinitionError(f"{what}: fd.schedule() was called; the definition part is over")
        raise DefinitionError(f"{what}: this FusionDefinition is finished")

    def _check_scheduling(self, what: str) -> None:
        if self._state != "scheduling":
            hint = "call fd.schedule() after the definition first" if self._state == "defining" else \
                "schedule inside the `with FusionDefinition(...)` block, after fd.schedule()"
            raise ScheduleError(f"{what}: {hint}")

    def _check_handle(self, h: Any, what: str) -> Handle:
        if not isinstance(h, (Tensor, Scalar)):
            raise DefinitionError(f"{what}: expected a Tensor or Scalar of this definition, got {type(h).__name__}")
        if h.fd is not self:
            raise DefinitionError(f"{what}: {h!r} is not defined in this FusionDefinition (it belongs to another)")
        return h

    def _handle(self, value: Value) -> Handle:
        h = (Tensor if value.type.is_tensor else Scalar)(self, value, len(self._handles))
        self._handles.append(h)
        return h

    def _name(self, tensor: bool) -> str:
        return f"{'T' if tensor else 'S'}{len(self._handles)}"

    # -- inputs, constants, outputs ------------------------------------------------------------
    def define_tensor(self, ndims: Union[int, Sequence[int], None] = None,
                      dtype: Union[DataType, torch.dtype, Sequence, None] = DataType.Float,
                      symbolic_sizes: Optional[Sequence[int]] = None, contiguous: Optional[Sequence[bool]] = None,
                      sizes: Optional[Sequence[int]] = None, strides: Optional[Sequence[int]] = None) -> Tensor:
        """A tensor input, in one of three forms (dtype defaults to ``DataType.Float``)::

            fd.define_tensor(3)                                  # rank only, any layout
            fd.define_tensor(3, DataType.Half)
            fd.define_tensor(sizes=[2, 4, 6], strides=[24, 6, 1], dtype=DataType.Half)
            fd.define_tensor(symbolic_sizes=[-1, 1, -1], contiguous=[True, True, True])

        ``symbolic_sizes``: -1 per symbolic dim, 1 per broadcast dim. ``contiguous`` reads right
        to left: dim ``i`` is dense with respect to dim ``i + 1`` (the innermost: stride 1).
        """
        self._check_defining("define_tensor")
        if isinstance(ndims, (list, tuple)):                  # positional: (sizes, contiguity|strides, dtype)
            second = list(dtype) if isinstance(dtype, (list, tuple)) else None
            dtype = symbolic_sizes if isinstance(symbolic_sizes, (DataType, torch.dtype)) else DataType.Float
            symbolic_sizes = None
            if second is not None and all(isinstance(c, bool) for c in second):
                symbolic_sizes, contiguous = ndims, second
            else:
                sizes, strides = ndims, second
            ndims = None
        dt = self._datatype(dtype, "define_tensor")
        forms = [ndims is not None, symbolic_sizes is not None, sizes is not None or strides is not None]
        if sum(forms) != 1:
            raise DefinitionError("define_tensor takes exactly one of: a rank, symbolic_sizes (+ contiguous), "
                                  "or sizes + strides")
        if ndims is not None:
            if isinstance(ndims, bool) or not isinstance(ndims, int) or ndims < 0:
                raise DefinitionError(f"define_tensor: the rank must be a non-negative int, got {ndims!r}")
            t = TensorType(dtype=dt.torch, sizes=(-1,) * ndims)
        else:
            if sizes is not None:
                symbolic_sizes, contiguous = self._from_sizes(sizes, strides)
            symbolic_sizes = list(symbolic_sizes)
            if any(s not in (-1, 1) or isinstance(s, bool) for s in symbolic_sizes):
                raise DefinitionError(f"define_tensor: symbolic sizes are -1 (symbolic) or 1 (broadcast), "
                                      f"got {symbolic_sizes}")
            contiguous = [False] * len(symbolic_sizes) if contiguous is None else list(contiguous)
            if len(contiguous) != len(symbolic_sizes) or not all(isinstance(c, bool) for c in contiguous):
                raise DefinitionError(f"define_tensor: contiguous needs one bool per dim ({len(symbolic_sizes)}), "
                                      f"got {contiguous}")
            order = tuple(d for d, s in enumerate(symbolic_sizes) if s != 1)
            t = TensorType(dtype=dt.torch, sizes=tuple(symbolic_sizes), stride_order=order,
                           contiguity=tuple(contiguous[d] for d in order))
        v = self.graph.add_input(self._name(True), t)
        h = self._handle(v)
        self._inputs.append(h)
        return h

    @staticmethod
    def _from_sizes(sizes: Sequence[int], strides: Optional[Sequence[int]]) -> tuple[list[int], list[bool]]:
        sizes = list(sizes)
        if strides is None or len(strides) != len(sizes):
            raise DefinitionError(f"define_tensor: sizes {sizes} need strides of the same length, got {strides}")
        if any(not isinstance(s, int) or s < 0 for s in sizes):
            raise DefinitionError(f"define_tensor: sizes must be non-negative ints, got {sizes}")
        n = len(sizes)
        contig = [strides[i] == (strides[i + 1] * sizes[i + 1] if i + 1 < n else 1) for i in range(n)]
        return [1 if s == 1 else -1 for s in sizes], contig

    def _datatype(self, dtype: Any, what: str) -> DataType:
        try:
            dt = DataType.of(dtype)
        except (ValueError, TypeError, KeyError):
            raise DefinitionError(f"{what}: {dtype!r} is not a DataType") from None
        if dt is DataType.Null:
            raise DefinitionError(f"{what}: DataType.Null is not a value type")
        return dt

    def define_scalar(self, dtype: Union[DataType, torch.dtype] = DataType.Double) -> Scalar:
        """A scalar input, given at execute time: ``fd.define_scalar(dtype=DataType.Double)``."""
        self._check_defining("define_scalar")
        dt = self._datatype(dtype, "define_scalar")
        v = self.graph.add_input(self._name(False), Type(dt.scalar_type))
        self._scalar_dtypes[v] = dt
        h = self._handle(v)
        self._inputs.append(h)
        return h

    def define_constant(self, value: Union[bool, int, float, complex]) -> Scalar:
        """A constant: Bool, Int, Double or ComplexDouble, inferred from ``value``."""
        self._check_defining("define_constant")
        try:
            DataType.of_scalar(value)
        except TypeError as e:
            raise DefinitionError(f"define_constant: {e}") from None
        node = self.graph.create("prim::Constant", [], [_constant_type(value)], {"value": value},
                                 out_names=[self._name(False)])
        self.graph.block.append(node)
        return self._handle(node.output)

    def add_output(self, output: Handle) -> None:
        """Mark a tensor or scalar as an output of the fusion (outputs come back in this order)."""
        self._check_defining("add_output")
        h = self._check_handle(output, "add_output")
        self.graph.block.returns.append(h.value)
        self._outputs.append(h)

    # -- operators -------------------------------------------------------------------------------
    def _operand(self, a: Any, row: OpRow, name: str, const_slot: bool) -> tuple[Value, list[Node]]:
        """The Value for an argument, plus the nodes to insert for it (a new constant; a
        ``prim::ListConstruct`` for a list holding run-time scalars, such as a shape)."""
        what = f"fd.ops.{row.name}: argument {name!r}"
        if isinstance(a, (Tensor, Scalar)):
            self._check_handle(a, what)
            if const_slot and not a.value.is_constant:
                kind = "tensor" if a.is_tensor else "run-time scalar"
                raise DefinitionError(f"{what} must be a constant, got {kind} {a!r}")
            return a.value, []
        if isinstance(a, (list, tuple)) and any(isinstance(x, (Tensor, Scalar)) for x in a):
            items = [self._operand(x, row, name, False) for x in a]
            if any(v.type.name not in ("int", "float") for v, _ in items):
                raise DefinitionError(f"{what}: a list holds int or float scalars")
            kind = "float" if any(v.type.name == "float" for v, _ in items) else "int"
            node = self.graph.create("prim::ListConstruct", [v for v, _ in items], [Type(f"{kind}[]")])
            return node.output, [n for _, nodes in items for n in nodes] + [node]
        if isinstance(a, torch.Tensor):
            raise DefinitionError(f"{what} is a torch.Tensor; define inputs with fd.define_tensor() and pass "
                                  "the tensor to execute()")
        if isinstance(a, (DataType, torch.dtype)):
            a = DataType.of(a).code
        node = self.graph.create("prim::Constant", [], [_constant_type(a)], {} if a is None else {"value": a})
        return node.output, [node]

    def _op(self, row: OpRow, args: dict[str, Any], name: Optional[str] = None) -> Handle:
        label = f"fd.ops.{name or row.name}"
        self._check_defining(label)
        defaults = row.defaults()
        values, consts, droppable = [], [], []
        for arg in row.arg_names:
            a = args.get(arg, defaults.get(arg))
            v, nodes = self._operand(a, row, arg, arg in row.consts)
            values.append(v)
            consts.append(nodes)
            raw = v.constant() if v.is_constant else object()
            droppable.append(arg in defaults and _same(raw, defaults[arg]))
        kind = row.aten[0]
        schema, n = select_overload(kind, values, droppable)
        values, consts = values[:n], consts[:n]
        for i in range(n, min(len(schema.arguments), len(row.arg_names))):
            arg = row.arg_names[i]      # spell the overload's defaults out, as TorchScript does
            if schema.arguments[i].name != arg and arg not in row.ignored:
                break
            v, nodes = self._operand(default_of(schema, i), row, arg, True)
            values.append(v)
            consts.append(nodes)
        tensor_out = any(v.type.is_tensor for v in values)
        node = self.graph.create(kind, values, [Type("Tensor") if tensor_out else FLOAT],
                                 out_names=[self._name(tensor_out)])
        node.schema = resolve(kind, schema)
        try:
            node.output.type = infer_output_type(node, schema)
        except Exception as e:
            node.drop_inputs()
            shown = ", ".join(repr(args.get(a)) for a in row.arg_names if args.get(a) is not None)
            raise DefinitionError(f"{label}({shown}): {str(e).splitlines()[0] if str(e) else type(e).__name__}") \
                from None
        for nodes in consts:
            for n in nodes:
                self.graph.block.append(n)
        self.graph.block.append(node)
        return self._handle(node.output)

    # -- scheduling -------------------------------------------------------------------------------
    def schedule(self) -> "_ScheduleBlock":
        """Switch from defining to scheduling; usable as ``with fd.schedule():``."""
        if self._state != "scheduling":
            self._check_defining("fd.schedule()")
            self._state = "scheduling"
            self._schedule_state = ScheduleState(self)
        return _ScheduleBlock(self)

    def inline_most(self, tensors: Optional[Sequence[Tensor]] = None) -> None:
        """Inline every tensor (or ``tensors``) as far as possible: checked and recorded."""
        self._check_scheduling("inline_most")
        self._schedule_state.inline_most(list(tensors or []))

    def parallelize_all_like(self, ref: Tensor, tensors: Optional[Sequence[Tensor]] = None) -> None:
        """Copy ``ref``'s parallel types onto ``tensors`` (default: all transformed like ``ref``)."""
        self._check_scheduling("parallelize_all_like")
        self._check_handle(ref, "parallelize_all_like")
        self._schedule_state.parallelize_all_like(ref, None if tensors is None else list(tensors))

    def print_loop_nest(self, tensor: Optional[Tensor] = None) -> None:
        """Print the loops of ``tensor`` (default: the first tensor output, the usual reference)."""
        self._check_scheduling("print_loop_nest")
        if tensor is None:
            tensor = next((h for h in self._outputs if h.is_tensor), None)
            if tensor is None:
                raise ScheduleError("print_loop_nest: the definition has no tensor output yet")
        print(tensor.loop_nest())


class _ScheduleBlock:
    """What ``fd.schedule()`` returns: a no-op context manager for ``with fd.schedule():``."""

    def __init__(self, fd: FusionDefinition) -> None:
        self.fd = fd

    def __enter__(self) -> FusionDefinition:
        return self.fd

    def __exit__(self, *exc: Any) -> bool:
        return False
