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


def _group_kinds(g) -> list[str]:
    return [m.kind for n in fusion_groups(g) for m in n.subgraph.block.nodes]


def test_bias_adds_fuse_with_relu_in_vgg_and_fire():
    """Every conv / linear bias whose add feeds a ReLU is fused with it (not the last linear's)."""
    for case, adds in (("vgg_like", 3), ("squeezenet_fire", 3)):
        g = run_case(next(c for c in CORPUS if c.name == case))
        kinds = _group_kinds(g)
        assert kinds.count("aten::add") == adds and kinds.count("aten::relu") == adds, (case, kinds)


def test_dropout_flag_is_a_guarded_constant_across_train_and_eval():
    """``self.training`` feeds dropout as a profiled, guarded constant: in eval dropout is an
    identity inside the group; after ``model.train()`` the guard misses and the fallback draws
    eager's mask (same seed); back in eval the group runs again."""
    torch.manual_seed(0)
    model = corpus_case("vgg_like").make().eval()
    sm = graphfuser.script(model)
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        for _ in range(3):
            compare(sm(x), model(x))
        g = graphfuser.last_executed_optimized_graph()
        assert "aten::dropout" in _group_kinds(g)
        for mode in (True, False, True):
            model.train(mode)
            torch.manual_seed(7)
            ref = model(x)
            torch.manual_seed(7)
            compare(sm(x), ref)
        model.eval()
        compare(sm(x), model(x))


def corpus_case(name: str) -> Case:
    return next(c for c in CORPUS if c.name == name)
