"""The host program's table covers every node kind the model zoo's scripted graphs contain.

``zoo_node_kinds.json`` was collected on the GPU machine from the ``torch.jit.script`` graphs
(calls inlined) of every torchvision classification / segmentation / detection model and the timm
models of the zoo: ``"kind|schema"`` with counts. Every entry must have a handler, and every
operator schema must resolve to a template or an OpOverload.
"""
import json
import os

import pytest

from graphfuser.ops.aten import resolve_aten
from graphfuser.executor.handlers import handler_for

with open(os.path.join(os.path.dirname(__file__), "zoo_node_kinds.json")) as f:
    ZOO = sorted(json.load(f)["kinds"])
# operators of libraries not installed here: resolved through torch.ops at capture when present
EXTERNAL = ("torchvision::",)


@pytest.mark.parametrize("entry", ZOO)
def test_zoo_node_kind_has_a_handler(entry):
    kind, _, schema = entry.partition("|")
    assert handler_for(kind) is not None, f"no handler for {kind}"
    if kind.startswith(EXTERNAL) or kind.startswith("prim::"):
        return
    call = resolve_aten(kind, schema)
    assert call is not None, f"{entry} does not resolve"
    if call.template is None:
        assert call.op is not None
