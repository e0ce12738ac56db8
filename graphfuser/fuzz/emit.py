"""The statement emitters of the generator: one call appends one statement of a kind (an op of
the vocabulary, a special form, a reduction, a normalization, an in-place write, an alias, a
matmul, a size read) to the graph being built, or reports that none fits."""
from __future__ import annotations

import math

from typing import Optional

from .vocab import (
    FLOAT_DTYPES, FLOAT_LITERALS, UNARY_FLOAT, UNARY_ANY, BINARY, TORCH_NAMES, OPERATORS, BOOL_RESULT,
    SPECIAL, REDUCTIONS, NORMS, COMPOSITES, INPLACE, ALIASES, TENSOR_ONLY, MOVEMENT
)
from .state import (
    Var, _State, _st, _kind, _bcast, _concrete, _new_var, _pick, _add_input, _other, _result_kind,
    _dims, _reduced, _fmt_dims
)


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
    elif op in COMPOSITES:
        return _emit_composite(s, op)
    elif op in MOVEMENT:
        a = _pick(s, known_shape=True, min_rank=1)
        if a is None:
            return False
        rank = len(a.shape)
        dims = sorted(set(d(st.lists(st.integers(-rank, rank - 1), min_size=1, max_size=2))),
                      key=lambda k: k % rank)
        if len({k % rank for k in dims}) != len(dims):
            dims = dims[:1]             # flip refuses a dim named twice (-1 and rank - 1)
        form = d(st.sampled_from(("torch.flip({a}, {dims})", "{a}.flip({dims})")))
        line, out = form.format(a=a.name, dims=dims), (a.shape, a.kind)
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
    if op in ("softmax", "log_softmax", "_softmax", "_log_softmax", "_safe_softmax"):
        dim = d(st.integers(-r, r - 1)) if r else 0
        if op == "_safe_softmax":
            line = f"torch._safe_softmax({a.name}, {dim})"
        elif op.startswith("_"):
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


def _emit_composite(s: _State, op: str) -> bool:
    """``rotary``: ``a * cos + cat((-a[..., h:], a[..., :h]), -1) * sin`` over a float operand's
    last dim (even, not the batch dim), cos / sin inputs of that width, broadcast or full;
    ``cross_entropy``: ``F.cross_entropy(a.float().view(-1, D), targets)`` with targets in range
    and some ignored (-100), each reduction; ``repeat_kv``: dim 1 repeated 3 times as grouped-query
    attention repeats key / value heads, ``a.unsqueeze(2).expand(-1, -1, 3, ...).flatten(1, 2)``
    (a copy of a stride-0 view: passes/broadcast_copy.py); ``sdpa``: ``a`` viewed as one head's
    queries ``[1, 1, L, D]`` attending to itself (keys ``q * 0.5``) through
    ``scaled_dot_product_attention`` with a boolean mask (causal and a key mask from the data's
    signs: rows of no key too), its float 0 / -inf form, no mask or ``is_causal``
    (passes/sdpa_bias.py converts a boolean mask once); ``out_variant``: ``torch.mul / add / sin /
    exp / sum(..., out=o)`` into a fresh ``o``, the call's result used or not; ``no_grad_block``: a
    row statistic of ``a`` made under ``with torch.no_grad():``."""
    st = _st()
    d = s.d
    if op == "max_pool":
        return _emit_max_pool(s)
    a = _pick(s, "f", known_shape=True, min_rank=2)
    if a is None:
        return False
    shape = a.shape
    width = shape[-1]
    if not isinstance(width, int) or width < 1 or (op == "rotary" and width % 2):
        return False
    if op == "sdpa":
        q = f"{a.name}.reshape(1, 1, -1, {width})"
        kind = d(st.sampled_from(("bool", "bool", "float", "none", "causal")))
        keys = f"({q}[..., :1] > 0).transpose(-1, -2)"
        causal = f"torch.ones({q}.size(2), {q}.size(2), dtype=torch.bool, device={a.name}.device).tril()"
        mask = {"bool": f"{causal} & {keys}", "float": f"torch.where({causal} & {keys}, 0.0, float('-inf')).to({a.name}.dtype)",
                "none": "None", "causal": "None"}[kind]
        line = (f"F.scaled_dot_product_attention({q}, {q} * 0.5, {q}, {mask}, is_causal={kind == 'causal'})"
                f".reshape({a.name}.shape)")
        v = _new_var(s, shape, "f")
    elif op == "out_variant":
        # an ``out=`` overload writing a fresh tensor, its result used or not (mul.out is
        # ``aten::mul`` with a written third input: dead code elimination had dropped it)
        fn = d(st.sampled_from(("mul", "add", "sin", "exp", "sum")))
        v = _new_var(s, shape[:-1] if fn == "sum" else shape, "f")
        empty = f"{a.name}.new_empty({a.name}.shape[:-1])" if fn == "sum" else f"torch.empty_like({a.name})"
        call = {"mul": f"torch.mul({a.name}, 1.5, out={v.name})", "add": f"torch.add({a.name}, {a.name}, out={v.name})",
                "sin": f"torch.sin({a.name}, out={v.name})", "exp": f"torch.exp({a.name}, out={v.name})",
                "sum": f"torch.sum({a.name}, -1, out={v.name})"}[fn]
        s.lines.append(f"{v.name} = {empty}")
        if d(st.booleans()):
            s.lines.append(call)
        else:
            w = _new_var(s, shape[:-1] if fn == "sum" else shape, "f")
            s.lines.append(f"{w.name} = {call}")
        s.ops.append(op)
        return True
    elif op == "no_grad_block":
        # a value made under ``with torch.no_grad():`` from a value that may require grad: the
        # block's entry and exit are barriers (a group across one had run under no_grad whole)
        v = _new_var(s, shape[:-1] + (1,), "f")
        body = d(st.sampled_from((f"({a.name} * 1.5).sum(-1, keepdim=True)", f"{a.name}.amax(-1, keepdim=True) + 1.0",
                                  f"({a.name}[..., :1] * 2.0).exp()")))
        s.lines.append("with torch.no_grad():")
        s.lines.append(f"    {v.name} = {body}")
        s.ops.append(op)
        return True
    elif op == "repeat_kv":
        if not isinstance(shape[1], int):
            return False
        dims = ", ".join(["-1", "-1", "3"] + ["-1"] * (len(shape) - 2))
        line = f"{a.name}.unsqueeze(2).expand({dims}).flatten(1, 2)"
        v = _new_var(s, (shape[0], shape[1] * 3) + tuple(shape[2:]), "f")
    elif op == "rotary":
        h = width // 2
        lead = tuple(1 if d(st.booleans()) else x for x in shape[:-1])
        names = []
        for _ in range(2):
            if "B" in lead:     # full-size cos / sin follow the batch: inputs, not parameters
                c = _add_input(s, lead + (width,), a.dtype if a.dtype in FLOAT_DTYPES else "float32", fill="normal")
                s.pool.remove(c)
                names.append(c.name)
            else:
                names.append(_param(s, list(lead) + [width], a))
        cos, sin = names
        line = (f"{a.name} * {cos} + torch.cat((-{a.name}[..., {h}:], {a.name}[..., :{h}]), -1) * {sin}")
        v = _new_var(s, shape, "f")
    else:
        reduction = d(st.sampled_from(('"mean"', '"sum"', '"none"')))
        rows = f"{a.name}.float().reshape(-1, {width})"
        n = f"{a.name}.numel() // {width}"
        idx = f"torch.arange({n}, device={a.name}.device)"
        target = f"torch.where({idx} % 3 == 1, {idx} * 0 - 100, {idx} % {width})"
        line = f"F.cross_entropy({rows}, {target}, ignore_index=-100, reduction={reduction})"
        v = _new_var(s, None, "f")
    s.lines.append(f"{v.name} = {line}")
    s.ops.append(op)
    return True


def _emit_max_pool(s: _State) -> bool:
    """``F.max_pool2d`` of a 4-d float operand, a new input (``[B, C, H, W]``, dense or
    channels-last: the layout graphfuser's CUDA kernel takes, runtime/max_pool.py) where the
    graph has none: kernel 1-3 a dim, stride 1-3 or the kernel's, padding up to half the kernel,
    dilation 1-2, ``ceil_mode`` either way; windows that leave no output are not drawn."""
    st, d = _st(), s.d
    a = next((v for v in s.pool if v.kind == "f" and v.shape is not None and len(v.shape) == 4
              and all(isinstance(x, int) and x >= 1 for x in v.shape[2:])), None)
    if a is None:
        shape = ("B", d(st.sampled_from((3, 8, 16, 33, 64))), d(st.sampled_from((1, 5, 7, 16))),
                 d(st.sampled_from((1, 4, 9, 16))))
        if s.batch * math.prod(shape[1:]) > 1 << 20:        # (a batch of 4099: a small image)
            shape = ("B", 3, 5, 4)
        a = _add_input(s, shape, d(st.sampled_from(FLOAT_DTYPES)), layout=d(st.sampled_from(("channels_last", "dense"))))
    shape = a.shape
    k = [d(st.integers(1, 3)) for _ in range(2)]
    stride = [] if d(st.booleans()) else [d(st.integers(1, 3)) for _ in range(2)]
    pad = [d(st.integers(0, ki // 2)) for ki in k]
    dil = [d(st.integers(1, 2)) for _ in range(2)]
    ceil = d(st.booleans())
    from ..runtime.max_pool import output_size      # eager's pooling_output_shape

    out = [output_size(shape[2 + i], k[i], pad[i], (stride or k)[i], dil[i], ceil) for i in range(2)]
    if min(out) < 1 or not all(_every_window_reads(shape[2 + i], k[i], pad[i], (stride or k)[i], dil[i], out[i])
                               for i in range(2)):
        return False
    v = _new_var(s, (shape[0], shape[1], out[0], out[1]), "f")
    s.lines.append(f"{v.name} = F.max_pool2d({a.name}, {k}, {stride}, {pad}, {dil}, {ceil})")
    s.ops.append("max_pool")
    return True


def _every_window_reads(size: int, k: int, pad: int, stride: int, dilation: int, out: int) -> bool:
    """Whether every window of a pooled dim holds an input element. A window wholly in the
    padding (dilation or ``ceil_mode`` past a short dim) is -inf, and eager's CPU backward of it
    writes outside the gradient (a heap corruption that killed fuzz workers: CPU seed 36667,
    graphs 308 and 417), so the fuzzer draws no such window."""
    return all(any(0 <= o * stride - pad + j * dilation < size for j in range(k)) for o in range(out))


def _pick_writable(s: _State) -> Optional[Var]:
    """A value an in-place write may target: not an input that requires grad (a leaf, which
    eager refuses to write in place before anything is judged)."""
    cands = [v for v in s.pool if v.name not in s.grad_inputs]
    return cands[s.d(_st().integers(0, len(cands) - 1))] if cands else None


def _writable_or_mul(s: _State) -> Optional[Var]:
    """``_pick_writable``; where nothing may be written, a ``mul`` is emitted instead (None)."""
    v = _pick_writable(s)
    if v is None:
        _emit_op(s, "mul")
    return v


def _emit_inplace(s: _State, op: Optional[str] = None) -> None:
    st = _st()
    d = s.d
    t = _writable_or_mul(s)
    if t is None:
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
    h = _writable_or_mul(s)
    if h is None:
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
    """A matmul with a weight input: a group boundary, as a model's linear, that autocast casts;
    or a linear with a bias (``F.linear``, or GPT-2's ``Conv1D``: ``addmm`` of the flattened
    input, unflattened back), whose bias the bias passes split off (inference) or whose bias
    gradient they route through the consumer's group (training)."""
    st = _st()
    a = _pick(s, "f", known_shape=True, min_rank=1)
    if a is None or a.kind != "f":
        return False
    k = s.d(st.sampled_from((3, 8, 1)))
    how = s.d(st.sampled_from(("matmul", "linear", "addmm")))
    if how == "addmm" and len(a.shape) < 2:
        how = "linear"
    if how == "matmul":
        w = _add_input(s, (a.shape[-1], k), "float32")
        line = f"torch.matmul({a.name}, {w.name}.to({a.name}.dtype))"
    elif how == "linear":
        w, b = _add_input(s, (k, a.shape[-1]), "float32"), _add_input(s, (k,), "float32")
        line = f"F.linear({a.name}, {w.name}.to({a.name}.dtype), {b.name}.to({a.name}.dtype))"
    else:
        w, b = _add_input(s, (a.shape[-1], k), "float32"), _add_input(s, (k,), "float32")
        line = (f"torch.addmm({b.name}.to({a.name}.dtype), {a.name}.reshape(-1, {a.name}.size(-1)), "
                f"{w.name}.to({a.name}.dtype)).unflatten(0, {a.name}.shape[:-1])")
    shape = a.shape[:-1] + (k,)
    r = len(shape)
    if how != "matmul" and r >= 3 and s.d(st.booleans()):
        # the result permuted to channels first (timm's ConvNeXt MLP output): the bias passes
        # move its bias past the permute, onto the channel dim's new place
        order = (0, r - 1) + tuple(range(1, r - 1))
        line = f"{line}.permute{order}"
        shape = tuple(shape[i] for i in order)
        how += "_permute"
    v = _new_var(s, shape, "f")
    s.lines.append(f"{v.name} = {line}")
    s.ops.append(how)
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
