"""The op table and the questions other stages ask it.

Example::

    >>> from graphfuser.ops import ROWS, lookup
    >>> lookup("aten::relu").name
    'relu'
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator, Optional

import torch

from ..ir.graph import VARIED, Node, Value
from ..ir.types import TensorType
from . import pointwise  # noqa: F401  (registers the rows)
from . import reduction  # noqa: F401  (registers the rows)
from . import norms  # noqa: F401  (registers the rows)
from . import activations  # noqa: F401  (registers the rows)
from . import random  # noqa: F401  (registers the rows)
from . import movement  # noqa: F401  (registers the rows)
from .norms import widened as _widened
from .promotion import Participant, participant_of, result_type
from .reduction import CHECKS, ReductionRow, scalar_type_code
from .table import REGISTRY, ROWS, OpCall, OpRow, lookup

FUSIBLE_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32,
                  torch.int16, torch.int8, torch.uint8, torch.bool)
FUSIBLE_KINDS = ("pointwise", "cast", "reduction", "normalization", "movement")


# Base types (``?`` stripped) of the non-tensor arguments profiling records for rows' constants.
PROFILED_TYPES = ("int", "float", "bool", "int[]", "Scalar", "number", "str")


def host_scalar(t: TensorType, device: torch.device) -> bool:
    """A CPU 0-dim tensor feeding a CUDA op: torch allows it (its value is read on the host), and
    a fusion group takes it as a scalar kernel argument."""
    return t.rank == 0 and t.device is not None and t.device.type == "cpu" and device.type == "cuda"


def _profilable(v: Value) -> bool:
    return not v.type.is_tensor and v.type.name.rstrip("?") in PROFILED_TYPES


def as_constant(value: Any) -> Any:
    """A profiled scalar as a fusion subgraph's constant holds it (a dtype as its ScalarType code)."""
    if isinstance(value, torch.dtype):
        code = scalar_type_code(value)
        return value if code is None else code
    if isinstance(value, tuple):
        return list(value)
    return value


def _known(v: Value, profiled: bool) -> tuple[bool, Any]:
    if v.is_constant:
        return True, v.constant()
    if profiled and v.is_profiled_constant and _profilable(v):
        return True, as_constant(v.profiled)
    return False, None


def _constant_of(v: Value, profiled: bool = False) -> tuple[bool, Any]:
    """(True, value) for a constant or a ``prim::ListConstruct`` of constants; with ``profiled``,
    values every profiling run saw the same count as constants too."""
    known, value = _known(v, profiled)
    if known:
        return True, value
    if v.node is not None and v.node.kind == "prim::ListConstruct":
        items = [_known(i, profiled) for i in v.node.inputs]
        if all(k for k, _ in items):
            return True, [x for _, x in items]
    return False, None


def _literal(v: Value) -> bool:
    return v.node is not None and v.node.kind == "prim::ListConstruct"


def _profiled_whole(row: OpRow, name: str, v: Value) -> bool:
    """A row's int-list argument the graph computes whole (``x.shape[-1:]``), profiled into a
    guarded constant (``ReductionRow.profiled_lists``)."""
    return name in getattr(row, "profiled_lists", ()) and not v.is_constant and not _literal(v)


def _profiled_items(row: OpRow, node: Node) -> list[tuple[str, Value]]:
    if not row.consts and not getattr(row, "profiled_lists", ()):
        return []
    names = row.names_for(node) if isinstance(row, ReductionRow) else row.arg_names
    out: list[tuple[str, Value]] = []
    for name, v in zip(names, node.inputs):
        if _profiled_whole(row, name, v):
            if _profilable(v):
                out.append((name, v))
            continue
        if name not in row.consts:
            continue
        items = v.node.inputs if _literal(v) else [v]
        out += [(name, item) for item in items if not item.is_constant and _profilable(item)]
    return out


def profiled_args(node: Node) -> list[Value]:
    """The non-constant scalars feeding the constant-only arguments of a row's node (a
    reduction's dims, keepdim, dtype, correction, eps; add's alpha, gelu's approximate ...),
    directly or as items of a ``prim::ListConstruct``.

    Profiling records these values; where every run saw the same value, the node fuses with it
    as a constant and the group's guard checks it (``passes.guard.specialize_scalars``).
    """
    row = lookup(node.kind)
    if row is None:
        return []
    out: list[Value] = []
    for _, v in _profiled_items(row, node):
        if v not in out:
            out.append(v)
    return out


_MEMO = threading.local()      # bind's results while ``bind_memo`` is open on this thread


@contextlib.contextmanager
def bind_memo() -> Iterator[None]:
    """Within the block, ``bind`` answers a node it already bound (same row, same input values)
    from a table: the partition asks for the same nodes' bindings once per candidate merge
    (resnet50's training step: 54K calls, 3.5 s of its time to steady state). For passes that
    rewire no node's inputs and change no type while it is open; callers only read the results."""
    outer = getattr(_MEMO, "table", None)
    _MEMO.table = {} if outer is None else outer
    try:
        yield
    finally:
        _MEMO.table = outer


def bind(row: OpRow, node: Node) -> tuple[dict[str, Any], dict[str, Any], dict[str, Participant]]:
    """Map a node's inputs to the row's argument names.

    Returns (args, consts, participants): ``args`` holds Values for run-time inputs and Python
    values for constants; ``consts`` only the constants; ``participants`` the promotion inputs.
    A row's constant-only argument that profiling saw with one value binds as that constant.
    """
    return memoized(("bind", id(row)), node, lambda: _bind(row, node))


def memoized(tag: tuple, node: Node, compute) -> Any:
    """``compute()``, from ``bind_memo``'s table while one is open on this thread (keyed by
    ``tag``, the node and its input values), else computed afresh."""
    table = getattr(_MEMO, "table", None)
    if table is None:
        return compute()
    key = (tag, node, tuple(node.inputs))
    hit = table.get(key)
    if hit is None:
        hit = table[key] = compute()
    return hit


def _bind(row: OpRow, node: Node) -> tuple[dict[str, Any], dict[str, Any], dict[str, Participant]]:
    reducing = isinstance(row, ReductionRow)
    names = row.names_for(node) if reducing else row.arg_names
    defaults = row.defaults()
    args: dict[str, Any] = {}
    consts: dict[str, Any] = {}
    for i, name in enumerate(names):
        if i < len(node.inputs):
            v = node.inputs[i]
            known, value = _constant_of(v, name in row.consts or _profiled_whole(row, name, v))
            if known:
                args[name] = consts[name] = value
            else:
                args[name] = v
    for name in row.arg_names:
        if name not in args and name in defaults:
            args[name] = consts[name] = defaults[name]
    parts: dict[str, Participant] = {}
    for name in row.promote:
        if name not in args:
            continue
        v = args[name]
        p = participant_of(v.type) if isinstance(v, Value) else (None if v is None else participant_of(None, v))
        if p is not None:
            parts[name] = p
    return args, consts, parts


def dense_contiguous(t: TensorType) -> bool:
    """Concrete sizes and torch-contiguous strides (size-1 dims aside)."""
    if t.sizes is None or t.strides is None or any(s < 0 for s in t.sizes):
        return False
    step = 1
    for s, st in zip(reversed(t.sizes), reversed(t.strides)):
        if s != 1 and st != step:
            return False
        step *= max(s, 1)
    return True


def fusible(node: Node, device_type: Optional[str] = None) -> Optional[str]:
    """``None`` if ``node`` can join a fusion group given its profiled types, else the reason."""
    row = lookup(node.kind)
    if row is None:
        if node.kind.endswith("_") and lookup(node.kind[:-1]) is not None:
            return f"{node.kind} writes its input in place (only in-place ops on intermediates are made functional)"
        return f"{node.kind} is not in the op table"
    if row.kind not in FUSIBLE_KINDS:
        return f"{node.kind} is a {row.kind} op; not fused by this build"
    if len(node.inputs) > len(row.arg_names):
        return f"{node.kind} called with {len(node.inputs)} arguments; the row knows {len(row.arg_names)}"
    reducing = isinstance(row, ReductionRow)
    if len(node.outputs) != row.n_outputs:
        return f"{node.kind} has {len(node.outputs)} outputs"
    for name, v in _profiled_items(row, node):
        if v.profiled is VARIED:
            return (f"argument {name!r} of {node.kind} must be a constant (its value changed between profiling "
                    "runs, so it was not specialized)")
    for o in node.outputs:
        if not isinstance(o.type, TensorType) or not o.type.complete:
            return "output type was not profiled (the node never ran, or its layout changed between runs)"
    out = node.outputs[0].type
    if out.dtype not in FUSIBLE_DTYPES:
        return f"dtype {out.dtype} is not fused"
    if row.dense_output and not dense_contiguous(out):
        return f"{node.kind} was profiled as a view (its output is not dense and contiguous)"
    if device_type is not None and out.device.type != device_type:
        return f"output on {out.device}, group on {device_type}"
    args, consts, parts = bind(row, node)
    for name in row.consts:
        if name in args and name not in consts:
            return f"argument {name!r} of {node.kind} must be a constant"
    for name, v in args.items():
        if not isinstance(v, Value):
            continue
        if name in row.ignored:
            # a dtype-selecting tensor (type_as's / to's other) is still a group input: its guard
            # checks dtype and device from a complete profiled type
            if isinstance(v.type, TensorType) and not v.type.complete:
                return (f"input %{v.name} (argument {name!r}) has no complete profiled type (its rank or "
                        "layout changed between runs)")
            continue
        t = v.type
        if isinstance(t, TensorType):
            if not t.complete:
                return f"input %{v.name} has no complete profiled type"
            if t.dtype not in FUSIBLE_DTYPES:
                return f"input dtype {t.dtype} is not fused"
            if t.device != out.device and not host_scalar(t, out.device):
                return f"input %{v.name} on {t.device}, output on {out.device}"
            if t.rank > out.rank and not reducing:
                return f"input %{v.name} has a higher rank than the output"
        elif reducing and name in row.shape_args:
            continue
        elif t.name not in ("int", "float", "bool"):
            return f"argument {name!r} has type {t}; only tensors and int/float/bool scalars are fused"
    if row.kind == "cast":
        compute = out.dtype
    else:
        if not parts:
            return f"{node.kind} has no typed inputs"
        try:
            expected, compute = row.result_dtypes(parts, consts)
        except (ValueError, TypeError) as e:
            return f"type promotion failed: {e}"
        if expected != out.dtype and not (out.dtype == torch.float32 and expected in (torch.float16, torch.bfloat16)
                                          and row.name == "instance_norm" and _widened(node)):
            return f"type promotion gives {expected}, profiled output is {out.dtype}"
    if reducing:
        why = CHECKS[row.name](node, args, consts)
        plan = why or row.dim_plan(node, args, consts)
        if isinstance(plan, str):
            return plan
    return row.reject(consts, parts, compute)


def op_listing() -> list[tuple[str, str, str, str, str]]:
    """(name, aten names, kind, promotion, doc) for every row: ``python -m graphfuser ops``."""
    return [(r.name, ", ".join(r.aten), r.kind, r.promotion, r.doc) for r in sorted(ROWS.values(), key=lambda r: r.name)]


__all__ = ["ROWS", "REGISTRY", "OpRow", "OpCall", "lookup", "bind", "fusible", "op_listing", "Participant",
           "result_type", "participant_of", "profiled_args", "as_constant", "PROFILED_TYPES", "host_scalar"]
