"""In-place writes that ``torch.jit.script`` dropped although eager would make them visible.

TorchScript's alias analysis reads schema annotations only. A few ops return their input itself
at run time although their schema says ``-> Tensor`` (``type_as`` to the same dtype, dropout in
eval mode, ``sum_to_size`` to the input's own shape, ``atleast_Nd`` of a tensor that already has
the dims), so TorchScript takes their result for a fresh tensor and its dead-code pass deletes a
later in-place write to it when nothing reads the result again::

    r = x.type_as(x)     # eager: r is x
    r.mul_(2)            # deleted by torch.jit.script: x is not doubled
    return x + 1

The captured graph no longer holds the write, so no pass can restore it. ``dropped_writes``
finds such statements in the function's source (an in-place method call on a name bound to one of
those ops' results or passed to one, with no node of that kind on its line in the scripted graph); the caller then runs the
function eagerly instead of through a graph that would compute a different answer.

``merged_signed_zeros`` finds the other such loss: TorchScript's constant pooling takes the float
constants ``-0.0`` and ``0.0`` of one function for the same value (they compare equal), so
``torch.clamp(x, -0.0, 0.0)`` scripts to ``clamp(x, 0.0, 0.0)`` and a zero's sign, which eager
keeps (a reciprocal turns it into -inf or inf), is gone from the graph.
"""
from __future__ import annotations

import ast
import inspect
import re
import textwrap
from typing import Any, Optional

# Methods / functions whose result may be their input although the schema does not say so
# (passes/aliasing.py's UNANNOTATED_ALIASING, by their Python names).
_MAY_RETURN_INPUT = frozenset({"type_as", "dropout", "feature_dropout", "alpha_dropout", "feature_alpha_dropout",
                               "sum_to_size", "atleast_1d", "atleast_2d", "atleast_3d"})
_INPLACE = re.compile(r"^[a-z][a-z0-9_]*[a-z0-9]_$")
_SOURCE_RE = re.compile(r"#\s*(\S+):(\d+):\d+\s*$")


def _callee(call: ast.AST) -> Optional[str]:
    if isinstance(call, ast.Call):
        f = call.func
        if isinstance(f, ast.Attribute):
            return f.attr
        if isinstance(f, ast.Name):
            return f.id
    return None


def _graph_lines(graph: Any) -> set[tuple[str, int, str]]:
    """(file, line, kind) of every node of a TorchScript graph (nested blocks included)."""
    out: set[tuple[str, int, str]] = set()

    def walk(block: Any) -> None:
        for n in block.nodes():
            text = str(n).splitlines()
            m = _SOURCE_RE.search(text[0]) if text else None
            if m:
                out.add((m.group(1), int(m.group(2)), n.kind()))
            for b in n.blocks():
                walk(b)
    walk(graph.block() if hasattr(graph, "block") else graph)
    return out


def _source_tree(fn: Any) -> Optional[tuple[ast.AST, int, str]]:
    try:
        lines, first = inspect.getsourcelines(fn)
        path = inspect.getsourcefile(fn)
        return ast.parse(textwrap.dedent("".join(lines))), first, path
    except (OSError, TypeError, SyntaxError):
        return None


def merged_signed_zeros(fn: Any) -> list[str]:
    """``file:line`` of each ``-0.0`` literal in ``fn``'s own source when a ``0.0`` literal is there
    too: TorchScript pools the two into one constant, so one of them loses its sign."""
    found = _source_tree(fn)
    if found is None:
        return []
    tree, first, path = found
    signs = (ast.USub, ast.UAdd)
    nested = {id(n.operand) for n in ast.walk(tree) if isinstance(n, ast.UnaryOp) and isinstance(n.op, signs)}
    negated: dict[int, int] = {}      # id of a literal under unary signs -> the product of the signs
    for node in ast.walk(tree):
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, signs) and id(node) not in nested:
            inner, sign = node, 1
            while isinstance(inner, ast.UnaryOp) and isinstance(inner.op, signs):
                sign *= -1 if isinstance(inner.op, ast.USub) else 1
                inner = inner.operand
            negated[id(inner)] = sign
    minus, plus = [], False
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and type(node.value) is float and node.value == 0.0:
            if negated.get(id(node), 1) < 0:
                minus.append(f"{path}:{first + node.lineno - 1}")
            else:
                plus = True
    return minus if plus else []


def dropped_writes(fn: Any, graph: Any) -> list[str]:
    """``file:line`` of each in-place write in ``fn``'s own source that ``graph`` (its TorchScript
    graph, before inlining) lost although its target may be another tensor in eager."""
    found = _source_tree(fn)
    if found is None:
        return []
    tree, first, path = found
    may_alias: set[str] = set()
    assigns = [n for n in ast.walk(tree) if isinstance(n, ast.Assign)]
    for node in assigns:
        for call in ast.walk(node.value):
            if _callee(call) not in _MAY_RETURN_INPUT:
                continue
            # the result and the tensor it may be: a write to either one is seen through the other
            may_alias.update(t.id for t in node.targets if isinstance(t, ast.Name))
            operands = [call.func.value] if isinstance(call.func, ast.Attribute) else []
            may_alias.update(n.id for o in operands + list(call.args) for n in ast.walk(o) if isinstance(n, ast.Name))
    if not may_alias:
        return []
    # views of those (r.reshape(-1), r[0], ...) are in the set too: closed over every assignment
    # that reads a name of the set (a superset; a write TorchScript keeps is never reported)
    grown = True
    while grown:
        grown = False
        for node in assigns:
            if any(isinstance(n, ast.Name) and n.id in may_alias for n in ast.walk(node.value)):
                new = {t.id for t in node.targets if isinstance(t, ast.Name)} - may_alias
                if new:
                    may_alias |= new
                    grown = True
    present = _graph_lines(graph)
    lost = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _INPLACE.match(node.func.attr) \
                and isinstance(node.func.value, ast.Name) and node.func.value.id in may_alias:
            line = first + node.lineno - 1
            if (path, line, "aten::" + node.func.attr) not in present:
                lost.append(f"{path}:{line}")
    return lost
