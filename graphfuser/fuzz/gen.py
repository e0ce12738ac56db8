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
from typing import Optional

from .vocab import (  # noqa: F401 - also the vocabulary other modules read from here
    FLOAT_DTYPES, DTYPES, SIZES, LAYOUTS, FILLS, FLOAT_LITERALS, INT_LITERALS, UNARY_FLOAT, UNARY_ANY,
    BINARY, TORCH_NAMES, OPERATORS, BOOL_RESULT, SPECIAL, REDUCTIONS, NORMS, OPS, INPLACE, ALIASES, TENSOR_ONLY,
    BOOL_LITERALS, SCALAR_VALUES
)
from .state import _State, _st, _add_input
from .emit import _emit_op, _emit_inplace, _emit_alias, _emit_matmul, _emit_size


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
