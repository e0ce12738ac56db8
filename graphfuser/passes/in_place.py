"""A training batch norm's group writes the new running statistics into the buffers themselves.

``passes/batch_norm.py`` splits the running-stats update off the batch norm: the group computes
the new ``running_mean`` / ``running_var`` as [C] outputs and two ``aten::copy_`` after it write
them into the buffers (``running_stats`` copies). Those copies cost more host time than the rest
of the update: a device-to-device copy per buffer (12 us each on an H100 host, two per batch norm,
53 batch norms in a ResNet-50 step) and two allocations. Here (after the partition, before the
guards) each group output whose only use is such a copy into one of the group's own inputs is
marked on the group's subgraph (``writes_into``: output -> input); its launcher then passes the
input buffer as that output (no allocation), and the host program's ``copy_`` of a tensor onto
its own memory only counts the write (``executor.builtins.HostOps.copy_``). The eager fallback
(guard miss, empty batch) returns fresh tensors, which the copy writes as before.

Writing an input the kernel also reads is safe for these outputs: each [C] running statistic is
read and written at its own channel only, and the kernels read a channel's kept-only inputs
before its reduction passes (the row values of ``codegen/cstyle_reduction.py``: loaded before
the first pass, by the threads of the channel's tile or row) and store its row outputs after the
last one (after the grid barriers of split kernels; the leader block only). That is eager's
order too: ``native_batch_norm`` updates the buffers while it runs.
"""
from __future__ import annotations

from ..ir.graph import Node
from ..ir.types import TensorType
from ..log import jit_log


def write_running_stats_in_place(groups: list[Node]) -> None:
    for group in groups:
        writes = {}
        for j, out in enumerate(group.outputs):
            k = _copied_into_input(group, out)
            if k is not None:
                writes[j] = k
        if writes:
            group.subgraph.writes_into = writes
            jit_log("graph_fuser", 1, f"{group.kind} writes outputs {sorted(writes)} into inputs "
                                      f"{[writes[j] for j in sorted(writes)]} (running statistics)")


def _copied_into_input(group: Node, out) -> "int | None":
    if len(out.uses) != 1 or (group.owner is not None and out in group.owner.returns):
        return None
    user, index = out.uses[0]
    if user.kind != "aten::copy_" or not user.attrs.get("running_stats") or index != 1:
        return None
    dst = user.inputs[0]
    if group.inputs.count(dst) != 1 or not _same_buffer(dst.type, out.type):
        return None
    return group.inputs.index(dst)


def _same_buffer(a, b) -> bool:
    """Types ``a`` (an input) and ``b`` (an output) of one contiguous 1-d buffer."""
    if not (isinstance(a, TensorType) and isinstance(b, TensorType) and a.complete and b.complete):
        return False
    return a.dtype == b.dtype and a.device == b.device and tuple(a.sizes) == tuple(b.sizes) \
        and len(a.sizes) == 1 and tuple(a.strides) == (1,) and tuple(b.strides) == (1,)


def inherit_writes(group: Node, first: Node) -> None:
    """A re-specialization ``group`` of ``first`` (same inputs, outputs in the same places, which
    reach the same copies through the fallback's block) writes the buffers ``first`` writes,
    where its own types still allow it."""
    writes = {j: k for j, k in getattr(first.subgraph, "writes_into", {}).items()
              if _same_buffer(group.subgraph.inputs[k].type, group.subgraph.outputs[j].type)}
    if writes:
        group.subgraph.writes_into = writes
