"""Give a row kernel the column sums over its rows (a partition step, run after the greedy
grouping, ``reduction_split`` and the horizontal merges of ``horizontal.py``).

A normalization's backward is a row reduction (the input gradient needs a dot product per row)
and column sums over the same rows (the weight and bias gradients: ``sum(grad * xhat, rows)``,
``sum(grad, rows)``). As two kernels, both read the full-size ``x`` and ``grad``; as one, each
row worker (a block on CUDA, an OpenMP chunk on the CPU) adds the summands of its rows to per-
column accumulators while it computes the input gradient, writes them to its slot of a small
partials tensor, and the launcher sums the slots (``codegen/reduction.py``, ``TensorParam.partials``).
That is one read of each full-size input instead of two, as Inductor's fused RMSNorm / LayerNorm
backward does.

A group ``B`` joins a row group ``A`` when

- every reduction of ``B`` is a sum over exactly the axes ``A`` keeps, and ``A ∪ B`` shares one
  loop domain (``analyze(columns=True)``); nothing in ``A ∪ B`` reads a column sum;
- ``B`` reads from outside some full-size tensor that ``A`` reads or computes (row groups that
  cover all of them are tried first: the merge then reads nothing more than ``A`` alone did; one
  that covers some still saves ``B``'s second read of those);
- ``A``'s rows are contiguous (the reduced axes are the innermost dims of its reduction's input:
  the row kernel's threads then own the same columns in every row);
- merging makes no cycle.

A cast of a cast of a column sum (an autocast bias gradient: ``sum -> to(bf16) -> to(float32)``)
leaves the merged group and runs on the small result: the launcher finalizes each column sum with
one cast, to its output's dtype.

A ViT block under bf16 autocast is the case these last rules are for. Its layer norm's backward
row kernel reads the forward's saved statistics (``autodiff/saved.py``); the weight gradient's
chain is then cheap to recompute, so ``reduction_split`` gives it a group of its own, which merges
with the projection's bias sum over the residual's gradient (``grad_0 + dx``) and takes the tail
of ``dx`` with it. That group reads the residual's gradient, which the row group does not, and
rounds its bias sum through bf16: without the two rules it stayed a kernel of its own, and the
row kernel wrote two full-size intermediates for it (vit_small's training step on an H200: 5.94
ms without the statistics, 6.14 with them, 5.81-5.83 with the merge;
``tests/autodiff/test_residual_column_sums.py``).

A row kernel that draws random numbers (a dropout's mask redrawn in the backward) takes column
sums too: each number is keyed on its element's row-major linear index, whatever thread computes
it, so the merged kernel draws the mask the separate kernels drew. GPT-2's layer-norm backwards
all redraw a residual dropout's mask; before, each left its weight, bias and linear-bias
gradients to outer-reduction kernels of their own (74 of them per bf16 training step, 0.86 ms of
16.2 on an H200).

``PYTORCH_NVFUSER_DISABLE=column_sums`` turns the merge off (the column sums then run as an outer
reduction kernel of their own, which recomputes its summands from ``x``, ``grad`` and the row
kernel's per-row values: ``reduction_split.py``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from ..config import config
from ..ir.graph import Node
from ..ir.types import TensorType
from ..log import jit_log
from ..ops import bind, lookup
from ..ops.axes import COLUMN_CASTS, COLUMN_SUM_KINDS, Axes, analyze, column_output_misfit, needs_axes

if TYPE_CHECKING:
    from .partition import _BlockPartition


def _column_group(part: "_BlockPartition", gid: int) -> Optional[Axes]:
    """The axes of group ``gid`` when its reductions are all plain sums over one set of axes."""
    mem = part.members[gid]
    if not mem or not needs_axes(mem):
        return None
    axes = analyze(mem)
    if isinstance(axes, str) or not axes.reduced:
        return None
    reds = [n for n in mem if axes.node_reduced.get(n)]
    return axes if reds and all(n.kind in COLUMN_SUM_KINDS for n in reds) else None


def rows_contiguous(nodes: list[Node], axes: Axes) -> bool:
    """Whether the row reductions' inputs have the reduced axes innermost, in their dims' order
    (their dims of size 1 aside): a row is then one run of memory, and the column sums walk it as
    the row kernel does; and whether every other full-size tensor the nodes read keeps the
    reduced axes together in that order. A layer norm over [7, 5] of a [N, 5, 7, 5] input whose
    last two dims are transposed has its innermost dim reduced, yet the [7, 5] weight gradient
    would walk the row against its memory order (fuzz graph 5420 of seed 9595: the lowering could
    not store it); with the forward's statistics saved (``autodiff/saved.py``) the rows reduced
    are the gradient's, dense, and the transposed input is only read. Never for an empty row
    input."""
    rows = []
    for n in nodes:
        if axes.node_reduced.get(n) and axes.node_reduced[n] == axes.reduced:
            row = lookup(n.kind)
            rows.append(bind(row, n)[0].get(row.promote[0]) if row.promote else None)
    if not rows or not all(_reduced_order(v, axes, innermost=True) for v in rows):
        return False
    rank = rows[0].type.rank
    return all(_reduced_order(v, axes, innermost=False) for v in _full_reads(nodes, rank) if v in axes.of)


def _reduced_order(v, axes: Axes, innermost: bool) -> bool:
    """Whether ``v``'s reduced dims (of more than one element) are adjacent in its stride order,
    in their dims' order, and (``innermost``) last; a tensor broadcast along all of them passes
    unless ``innermost``."""
    t = getattr(v, "type", None)
    if not isinstance(t, TensorType) or not t.stride_order or t.sizes is None:
        return False
    if 0 in t.sizes:
        # an empty tensor's strides say nothing of a layout: its inputs' stride orders
        # disagree, and the lowering finds no input to walk the rows along (fuzz graph
        # 983 of seed 33402: a lerp's gradients over a batch of 0)
        return False
    dims = axes.of.get(v, ())
    order = [d for d in t.stride_order if d < len(dims) and t.sizes[d] != 1]
    at = [i for i, d in enumerate(order) if dims[d] in axes.reduced]
    if not at:
        return not innermost
    red = [order[i] for i in at]
    together = at == list(range(at[0], at[0] + len(at))) and red == sorted(red)
    return together and (not innermost or at[-1] == len(order) - 1)


def _outputs_misfit(nodes: list[Node], axes: Axes) -> Optional[str]:
    """Why a column sum of ``nodes`` (or the dtype cast of one) cannot be written from the row
    kernel's per-block partials (``ops.axes.column_output_misfit``), or None."""
    sums = [n for n in nodes if axes.node_reduced.get(n) == axes.columns]
    outs = [o for n in sums for o in n.outputs]
    outs += [n.outputs[0] for n in nodes if n.kind in COLUMN_CASTS and n.inputs and n.inputs[0] in outs]
    for o in outs:
        why = column_output_misfit(o, axes)
        if why:
            return why
    return None


def _full_reads(nodes: list[Node], like: int) -> set:
    """Tensor values of rank ``like`` that ``nodes`` read from outside themselves."""
    inside = {o for n in nodes for o in n.outputs}
    return {v for n in nodes for v in n.inputs
            if v not in inside and isinstance(v.type, TensorType) and v.type.rank == like}


def _recasts(nodes: list[Node]) -> list[Node]:
    """The dtype casts of ``nodes`` that cast a cast of a column sum. The row kernel's launcher
    sums the partials and casts them once, to the output's dtype; an autocast bias gradient is
    rounded to bf16 and cast back to float32 (``sum -> to(bf16) -> to(float32)``), so the second
    cast leaves the group and runs on the [C] result (a ViT block's projection bias, whose sum
    otherwise stays a kernel of its own)."""
    sums = {o for n in nodes if n.kind in COLUMN_SUM_KINDS for o in n.outputs}
    casts = [n for n in nodes if n.kind in COLUMN_CASTS and n.inputs]
    cast = {o for n in casts if n.inputs[0] in sums for o in n.outputs}
    out: list[Node] = []
    for n in casts:                         # block order: a chain's later casts follow
        if n.inputs[0] in cast:
            out.append(n)
            cast.update(n.outputs)
    return out


def _reads(nodes: list[Node]) -> set:
    """What ``nodes`` read or compute."""
    return {v for n in nodes for v in n.inputs} | {o for n in nodes for o in n.outputs}


def _row_groups_sharing(part: "_BlockPartition", b: int, wanted: set) -> list[int]:
    """The groups that could take group ``b``'s column sums: on its device, reading or computing
    some of the full-size tensors ``wanted`` that ``b`` reads; those that read all of them first
    (the merge then reads nothing more than the row group alone did), then by how many they
    share. A row group that lacks some still gains: the merged kernel reads the shared tensors
    once instead of twice and each other one once, as the column kernel alone did (a transformer
    block's residual gradient, summed for the projection's bias beside the layer norm's weight
    gradient, is read by the column sums alone)."""
    found = []
    for a in sorted(part.members):
        a_mem = part.members.get(a)
        if a == b or not a_mem or part.device.get(a) != part.device.get(b) or not needs_axes(a_mem):
            continue
        shared = wanted & _reads(a_mem)
        if shared:
            found.append((not wanted <= shared, -len(shared), a))
    return [a for _, _, a in sorted(found)]


def merge_column_sums(part: "_BlockPartition") -> None:
    """Merge each column-sum group into the row group it reads alongside (module docstring);
    ``PYTORCH_NVFUSER_DISABLE=column_sums`` keeps them apart."""
    if config.is_disabled("column_sums"):
        return
    limit = max((part.index[n] for n in part.group), default=-1)
    for b in sorted(part.members):
        col = _column_group(part, b)
        if col is None:
            continue
        b_mem = part.members[b]
        rank = max((len(d) for d in col.of.values()), default=0)
        wanted = _full_reads(b_mem, rank)
        tails = _recasts(b_mem)
        core = [n for n in b_mem if n not in tails]
        for a in _row_groups_sharing(part, b, wanted):
            a_mem = part.members[a]
            union = sorted(a_mem + core, key=part.index.__getitem__)
            axes = analyze(union, columns=True)
            why = axes if isinstance(axes, str) else None
            if why is None and (not axes.columns or not axes.reduced
                                or any(axes.node_reduced.get(n) not in (None, frozenset(), axes.columns) for n in core)):
                why = "the sums of the second group are not column sums of the first"
            elif why is None and not rows_contiguous(union, axes):
                why = "the rows are not contiguous"
            elif why is None and not part.can_join(a_mem, core, limit):
                why = "the merge would create a cycle"
            if why is None:
                why = _outputs_misfit(core, axes)
            if why:
                jit_log("partition", 2, f"column sums of group {b} not merged into group {a}: {why}")
                continue
            extra = wanted - _reads(a_mem)
            more = f"; it also reads {', '.join(sorted('%' + v.name for v in extra))}" if extra else ""
            for n in tails:
                part.members[b].remove(n)
                del part.group[n]
            jit_log("partition", 1, f"group {a} computes the column sums of group {b} per block of rows "
                                    f"({len(core)} node(s)){more}"
                                    + (f"; {len(tails)} cast(s) of a cast of a sum run after it" if tails else ""))
            part.merge_groups(a, b)
            break
