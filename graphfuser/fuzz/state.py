"""The generator's state and helpers: the variables a graph has so far, their shapes, dtypes and
kinds, broadcasting and promotion as torch does them, and how arguments are drawn."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from .vocab import FLOAT_DTYPES, FILLS, FLOAT_LITERALS, INT_LITERALS, BOOL_LITERALS, SCALAR_VALUES

Shape = Optional[tuple]   # ints and "B" (the batch dim); None when unknown (after a view)


@dataclass
class Var:
    name: str
    shape: Shape
    kind: str            # "f", "i", "b"
    dtype: Optional[str] = None


@dataclass
class _State:
    draw: Callable
    full: tuple
    batch: int
    inputs: list = field(default_factory=list)
    pool: list = field(default_factory=list)
    lines: list = field(default_factory=list)
    ops: list = field(default_factory=list)
    n: int = 0
    train: bool = False                              # a training graph: most float inputs require grad
    grad_inputs: set = field(default_factory=set)    # inputs that require grad (never written in place)

    def d(self, strategy):
        return self.draw(strategy)


def _st():
    from hypothesis import strategies as st

    return st


def _kind(dtype: str) -> str:
    return "f" if dtype in FLOAT_DTYPES else ("b" if dtype == "bool" else "i")


def _bcast(a: Shape, b: Shape) -> Shape:
    if a is None or b is None:
        return None
    out = []
    for i in range(max(len(a), len(b))):
        x = a[len(a) - 1 - i] if i < len(a) else 1
        y = b[len(b) - 1 - i] if i < len(b) else 1
        out.append(y if x == 1 else x)
    return tuple(reversed(out))


def _promote(a: str, b: str) -> str:
    order = "bif"
    return a if order.index(a) >= order.index(b) else b


def _concrete(shape: tuple, batch: int) -> list:
    return [batch if s == "B" else s for s in shape]


def _new_var(s: _State, shape: Shape, kind: str) -> Var:
    v = Var(f"v{s.n}", shape, kind)
    s.n += 1
    s.pool.append(v)
    return v


def _pick(s: _State, want: str = "fib", known_shape: bool = False, min_rank: int = 0) -> Optional[Var]:
    cands = [v for v in s.pool if v.kind in want and (not known_shape or (v.shape is not None
                                                                             and len(v.shape) >= min_rank))]
    if not cands and not known_shape:
        cands = s.pool
    if not cands:
        return None
    return cands[s.d(_st().integers(0, len(cands) - 1))]


def _add_input(s: _State, shape: tuple, dtype: str, fill: Optional[str] = None, layout: str = "dense") -> Var:
    st = _st()
    name = f"x{len([i for i in s.inputs if i['kind'] == 'tensor'])}"
    if fill is None:
        fill = s.d(st.sampled_from(FILLS))
    rg = dtype in FLOAT_DTYPES and s.d(st.integers(0, 24)) >= (6 if s.train else 24)
    if rg:
        s.grad_inputs.add(name)
    s.inputs.append({"name": name, "kind": "tensor", "dtype": dtype, "shape": list(shape), "layout": layout,
                     "fill": fill, "requires_grad": rg})
    v = Var(name, tuple(shape), _kind(dtype), dtype)
    s.pool.append(v)
    return v


def _scalar_arg(s: _State, kind: str) -> str:
    """A run-time scalar argument (float, int or bool), profiled by the executor; sometimes varied."""
    st = _st()
    name = f"s{len([i for i in s.inputs if i['kind'] != 'tensor'])}"
    vals = SCALAR_VALUES[kind]
    first = s.d(st.sampled_from(vals))
    later = s.d(st.sampled_from(vals)) if s.d(st.booleans()) else first
    s.inputs.append({"name": name, "kind": kind, "values": [first, later]})
    return name


def _other(s: _State, a: Var, float_ok: bool = True, tensor: bool = False) -> tuple[str, Shape, str]:
    """The second operand of a binary op: another tensor, a literal or a run-time scalar."""
    st = _st()
    how = "tensor" if tensor else s.d(st.sampled_from(("tensor", "literal", "int_literal", "arg", "int_arg",
                                                        "bool_literal", "bool_arg")))
    if how == "tensor":
        b = _pick(s)
        return b.name, b.shape, b.kind
    if how == "literal" and float_ok:
        return s.d(st.sampled_from(FLOAT_LITERALS)), (), "f*"
    if how == "arg" and float_ok:
        return _scalar_arg(s, "float"), (), "f*"
    if how == "int_arg":
        return _scalar_arg(s, "int"), (), "i*"
    if how == "bool_literal":
        return s.d(st.sampled_from(BOOL_LITERALS)), (), "b*"
    if how == "bool_arg":
        return _scalar_arg(s, "bool"), (), "b*"
    return s.d(st.sampled_from(INT_LITERALS)), (), "i*"


def _result_kind(a: str, b: str) -> str:
    """Kind of ``a op b``: a scalar operand (``"f*"``) only lifts the category."""
    if b.endswith("*"):
        return _promote(a, b[0]) if b[0] == "f" or a == "b" else a
    return _promote(a, b)


def _dims(s: _State, shape: tuple) -> Any:
    """A reduction's dim argument: None (all), one dim (maybe negative), or a list."""
    st = _st()
    r = len(shape)
    how = s.d(st.sampled_from(("one", "list", "all", "neg")))
    if r == 0 or how == "all":
        return None
    if how == "list" and r >= 2:
        dims = sorted(set(s.d(st.lists(st.integers(0, r - 1), min_size=1, max_size=r))))
        return dims
    d = s.d(st.integers(0, r - 1))
    return d - r if how == "neg" else d


def _reduced(shape: tuple, dims: Any, keepdim: bool) -> tuple:
    r = len(shape)
    if dims is None:
        ds = set(range(r))
    else:
        ds = {d % r for d in (dims if isinstance(dims, list) else [dims])}
    return tuple((1 if keepdim else None) if i in ds else x for i, x in enumerate(shape) if keepdim or i not in ds)


def _fmt_dims(dims: Any) -> str:
    return "None" if dims is None else (f"{dims}" if isinstance(dims, list) else f"[{dims}]")
