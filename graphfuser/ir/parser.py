"""Parse the TorchScript-syntax text that ``printer.py`` writes (tests write graphs as text).

Example::

    >>> g = parse_graph('''
    ... graph(%x : Float(4, strides=[1], requires_grad=0, device=cpu)):
    ...   %y : Tensor = aten::relu(%x)
    ...   return (%y)''')
    >>> str(g.inputs[0].type)
    'Float(4, strides=[1], requires_grad=0, device=cpu)'
"""
from __future__ import annotations

import re
from typing import Any

import torch

from .graph import SUBGRAPH_KINDS, Block, Graph, Node, Value
from .types import NAME_DTYPES, TENSOR, TensorType, Type, layout_of


class ParseError(ValueError):
    pass


def code_mask(text: str) -> list[bool]:
    """Per character: True outside string literals (quotes and escapes included in the literal)."""
    mask, quote, escaped = [], False, False
    for ch in text:
        if quote:
            mask.append(False)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                quote = False
        elif ch == '"':
            mask.append(False)
            quote = True
        else:
            mask.append(True)
    return mask


def bracket_depth(text: str) -> int:
    """Net open brackets of ``text``, ignoring brackets inside string literals."""
    depth = 0
    for ch, code in zip(text, code_mask(text)):
        if code and ch in "([{":
            depth += 1
        elif code and ch in ")]}":
            depth -= 1
    return depth


def split_top(text: str, sep: str = ",") -> list[str]:
    """Split on ``sep`` outside brackets and quotes."""
    parts, depth, cur = [], 0, []
    mask = code_mask(text)
    i = 0
    while i < len(text):
        ch = text[i]
        if mask[i] and ch in "([{":
            depth += 1
        elif mask[i] and ch in ")]}":
            depth -= 1
        if mask[i] and depth == 0 and text.startswith(sep, i):
            parts.append("".join(cur).strip())
            cur = []
            i += len(sep)
            continue
        cur.append(ch)
        i += 1
    tail = "".join(cur).strip()
    if tail or parts:
        parts.append(tail)
    return [p for p in parts if p != ""]


def match_close(text: str, start: int) -> int:
    """Index of the bracket closing the one at ``start``."""
    depth = 0
    mask = code_mask(text)
    for i in range(start, len(text)):
        ch = text[i]
        if not mask[i]:
            continue
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return i
    raise ParseError(f"unbalanced brackets in: {text}")


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r"}


def unquote(text: str) -> str:
    """The value of a printed string literal (``format_attr``'s escapes undone)."""
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), text[1:-1], flags=re.S)


def parse_type(text: str) -> Type:
    text = text.strip()
    m = re.match(r"^(\w+)\((.*)\)$", text, re.S)
    if m and (m.group(1) in NAME_DTYPES or m.group(1) == "Tensor"):
        dtype = NAME_DTYPES.get(m.group(1))
        sizes, fields = [], {}
        for part in split_top(m.group(2)):
            if "=" in part:
                k, v = part.split("=", 1)
                fields[k.strip()] = v.strip()
            else:
                sizes.append(-1 if part == "*" else int(part))
        def ints(v):
            return tuple(-1 if x.strip() == "*" else int(x) for x in split_top(v.strip()[1:-1]))
        strides = ints(fields["strides"]) if "strides" in fields else None
        order = ints(fields["stride_order"]) if "stride_order" in fields else None
        contig = tuple(bool(c) for c in ints(fields["contiguity"])) if "contiguity" in fields else None
        size_t = tuple(sizes) if (sizes or "strides" in fields) else None
        if order is None and strides is not None and -1 not in strides and -1 not in size_t:
            order, contig = layout_of(size_t, strides)
        rg = fields.get("requires_grad")
        dev = fields.get("device")
        return TensorType(dtype=dtype, sizes=size_t, strides=strides, stride_order=order, contiguity=contig,
                          device=torch.device(dev) if dev else None,
                          requires_grad=None if rg is None else bool(int(rg)))
    if text == "Tensor":
        return TENSOR
    return Type(text)


def parse_attr_value(text: str) -> Any:
    text = text.strip()
    if text.startswith('"'):
        return unquote(text)
    if text.startswith("["):
        return [parse_attr_value(p) for p in split_top(text[1:-1])]
    if re.match(r"^-?\d+$", text):
        return int(text)
    if re.match(r"^-?(\d+\.\d*|\d*\.\d+|\d+)(e[-+]?\d+)?$", text) or text in ("nan", "inf", "-inf"):
        return float(text)
    return parse_type(text)


def _fix_constant(node: Node) -> None:
    if node.kind != "prim::Constant" or "value" not in node.attrs or not node.outputs:
        return
    t, v = node.outputs[0].type.name, node.attrs["value"]
    if t == "bool":
        node.attrs["value"] = bool(v)
    elif t == "float":
        node.attrs["value"] = float(v)
    elif t == "Device":
        node.attrs["value"] = torch.device(v)


class _Parser:
    def __init__(self, text: str) -> None:
        raw = [ln.rstrip() for ln in text.strip("\n").splitlines()]
        self.lines = self._join_continuations([ln for ln in raw if ln.strip()])
        self.pos = 0
        self.pending_subgraphs: list[tuple[Node, str]] = []

    @staticmethod
    def _join_continuations(lines: list[str]) -> list[str]:
        out: list[str] = []
        for ln in lines:
            if out and bracket_depth(out[-1]) > 0:
                out[-1] += " " + ln.strip()
            else:
                out.append(ln)
        return out

    def parse(self) -> tuple[Graph, dict[str, Graph]]:
        main = self.parse_graph()
        subs: dict[str, Graph] = {}
        while self.pos < len(self.lines):
            line = self.lines[self.pos].strip()
            m = re.match(r"^with ([\w:]+) = graph", line)
            if not m:
                raise ParseError(f"expected 'with NAME = graph(...)', got: {line}")
            subs[m.group(1)] = self.parse_graph()
        return main, subs

    def parse_graph(self) -> Graph:
        line = self._expect("graph(...):")
        self.pos += 1
        m = re.match(r"^(?:with [\w:]+ = )?graph\((.*)\):$", line, re.S)
        if not m:
            raise ParseError(f"expected 'graph(...):', got: {line}")
        g = Graph()
        env: dict[str, Value] = {}
        for p in split_top(m.group(1)):
            name, t = p.split(":", 1)
            env[name.strip()[1:]] = g.add_input(name.strip()[1:], parse_type(t))
        indent = self._indent(self.pos) if self.pos < len(self.lines) else 0
        self.parse_block_body(g, g.block, env, indent)
        line = self._expect("return (...)")
        if not line.startswith("return"):
            raise ParseError(f"expected 'return (...)', got: {line}")
        g.block.returns = self._refs(line[len("return"):].strip()[1:-1], env)
        self.pos += 1
        return g

    def _expect(self, what: str) -> str:
        if self.pos >= len(self.lines):
            raise ParseError(f"unexpected end of text: expected '{what}'")
        return self.lines[self.pos].strip()

    def _indent(self, i: int) -> int:
        ln = self.lines[i]
        return len(ln) - len(ln.lstrip())

    def _refs(self, text: str, env: dict[str, Value]) -> list[Value]:
        out = []
        for r in split_top(text):
            name = r.strip().lstrip("%")
            if name not in env:
                raise ParseError(f"use of undefined value %{name}")
            out.append(env[name])
        return out

    def parse_block_body(self, g: Graph, block: Block, env: dict[str, Value], indent: int) -> None:
        while self.pos < len(self.lines):
            line = self.lines[self.pos]
            stripped = line.strip()
            if self._indent(self.pos) < indent or stripped.startswith(("return", "->", "with ")):
                return
            self.pos += 1
            node = self.parse_node(g, stripped, env)
            block.append(node)
            while self.pos < len(self.lines) and re.match(r"^block\d+\(", self.lines[self.pos].strip()):
                bline = self.lines[self.pos].strip()
                self.pos += 1
                b = Block(g, owner=node)
                node.blocks.append(b)
                inner = dict(env)
                params = bline[bline.index("(") + 1:bline.rindex(")")]
                for p in split_top(params):
                    name, t = p.split(":", 1)
                    inner[name.strip()[1:]] = b.add_param(name.strip()[1:], parse_type(t))
                if self.pos < len(self.lines):
                    self.parse_block_body(g, b, inner, self._indent(self.pos))
                ret = self._expect("-> (...)")
                if not ret.startswith("->"):
                    raise ParseError(f"expected '-> (...)' closing a block, got: {ret}")
                b.returns = self._refs(ret[2:].strip()[1:-1], inner)
                self.pos += 1

    def parse_node(self, g: Graph, line: str, env: dict[str, Value]) -> Node:
        source = None
        # outputs " = " kind[attrs](inputs) # source
        depth, split_at = 0, -1
        for i, (ch, code) in enumerate(zip(line, code_mask(line))):
            if not code:
                continue
            if ch in "([{":
                depth += 1
            elif ch in ")]}":
                depth -= 1
            elif depth == 0 and line.startswith(" = ", i):
                split_at = i
                break
            elif depth == 0 and i == 0 and line.startswith("= "):
                split_at = -2
                break
        if split_at == -1:
            raise ParseError(f"cannot parse node: {line}")
        outs_text, rest = ("", line[2:]) if split_at == -2 else (line[:split_at], line[split_at + 3:])
        m = re.match(r"^([\w:]+)", rest)
        if not m:
            raise ParseError(f"cannot parse node kind in: {line}")
        kind = m.group(1)
        i = len(kind)
        attrs: dict[str, Any] = {}
        if i < len(rest) and rest[i] == "[":
            j = match_close(rest, i)
            for part in split_top(rest[i + 1:j]):
                k, v = part.split("=", 1)
                attrs[k.strip()] = parse_attr_value(v)
            i = j + 1
        if i >= len(rest) or rest[i] != "(":
            raise ParseError(f"expected '(' after {kind} in: {line}")
        j = match_close(rest, i)
        inputs = self._refs(rest[i + 1:j], env)
        tail = rest[j + 1:].strip()
        if tail.startswith("#"):
            source = tail[1:].strip()
        out_names, out_types = [], []
        for o in split_top(outs_text):
            name, t = o.split(":", 1)
            out_names.append(name.strip()[1:])
            out_types.append(parse_type(t))
        sub_name = None
        base = re.sub(r"_\d+$", "", kind)
        if base in SUBGRAPH_KINDS:
            sub_name, kind = kind, base
        node = g.create(kind, inputs, out_types, attrs, source, out_names)
        for nm, v in zip(out_names, node.outputs):
            env[nm] = v
        _fix_constant(node)
        if sub_name:
            self.pending_subgraphs.append((node, sub_name))
        return node


def parse_graph(text: str) -> Graph:
    """Parse a graph (and any ``with NAME = graph(...)`` subgraph sections) from text."""
    p = _Parser(text)
    main, subs = p.parse()
    for node, name in p.pending_subgraphs:
        if name not in subs:
            raise ParseError(f"{name} has no 'with {name} = graph(...)' section")
        node.subgraph = subs[name]
    return main
