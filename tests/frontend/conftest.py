"""Every fusion a frontend test executes is round-tripped through its python_definition.

The fixture records each successful ``Fusion.execute`` of the test (record, inputs, outputs);
after the test it prints each fusion's definition, runs the text into a fresh definition,
executes it on the same inputs and compares (``fd_helpers.roundtrip_executed``).
"""
from __future__ import annotations

import pytest
import torch

from fd_helpers import roundtrip_executed
from graphfuser.config import config
from graphfuser.frontend.fusion import FusionRecord


@pytest.fixture(autouse=True)
def _roundtrip_every_fusion(monkeypatch, tmp_path):
    executed: list[tuple] = []
    original = FusionRecord.execute

    def recording(self, inputs):
        outs = original(self, inputs)
        if self.id >= 0:
            snapshot = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
            executed.append((self, snapshot, [o.clone() for o in outs]))
        return outs

    monkeypatch.setattr(FusionRecord, "execute", recording)
    config.set(repro_dir=str(tmp_path / "repro"))     # failure tests must not write into logs/
    yield
    monkeypatch.setattr(FusionRecord, "execute", original)
    seen = set()
    for record, inputs, outputs in executed:
        if id(record) in seen:
            continue
        seen.add(id(record))
        roundtrip_executed(record, inputs, outputs)
