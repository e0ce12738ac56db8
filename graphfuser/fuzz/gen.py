"""Random graphs as Python source that ``graphfuser.script`` (``torch.jit.script``) accepts.

``cases()`` is a hypothesis strategy whose examples are ``Case`` dicts: the source text of one
function ``fn``, the specs of its inputs (dtype, shape with ``"B"`` for the batch dim, layout,
fill) and the list of calls (batch size and layout flip per call). Nothing here touches tensors:
the worker (``oracle.py``) builds inputs from the specs, so a case is plain data that can be sent
to a subprocess and written out as a standalone repro. The choices are ordered simplest first so
that hypothesis shrinks towards fp32, dense, small graphs. One graph in four is a training
graph: most of its float inputs require grad (the oracle then judges gradients too), and no
in-place write targets such an input (eager refuses to write into a leaf that requires grad).
One graph in six runs under ``torch.autocast`` (bf16; ``matmul`` with a weight input is the op
autocast casts, and the one op of a graph no group takes).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from .vocab import (  # noqa: F401 - also the vocabulary other modules read from here
    FLOAT_DTYPES, DTYPES, SIZES, LAYOUTS, FILLS, FLOAT_LITERALS, INT_LITERALS, UNARY_FLOAT, UNARY_ANY,
    BINARY, TORCH_NAMES, OPERATORS, BOOL_RESULT, SPECIAL, REDUCTIONS, NORMS, OPS, INPLACE, ALIASES, TENSOR_ONLY,
    BOOL_LITERALS, SCALAR_VALUES
)

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


def _emit_op(s: _State, op: str) -> bool:
    """Emit one statement using op-table row ``op``; False when no operand fits."""
    st = _st()
    d = s.d
    line: Optional[str] = None
    out: Optional[tuple] = None
    if op in UNARY_FLOAT or op in UNARY_ANY:
        a = _pick(s, "f" if op in UNARY_FLOAT else "fib")
        if op == "relu":
            form = d(st.sampled_from(("torch.relu({a})", "F.relu({a})", "{a}.relu()")))
        else:
            form = d(st.sampled_from(("torch.{op}({a})", "{a}.{op}()")))
        line = form.format(op=op, a=a.name)
        kind = "b" if op in BOOL_RESULT else ("f" if op in UNARY_FLOAT else a.kind)
        out = (a.shape, kind)
    elif op in BINARY:
        a = _pick(s)
        bname, bshape, bkind = _other(s, a, tensor=op in TENSOR_ONLY)
        kind = "b" if op in BOOL_RESULT else _result_kind(a.kind, bkind)
        if op in ("div", "atan2"):
            kind = "f"
        sym = OPERATORS.get(op)
        form = d(st.sampled_from(("op", "fn", "swap"))) if sym else "fn"
        if form == "op":
            line = f"{a.name} {sym} {bname}"
        elif form == "swap" and (op in ("add", "mul", "sub") or (bkind.endswith("*") and sym is not None)):
            # a Python scalar on the left of any operator (``True / t``, ``2 ** t``, ``-0.0 - t``)
            line = f"{bname} {sym} {a.name}"
        elif op in ("add", "sub", "rsub") and d(st.booleans()):
            line = f"torch.{op}({a.name}, {bname}, alpha={d(st.sampled_from(('2', '0.5', '-1')))})"
        elif op == "div" and d(st.booleans()):
            mode = d(st.sampled_from(('"floor"', '"trunc"')))
            line = f"torch.div({a.name}, {bname}, rounding_mode={mode})"
            kind = _result_kind(a.kind, bkind)
        else:
            line = f"torch.{TORCH_NAMES.get(op, op)}({a.name}, {bname})"
        out = (_bcast(a.shape, bshape), kind)
    elif op in SPECIAL:
        line, out = _emit_special(s, op)
    elif op in REDUCTIONS:
        return _emit_reduction(s, op)
    elif op in NORMS:
        return _emit_norm(s, op)
    if line is None:
        return False
    v = _new_var(s, out[0], out[1])
    s.lines.append(f"{v.name} = {line}")
    s.ops.append(op)
    return True


def _emit_special(s: _State, op: str) -> tuple[Optional[str], Optional[tuple]]:
    st = _st()
    d = s.d
    a = _pick(s, "f")
    lit = lambda: d(st.sampled_from(FLOAT_LITERALS[:5] + ('float("nan")',)))  # noqa: E731
    if op in ("relu6", "hardswish", "hardsigmoid", "mish"):
        return f"F.{op}({a.name})", (a.shape, a.kind if op == "relu6" else "f")
    if op == "masked_fill":
        m = _pick(s, "b") or a
        cond = m.name if m.kind == "b" else f"({m.name} > 0)"
        return f"{a.name}.masked_fill({cond}, {lit()})", (_bcast(a.shape, m.shape), a.kind)
    if op == "leaky_relu":
        return f"F.leaky_relu({a.name}, {d(st.sampled_from(('0.01', '0.2', '-0.5')))})", (a.shape, a.kind)
    if op == "hardtanh":
        return f"F.hardtanh({a.name}, -0.5, {d(st.sampled_from(('1.0', '0.25', '2.0')))})", (a.shape, a.kind)
    if op == "gelu":
        mode = d(st.sampled_from(('"none"', '"tanh"')))
        return f"F.gelu({a.name}, approximate={mode})", (a.shape, "f")
    if op == "silu":
        return f"F.silu({a.name})", (a.shape, "f")
    if op == "softplus":
        beta, threshold = d(st.sampled_from(("1.0", "2.0", "0.5"))), d(st.sampled_from(("20.0", "1.0")))
        return f"F.softplus({a.name}, {beta}, {threshold})", (a.shape, "f")
    if op == "clamp":
        if d(st.booleans()):
            b = _pick(s, "f")
            return f"torch.clamp({a.name}, max={b.name})", (_bcast(a.shape, b.shape), a.kind)
        if d(st.integers(0, 3)) == 3:
            a = _pick(s, "b")       # a bool tensor clamped by a float bound computes in float
        lo = d(st.sampled_from(("None", "-0.5", "0.0", "-0.0", "-1.5")))
        hi = d(st.sampled_from(("1.0", "None", 'float("nan")', "-0.0")))
        if lo == "None" and hi == "None":
            hi = "1.0"
        return f"{a.name}.clamp({lo}, {hi})", (a.shape, "f" if a.kind == "b" else a.kind)
    if op in ("clamp_min", "clamp_max"):
        if d(st.booleans()):
            b = _pick(s, "f")
            return f"torch.{op}({a.name}, {b.name})", (_bcast(a.shape, b.shape), a.kind)
        return f"torch.{op}({a.name}, {lit()})", (a.shape, a.kind)
    if op == "where":
        c = _pick(s, "b")
        cond = c.name if c.kind == "b" else f"{c.name} > 0"
        bname, bshape, bkind = _other(s, a)
        return f"torch.where({cond}, {a.name}, {bname})", (_bcast(_bcast(c.shape, a.shape), bshape),
                                                            _result_kind(a.kind, bkind))
    if op == "threshold":
        return f"F.threshold({a.name}, {d(st.sampled_from(('0.1', '0.0', '-1.0')))}, {lit()})", (a.shape, a.kind)
    if op == "lerp":
        b = _pick(s, "f")
        w = d(st.sampled_from(("0.25", "tensor", "1.5")))
        if w == "tensor":
            wv = _pick(s, "f")
            return f"torch.lerp({a.name}, {b.name}, {wv.name})", (_bcast(_bcast(a.shape, b.shape), wv.shape), "f")
        return f"torch.lerp({a.name}, {b.name}, {w})", (_bcast(a.shape, b.shape), "f")
    if op in ("addcmul", "addcdiv"):
        b, c = _pick(s, "f"), _pick(s, "f")
        return f"torch.{op}({a.name}, {b.name}, {c.name}, value={d(st.sampled_from(('1.0', '0.5', '-2.0')))})", \
            (_bcast(_bcast(a.shape, b.shape), c.shape), "f")
    if op == "nan_to_num":
        return f"torch.nan_to_num({a.name}, nan={d(st.sampled_from(('0.0', '1.5')))}, posinf=1.0)", (a.shape, a.kind)
    if op == "dropout":
        return f"F.dropout({a.name}, {d(st.sampled_from(('0.5', '0.0')))}, False)", (a.shape, a.kind)
    if op == "to":
        a = _pick(s)
        form = d(st.sampled_from(("to", "method", "type_as", "to_other")))
        if form == "type_as" or form == "to_other":
            b = _pick(s)
            return (f"{a.name}.type_as({b.name})" if form == "type_as" else f"{a.name}.to({b.name}.dtype)"), \
                (a.shape, b.kind)
        if form == "method":
            m = d(st.sampled_from(("float", "half", "double", "bfloat16", "int", "long", "bool")))
            return f"{a.name}.{m}()", (a.shape, {"int": "i", "long": "i", "bool": "b"}.get(m, "f"))
        dt = d(st.sampled_from(FLOAT_DTYPES + ("int32", "int64", "int8", "uint8", "bool")))
        return f"{a.name}.to(torch.{dt})", (a.shape, _kind(dt))
    raise AssertionError(op)


def _emit_reduction(s: _State, op: str) -> bool:
    st = _st()
    d = s.d
    a = _pick(s, "f" if op not in ("sum", "prod", "amax", "amin") else "fib", known_shape=True)
    if a is None:
        return False
    shape = a.shape
    keep = d(st.booleans())
    if op == "sum_to_size":
        if not shape:
            return False
        target = [1 if d(st.booleans()) else x for x in _concrete(shape, s.batch)]
        v = _new_var(s, tuple(1 if t == 1 else x for t, x in zip(target, shape)), a.kind)
        s.lines.append(f"{v.name} = {a.name}.sum_to_size({target})")
        s.ops.append(op)
        return True
    dims = _dims(s, shape)
    out = _reduced(shape, dims, keep)
    kind = a.kind if op in ("amax", "amin") else ("f" if op not in ("sum", "prod") else a.kind)
    if op in ("sum", "prod") and kind == "b":
        kind = "i"
    if op in ("sum", "mean", "prod"):
        dt = d(st.sampled_from(("", "", "torch.float64", "torch.float32", "torch.float16")))
        extra = f", dtype={dt}" if dt else ""
        if dt:
            kind = "f"
        if op == "prod":
            dd = dims if not isinstance(dims, list) else dims[0]
            if dims is None:
                line = f"torch.prod({a.name}{extra})"
                out = ()
            else:
                line = f"torch.prod({a.name}, {dd}, keepdim={keep}{extra})"
                out = _reduced(shape, dd, keep)
        elif dims is None and d(st.booleans()):
            line = f"{a.name}.{op}({extra[2:]})"
            out = ()
        else:
            line = f"torch.{op}({a.name}, {_fmt_dims(dims)}, keepdim={keep}{extra})"
    elif op in ("amax", "amin"):
        line = f"torch.{op}({a.name}, {[] if dims is None else _fmt_dims(dims)}, keepdim={keep})"
        if dims is None:
            out = _reduced(shape, None, keep)
    else:
        corr = d(st.sampled_from(("unbiased=True", "unbiased=False", "correction=0", "correction=2")))
        line = f"torch.{op}({a.name}, {_fmt_dims(dims)}, {corr}, keepdim={keep})"
        if op in ("var_mean", "std_mean"):
            v1, v2 = _new_var(s, out, "f"), _new_var(s, out, "f")
            s.lines.append(f"{v1.name}, {v2.name} = {line}")
            s.ops.append(op)
            return True
    v = _new_var(s, out, kind)
    s.lines.append(f"{v.name} = {line}")
    s.ops.append(op)
    return True


def _param(s: _State, shape: tuple, like: Var, positive: bool = False) -> str:
    """A normalization's weight, bias or running statistic: mostly dense and ordinary; now and
    then a stepped slice or an edge-value fill (a zero variance, an infinite weight)."""
    st = _st()
    dt = like.dtype if like.dtype in FLOAT_DTYPES else "float32"
    fill = "positive" if positive else "normal"
    if s.d(st.integers(0, 5)) == 5:
        fill = s.d(st.sampled_from(("zeros", "edge") if positive else ("edge", "zeros", "huge_mean")))
    layout = "sliced" if s.d(st.integers(0, 3)) == 3 else "dense"
    v = _add_input(s, shape, dt, fill=fill, layout=layout)
    s.pool.remove(v)          # parameters are not operands of later ops
    return v.name


def _emit_norm(s: _State, op: str) -> bool:
    st = _st()
    d = s.d
    need = {"batch_norm": 2, "group_norm": 2, "instance_norm": 3}.get(op, 1)
    a = _pick(s, "f", known_shape=True, min_rank=need)
    if a is None:
        return False
    shape = a.shape
    conc = _concrete(shape, s.batch)
    r = len(shape)
    eps = d(st.sampled_from(("1e-05", "1e-12", "0.1")))
    if op in ("softmax", "log_softmax", "_softmax", "_log_softmax"):
        dim = d(st.integers(-r, r - 1)) if r else 0
        if op.startswith("_"):
            line = f"torch.{op}({a.name}, {dim}, False)"
        else:
            form = d(st.sampled_from(("F", "torch", "method_dtype")))
            line = (f"F.{op}({a.name}, dim={dim})" if form == "F" else
                    f"torch.{op}({a.name}, {dim})" if form == "torch" else
                    f"{a.name}.{op}({dim}, dtype=torch.float32)")
        out = shape
    elif op in ("layer_norm", "native_layer_norm", "rms_norm"):
        if r == 0:
            return False
        k = d(st.integers(1, min(r, 2)))
        ns = conc[r - k:]
        w = _param(s, ns, a) if d(st.booleans()) else "None"
        if op == "rms_norm":
            if d(st.booleans()):
                line = f"F.rms_norm({a.name}, {ns}, {w}, {eps})"
            else:
                mul = f" * {w}" if w != "None" else ""
                line = f"{a.name} * torch.rsqrt({a.name}.pow(2).mean(-1, keepdim=True) + {eps}){mul}"
        else:
            b = _param(s, ns, a) if w != "None" and d(st.booleans()) else "None"
            if op == "native_layer_norm":
                if w == "None" or b == "None":
                    return False
                line = f"torch.native_layer_norm({a.name}, {ns}, {w}, {b}, {eps})[0]"
            else:
                line = f"F.layer_norm({a.name}, {ns}, {w}, {b}, {eps})"
        out = shape
    else:
        c = conc[1]
        if op == "group_norm":
            g = d(st.sampled_from([x for x in (1, 2, 3, 4, c) if x and c % x == 0] or [1]))
            w = _param(s, [c], a) if d(st.booleans()) else "None"
            b = _param(s, [c], a) if d(st.booleans()) else "None"
            line = f"F.group_norm({a.name}, {g}, {w}, {b}, {eps})"
        else:
            training = d(st.booleans()) if op == "batch_norm" else True
            stats = op == "batch_norm" or d(st.booleans())
            rm = _param(s, [c], a) if stats else "None"
            rv = _param(s, [c], a, positive=True) if stats else "None"
            w = _param(s, [c], a) if d(st.booleans()) else "None"
            b = _param(s, [c], a) if d(st.booleans()) else "None"
            if op == "batch_norm":
                line = f"F.batch_norm({a.name}, {rm}, {rv}, {w}, {b}, {training}, 0.1, {eps})"
            else:
                line = f"F.instance_norm({a.name}, {rm}, {rv}, {w}, {b}, True, 0.1, {eps})"
        out = shape
    v = _new_var(s, out, "f")
    s.lines.append(f"{v.name} = {line}")
    s.ops.append(op)
    return True


def _pick_writable(s: _State) -> Optional[Var]:
    """A value an in-place write may target: not an input that requires grad (a leaf, which
    eager refuses to write in place before anything is judged)."""
    cands = [v for v in s.pool if v.name not in s.grad_inputs]
    return cands[s.d(_st().integers(0, len(cands) - 1))] if cands else None


def _emit_inplace(s: _State, op: Optional[str] = None) -> None:
    st = _st()
    d = s.d
    t = _pick_writable(s)
    if t is None:
        _emit_op(s, "mul")
        return
    op = op or d(st.sampled_from(INPLACE))
    if op in ("mul_", "add_", "sub_", "div_"):
        bname, _, _ = _other(s, t)
        s.lines.append(f"{t.name}.{op}({bname})")
    elif op == "clamp_":
        lo = d(st.sampled_from(('0.0', '-1.0', 'float("nan")')))
        s.lines.append(f"{t.name}.clamp_(min={lo})")
    elif op == "copy_":
        b = _pick(s)
        s.lines.append(f"{t.name}.copy_({b.name})")
    elif op == "fill_":
        val = d(st.sampled_from(('1.5', '0', 'float("nan")')))
        s.lines.append(f"{t.name}.fill_({val})")
    else:
        s.lines.append(f"{t.name}.{op}()")
    s.ops.append("inplace:" + op)


def _emit_alias(s: _State, how: Optional[str] = None) -> None:
    """An op that may return its input or a view of it, then an in-place write to the base."""
    st = _st()
    d = s.d
    h = _pick_writable(s)
    if h is None:
        _emit_op(s, "mul")
        return
    how = how or d(st.sampled_from(ALIASES))
    shape = h.shape
    r = len(shape) if shape is not None else -1
    if how == "float":
        line, out = f"{h.name}.float()", shape
    elif how == "to_same":
        line, out = f"{h.name}.to({h.name}.dtype)", shape
    elif how == "contiguous":
        line, out = f"{h.name}.contiguous()", shape
    elif how in ("view", "reshape"):
        line, out = f"{h.name}.{how}(-1)", None
    elif how == "slice" and r >= 1:
        line, out = f"{h.name}[1:]", None
    elif how == "unsqueeze":
        line, out = f"{h.name}.unsqueeze(0)", (1,) + shape if shape is not None else None
    elif how == "t" and r == 2:
        line, out = f"{h.name}.t()", (shape[1], shape[0])
    elif how == "expand" and shape is not None:
        line, out = f"{h.name}.expand({[2] + _concrete(shape, s.batch)})", (2,) + shape
    elif how == "dropout":
        line, out = f"F.dropout({h.name}, 0.5, False)", shape
    elif how == "squeeze":
        line, out = f"{h.name}.squeeze()", None
    else:
        line, out = f"{h.name}.type_as({h.name})", shape
    v = _new_var(s, out, "f" if how == "float" else h.kind)
    s.lines.append(f"{v.name} = {line}")
    write = d(st.sampled_from((f"{h.name}.mul_(0.5)", f"{h.name}.add_(1)", f"{v.name}.mul_(2)")))
    s.lines.append(write)
    s.ops.append("alias:" + how)


def _emit_matmul(s: _State) -> bool:
    """A matmul with a weight input: a group boundary, as a model's linear, that autocast casts."""
    a = _pick(s, "f", known_shape=True, min_rank=1)
    if a is None or a.kind != "f":
        return False
    k = s.d(_st().sampled_from((3, 8, 1)))
    w = _add_input(s, (a.shape[-1], k), "float32")
    v = _new_var(s, a.shape[:-1] + (k,), "f")
    s.lines.append(f"{v.name} = torch.matmul({a.name}, {w.name}.to({a.name}.dtype))")
    s.ops.append("matmul")
    return True


def _emit_size(s: _State) -> bool:
    a = _pick(s, known_shape=True, min_rank=1)
    b = _pick(s)
    if a is None:
        return False
    v = _new_var(s, b.shape, b.kind)
    s.lines.append(f"{v.name} = {b.name} * {a.name}.size(-1)")
    s.ops.append("size")
    return True


def cases(max_ops: int = 5, focus: Optional[str] = None):
    """The hypothesis strategy of fuzz cases (dicts; see the module docstring)."""
    st = _st()

    @st.composite
    def strategy(draw):
        rank = draw(st.sampled_from((2, 1, 3, 0, 4)))
        full = [draw(st.sampled_from(SIZES)) for _ in range(rank)]
        if rank and draw(st.integers(0, 15)) == 15:            # now and then a large last dim
            full[-1] = draw(st.sampled_from((300, 1000, 4099)))
            # at most ~4M elements: the float64 reference and its comparisons of a 147M-element
            # case outlast the worker's timeout on a loaded machine
            full[-1] = min(full[-1], max(1, (1 << 22) // max(1, math.prod(full[:-1]))))
        batch = full[0] if rank else 1
        s = _State(draw, tuple(full), batch)
        s.train = draw(st.integers(0, 3)) == 3              # one graph in four trains
        autocast = draw(st.integers(0, 5)) == 5             # one in six runs under torch.autocast (bf16)
        sym = tuple("B" if i == 0 else x for i, x in enumerate(full))
        for i in range(draw(st.integers(1, 3))):
            k = rank if i == 0 else draw(st.integers(0, rank))
            shape = tuple(1 if draw(st.integers(0, 3)) == 3 else x for x in sym[rank - k:])
            layout = draw(st.sampled_from(LAYOUTS)) if draw(st.booleans()) else "dense"
            _add_input(s, shape, draw(st.sampled_from(DTYPES)), layout=layout)
        n_ops = draw(st.integers(1, max_ops))
        for i in range(n_ops):
            if i == 0 and focus and ":" in focus:
                kind, name = focus.split(":", 1)
                (_emit_alias if kind == "alias" else _emit_inplace)(s, name)
                continue
            if i == 0 and focus == "size" and _emit_size(s):
                continue
            what = "op" if (i == 0 and focus) else draw(st.sampled_from(("op", "op", "op", "op", "inplace", "alias",
                                                                          "size", "matmul")))
            if what == "op":
                op = focus if (i == 0 and focus) else draw(st.sampled_from(OPS))
                if not _emit_op(s, op):
                    _emit_op(s, "mul")
            elif what == "inplace":
                _emit_inplace(s)
            elif what == "alias":
                _emit_alias(s)
            elif what == "matmul":
                if not _emit_matmul(s):
                    _emit_op(s, "mul")
            elif not _emit_size(s):
                _emit_op(s, "add")
        produced = [v for v in s.pool if v.name.startswith("v")]
        n_out = draw(st.integers(1, min(3, len(produced)))) if produced else 0
        outs = ([produced[-1]] + [produced[draw(st.integers(0, len(produced) - 1))] for _ in range(n_out - 1)]
                if produced else [])
        names = list(dict.fromkeys(v.name for v in outs)) or [s.pool[0].name]
        vary = draw(st.sampled_from(("batch", "none", "layout", "both"))) if rank else draw(
            st.sampled_from(("none", "layout")))
        new_batch = draw(st.sampled_from((batch + 2, 1, 0, 2 * batch + 1))) if vary in ("batch", "both") else batch
        flip = vary in ("layout", "both")
        calls = [[batch, False]] * 4 + [[new_batch, flip]] * 3
        return {"source": render(s.inputs, s.lines, names), "inputs": s.inputs, "calls": calls,
                "ops": sorted(set(s.ops)), "seed": draw(st.integers(0, 2 ** 16)),
                "autocast": "bfloat16" if autocast else None}

    return strategy()


def render(inputs: list, lines: list, outs: list) -> str:
    """The case's source text: a module defining ``fn``."""
    params = []
    for i in inputs:
        params.append(f"{i['name']}: {'torch.Tensor' if i['kind'] == 'tensor' else i['kind']}")
    body = "\n".join("    " + ln for ln in lines) or "    pass"
    ret = outs[0] if len(outs) == 1 else "(" + ", ".join(outs) + ")"
    return ("import torch\nimport torch.nn.functional as F\n\n\n"
            f"def fn({', '.join(params)}):\n{body}\n    return {ret}\n")
