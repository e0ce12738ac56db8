"""Print a fusion graph as a runnable ``FusionDefinition`` function (``python_definition``).

Any graph of op-table nodes prints: a ``FusionDefinition``'s own graph and the subgraph of a
scripted fusion group alike. Tensor inputs print from their (declared or profiled) type,
constants used as operands become ``fd.define_constant``, constant-only arguments (``alpha``,
``rounding_mode`` ...) print as keywords and are left out at their default when trailing::

    def nvfuser_fusion_id0(fd : FusionDefinition) -> None :
        T0 = fd.define_tensor(symbolic_sizes=[-1, 1, -1], contiguous=[True, True, True], dtype=DataType.Float)
        T1 = fd.define_tensor(symbolic_sizes=[-1, -1, -1], contiguous=[False, False, False], dtype=DataType.Float)
        S2 = fd.define_constant(3.00000)
        T3 = fd.ops.add(T0, T1)
        T4 = fd.ops.mul(T3, S2)
        fd.add_output(T4)

``repro_script`` wraps the text with inputs of the recorded shapes and dtypes into a standalone
script (what the failure path writes next to its repro).
"""
from __future__ import annotations

import math
from typing import Any, Optional

import torch

from ..ir.graph import Graph, Node, Value
from ..ir.types import TensorType
from . import lookup
from .table import OpRow
from .datatype import SCALAR_DATATYPES, DataType

# Row argument names printed under nvFuser's keyword (both spellings are accepted by fd.ops).
KEYWORD_ALIASES = {"dim": "axes"}


def float_text(v: float) -> str:
    """``3.00000`` like nvFuser where five decimals are exact, else Python's shortest repr."""
    if math.isnan(v):
        return "float('nan')"
    if math.isinf(v):
        return "float('inf')" if v > 0 else "float('-inf')"
    text = f"{v:.5f}"
    return text if float(text) == v else repr(float(v))


def literal(value: Any, name: Optional[str] = None) -> str:
    """Python source for a constant argument; ``dtype`` arguments print as ``DataType.X``."""
    if value is None:
        return "None"
    if isinstance(value, bool):
        return repr(value)
    if isinstance(value, int):
        return f"{DataType.of_code(value)!r}" if name == "dtype" else str(value)
    if isinstance(value, float):
        return float_text(value)
    if isinstance(value, complex):
        return f"complex({float_text(value.real)}, {float_text(value.imag)})"
    if isinstance(value, torch.dtype):
        return repr(DataType.of(value))
    if isinstance(value, DataType):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(literal(v) for v in value) + "]"
    return repr(value)


def contiguity_of(t: TensorType) -> list[bool]:
    """nvFuser's per-dim, right-to-left contiguity of a tensor type.

    Known sizes and strides: dim ``i`` is contiguous when ``stride[i] == stride[i+1] * size[i+1]``
    (innermost: stride 1). Otherwise from the stride order, when it is the natural one; a layout
    it cannot express prints as not contiguous (execution specializes on the actual inputs).
    """
    rank = len(t.sizes)
    if t.strides is not None and -1 not in t.strides and -1 not in t.sizes:
        return [t.strides[i] == (t.strides[i + 1] * t.sizes[i + 1] if i + 1 < rank else 1) for i in range(rank)]
    natural = tuple(d for d in range(rank) if t.sizes[d] != 1)
    if t.stride_order is None or t.contiguity is None or tuple(t.stride_order) != natural:
        return [False] * rank
    by_dim = dict(zip(t.stride_order, t.contiguity))
    return [bool(by_dim.get(d, True)) for d in range(rank)]


def tensor_args(t: TensorType) -> str:
    """The keyword arguments of ``fd.define_tensor`` for a tensor type."""
    if not isinstance(t, TensorType) or t.sizes is None:
        raise ValueError(f"a tensor input needs a known rank to print, got {t}")
    sizes = [1 if s == 1 else -1 for s in t.sizes]
    dtype = DataType.of(t.dtype) if t.dtype is not None else DataType.Float
    return f"symbolic_sizes={sizes}, contiguous={contiguity_of(t)}, dtype={dtype!r}"


def _const_slot(row: OpRow, index: int) -> bool:
    """Does argument ``index`` of ``row`` only ever take a constant (printed inline)?"""
    if row.kind == "cast":
        return index > 0
    names = row.arg_names
    return index >= len(names) or names[index] in row.consts or names[index] in row.ignored


def _constant_value(v: Value, folded: dict[Value, Any]) -> Any:
    return folded[v] if v in folded else v.constant()


def _op_text(row: OpRow, node: Node, names: dict[Value, str], folded: dict[Value, Any]) -> str:
    if row.kind == "cast":
        out = node.output.type
        if not isinstance(out, TensorType) or out.dtype is None:
            raise ValueError(f"{node.where()}: a cast prints with its output dtype, which is unknown")
        return f"cast({names[node.inputs[0]]}, dtype={DataType.of(out.dtype)!r})"
    defaults = row.defaults()
    items: list[tuple[str, str, bool]] = []          # (name, text, constant at its default)
    for i, v in enumerate(node.inputs):
        name = row.arg_names[i] if i < len(row.arg_names) else f"arg{i}"
        if _const_slot(row, i) or v not in names:
            value = _constant_value(v, folded)
            at_default = name in defaults and type(defaults[name]) is type(value) and defaults[name] == value
            items.append((name, literal(value, name), at_default and _const_slot(row, i)))
        else:
            items.append((name, names[v], False))
    while items and items[-1][2]:
        items.pop()
    parts, keyword = [], False
    for i, (name, text, _) in enumerate(items):
        keyword = keyword or _const_slot(row, i)
        if text.startswith("["):                      # a dim list: nvFuser's ``axes``
            name = KEYWORD_ALIASES.get(name, name)
        parts.append(f"{name}={text}" if keyword else text)
    return f"{row.name}({', '.join(parts)})"


def python_definition(graph: Graph, fusion_id: int = 0,
                      scalar_dtypes: Optional[dict[Value, DataType]] = None) -> str:
    """The graph as ``def nvfuser_fusion_id<N>(fd : FusionDefinition) -> None :`` source.

    ``scalar_dtypes`` gives the declared DataType of scalar inputs (an IR ``float`` prints as
    ``DataType.Double`` otherwise).

    >>> from graphfuser.ir import parse_graph
    >>> g = parse_graph('''graph(%x : Float(*, 4, stride_order=[0, 1], contiguity=[1, 1])):
    ...   %c : float = prim::Constant[value=2.]()
    ...   %a : int = prim::Constant[value=1]()
    ...   %y : Float(*, 4) = aten::add(%x, %c, %a)
    ...   return (%y)''')
    >>> print(python_definition(g))
    def nvfuser_fusion_id0(fd : FusionDefinition) -> None :
        T0 = fd.define_tensor(symbolic_sizes=[-1, -1], contiguous=[True, True], dtype=DataType.Float)
        S1 = fd.define_constant(2.00000)
        T2 = fd.ops.add(T0, S1)
        fd.add_output(T2)
    """
    scalar_dtypes = scalar_dtypes or {}
    names: dict[Value, str] = {}
    folded: dict[Value, Any] = {}
    inline: dict[Value, str] = {}
    lines = [f"def nvfuser_fusion_id{fusion_id}(fd : FusionDefinition) -> None :"]

    def define(v: Value, text: str) -> None:
        names[v] = f"{'T' if v.type.is_tensor else 'S'}{len(names)}"
        lines.append(f"    {names[v]} = {text}")

    # constants that are operands (not inline arguments) or outputs get a define_constant
    operand = set(graph.outputs)
    for node in graph.block.nodes:
        row = lookup(node.kind)
        for i, v in enumerate(node.inputs):
            if row is not None and not _const_slot(row, i):
                operand.add(v)
    for v in graph.inputs:
        if v.type.is_tensor:
            define(v, f"fd.define_tensor({tensor_args(v.type)})")
        else:
            dt = scalar_dtypes.get(v) or SCALAR_DATATYPES.get(v.type.name)
            if dt is None:
                raise ValueError(f"input %{v.name} of type {v.type} has no DataType")
            define(v, f"fd.define_scalar(dtype={dt!r})")
    for node in graph.block.nodes:
        if node.kind == "prim::Constant":
            value = node.attrs.get("value")
            if node.output in operand and value is not None and not isinstance(value, (str, list, tuple)):
                define(node.output, f"fd.define_constant({literal(value)})")
            continue
        if node.kind == "prim::ListConstruct":
            if all(v.is_constant for v in node.inputs):
                folded[node.output] = [v.constant() for v in node.inputs]
            else:                              # a list of run-time scalars: printed inline
                inline[node.output] = "[" + ", ".join(names.get(v) or literal(v.constant()) for v in node.inputs) + "]"
            continue
        row = lookup(node.kind)
        if row is None or len(node.outputs) != 1:
            raise ValueError(f"{node.where()} has no fd.ops equivalent")
        define(node.output, f"fd.ops.{_op_text(row, node, {**names, **inline}, folded)}")
    for v in graph.outputs:
        if v not in names:
            raise ValueError(f"output %{v.name} is not a defined value")
        lines.append(f"    fd.add_output({names[v]})")
    return "\n".join(lines)


# -- standalone repro scripts -------------------------------------------------------------------
_SCRIPT_HEAD = '''"""graphfuser repro: the fusion below, run through the frontend on inputs of the recorded types.

Run it with ``python <this file>``; fallback is disabled, so a failure raises with its reason.
"""
import os

os.environ.setdefault("PYTORCH_NVFUSER_DISABLE", "fallback")

import torch  # noqa: E402

from graphfuser.frontend import DataType, Fusion, FusionDefinition  # noqa: E402,F401


def rand(sizes, strides, dtype, device):
    """A tensor of ``sizes`` and ``strides`` (overlapping strides allowed) with random values."""
    n = 1 + sum((s - 1) * st for s, st in zip(sizes, strides)) if all(sizes) else 0
    if dtype.is_floating_point:
        base = torch.randn(max(n, 1), device=device).to(dtype)
    elif dtype == torch.bool:
        base = torch.rand(max(n, 1), device=device) > 0.5
    else:
        base = torch.randint(0 if dtype == torch.uint8 else -8, 8, (max(n, 1),), device=device).to(dtype)
    return base.as_strided(sizes, strides)

'''


def input_code(v: Value, symbolic_size: int = 8) -> str:
    """Python source making an input like ``v``'s type (symbolic sizes become ``symbolic_size``)."""
    t = v.type
    if not isinstance(t, TensorType):
        return {"int": "3", "bool": "True", "complex": "complex(1.5, -0.5)"}.get(t.name, "1.5")
    sizes = [symbolic_size if s == -1 else s for s in t.sizes]
    if t.strides is not None and -1 not in t.strides:
        strides = list(t.strides)
    else:
        order = list(t.stride_order) if t.stride_order is not None else []
        order = [d for d in range(len(sizes)) if d not in order] + order
        strides, acc = [0] * len(sizes), 1
        for d in reversed(order):
            strides[d] = acc
            acc *= sizes[d]
    device = str(t.device) if t.device is not None else "cpu"
    return f"rand({sizes}, {strides}, {t.dtype or torch.float32}, {device!r})"


def repro_script(graph: Graph, fusion_id: int = 0, title: str = "") -> str:
    """A standalone script: the python definition, inputs of the graph's input types, execute."""
    body = [
        _SCRIPT_HEAD.replace("graphfuser repro:", f"graphfuser repro{' for ' + title if title else ''}:"),
        python_definition(graph, fusion_id), "", "",
        "def make_inputs():",
        "    return [" + "".join(f"\n        {input_code(v)}," for v in graph.inputs) + "\n    ]",
        "", "",
        'if __name__ == "__main__":',
        "    fs = Fusion()",
        "    with FusionDefinition(fs) as fd:",
        f"        nvfuser_fusion_id{fusion_id}(fd)",
        "    for out in fs.execute(make_inputs()):",
        "        print(tuple(out.shape), out.dtype)",
    ]
    return "\n".join(body) + "\n"


def dump_python_definition(sub: Graph, fusion_id: Any = 0, text: Optional[str] = None) -> None:
    """``PYTORCH_NVFUSER_DUMP=python_definition``: print ``text`` (default: printed from ``sub``)."""
    from ..log import dump

    if text is None:
        try:
            text = python_definition(sub, fusion_id if isinstance(fusion_id, int) else 0)
        except ValueError as e:
            text = f"# no python definition for this fusion: {e}"
    dump("python_definition", f"python definition of fusion {fusion_id}", text, "python")
