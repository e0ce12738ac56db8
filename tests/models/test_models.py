"""The CPU model corpus: every piece of ``corpus.CORPUS`` through graphfuser.script, compared
with eager over several calls with a batch size that changes on every call, and checked to fuse.

Dropout in training mode runs through torch's own op in the host program, so the same manual
seed gives eager's mask. BatchNorm in training mode updates its running statistics in place:
those are compared too.
"""
from __future__ import annotations

import copy
import os
import sys
import warnings

import pytest
import torch

import graphfuser
from helpers import fusion_groups

sys.path.insert(0, os.path.dirname(__file__))
from corpus import CORPUS, Case  # noqa: E402

BATCHES = (2, 3, 2, 5)


def compare(out, ref) -> None:
    if isinstance(ref, dict):
        assert isinstance(out, dict) and list(out) == list(ref)
        for k in ref:
            compare(out[k], ref[k])
    elif isinstance(ref, (list, tuple)):
        assert type(out) is type(ref) and len(out) == len(ref)
        for o, r in zip(out, ref):
            compare(o, r)
    else:
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)


def run_case(case: Case):
    torch.manual_seed(0)
    model = case.make().train(case.train)
    ref_model = copy.deepcopy(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)   # no torch.jit.script fallback in the corpus
        warnings.filterwarnings("ignore", message=".*enable_nested_tensor.*")
        sm = graphfuser.script(model)
    graphs = []
    with torch.set_grad_enabled(case.grad):
        for i, b in enumerate(BATCHES):
            torch.manual_seed(100 + i)
            args = case.inputs(b)
            torch.manual_seed(i)
            ref = ref_model(*args)
            torch.manual_seed(i)
            out = sm(*args)
            compare(out, ref)
            graphs.append(graphfuser.last_executed_optimized_graph())
    for (name, buf), (_, ref_buf) in zip(model.named_buffers(), ref_model.named_buffers()):
        torch.testing.assert_close(buf, ref_buf, msg=f"buffer {name}")
    return graphs[-1]


@pytest.mark.parametrize("case", CORPUS, ids=[c.name for c in CORPUS])
def test_model(case):
    """Matches eager on every call; then fuses where a fusible pointwise chain is obvious (a
    case blocked by a known partition limit is an xfail of this one assertion, never a skip)."""
    g = run_case(case)
    groups = len(fusion_groups(g)) if g is not None else 0
    if case.fuses is True:
        assert groups >= 1, f"{case.name}: no fusion group"
    elif isinstance(case.fuses, str) and groups == 0:
        pytest.xfail(case.fuses)
