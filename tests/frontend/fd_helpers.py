"""Helpers for the FusionDefinition tests: run printed definitions, round-trip executed fusions."""
from __future__ import annotations

import re
from typing import Any, Callable

import torch

from graphfuser.frontend import DataType, Fusion, FusionDefinition
from graphfuser.frontend.fusion import FusionRecord
from graphfuser.ops.python_definition import python_definition

DEF_RE = re.compile(r"^def (nvfuser_fusion_id\w+)\(fd : FusionDefinition\) -> None :$", re.M)


def definition_function(text: str) -> Callable[[FusionDefinition], None]:
    """``exec`` a printed ``def nvfuser_fusion_id<N>(fd)`` and return the function."""
    ns: dict[str, Any] = {"FusionDefinition": FusionDefinition, "DataType": DataType}
    exec(compile(text, "<python_definition>", "exec"), ns)
    return ns[DEF_RE.search(text).group(1)]


def define_from_text(text: str) -> Fusion:
    """A Fusion defined by running a printed definition."""
    fs = Fusion()
    with FusionDefinition(fs) as fd:
        definition_function(text)(fd)
    return fs


def definitions_in(output: str) -> list[str]:
    """Every ``def nvfuser_fusion_id...`` block in dump output."""
    out = []
    for m in DEF_RE.finditer(output):
        lines = output[m.start():].splitlines()
        body = [lines[0]] + [ln for ln in _takewhile_indented(lines[1:])]
        out.append("\n".join(body))
    return out


def _takewhile_indented(lines: list[str]):
    for ln in lines:
        if not ln.startswith("    "):
            return
        yield ln


def assert_close_list(got: list, expected: list) -> None:
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        tol = {"rtol": 1e-2, "atol": 1e-2} if g.dtype in (torch.float16, torch.bfloat16) else {}
        torch.testing.assert_close(g, e, **tol)


def roundtrip_executed(record: FusionRecord, inputs: list, outputs: list) -> None:
    """Print ``record``'s definition, run the text into a fresh definition (the printed text must
    be a fixpoint), execute that on ``inputs`` through its own record and compare."""
    text = record.definition()
    fd = FusionDefinition(Fusion())
    fd.__enter__()
    definition_function(text)(fd)
    again = python_definition(fd.graph, record.id, fd._scalar_dtypes)
    assert again == text, f"printed definition is not a fixpoint:\n{text}\n---\n{again}"
    fresh = FusionRecord(record.id, fd, None)          # not registered: its own profile and compile
    assert_close_list(fresh.execute(list(inputs)), outputs)
