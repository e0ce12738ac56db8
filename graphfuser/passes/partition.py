"""The graph fuser: grow fusion groups from producers to consumers, never creating a cycle.

Per block (nested ``If``/``Loop`` blocks are partitioned on their own):

1. Each node asks the op table whether it is fusible with its profiled types (``ops.fusible``);
   skip-node kinds and disabled devices are rejected too. Every rejection is logged with its
   reason under ``PYTORCH_JIT_LOG_LEVEL=">partition"``.
2. A fusible node joins the group of a producer when the merge keeps the block acyclic: no
   node outside the two sets may sit on a path between them. Side-effecting nodes (in-place
   writes, prints, raises) are ordering barriers, so no group spans one.
   A group holding a reduction or normalization also needs its nodes to share one set of loop
   axes (``ops.axes.analyze``: one reduction domain, no transposed broadcasts); a node that
   would break that starts or joins another group, and the log says why, so a chain that one
   kernel cannot hold is split into the fewest kernels the greedy walk finds.
3. Horizontal mode merges sibling groups that read the same tensor (same axis rule).
4. Groups with fewer than two compute nodes dissolve unless single-node mode is on or the node
   is a normalization (softmax, layer_norm ...), which is a multi-kernel op in eager, except
   under grad one that eager's autograd runs as one kernel forward and one node backward (see
   ``lone_under_grad``): as a group it saves no kernel and costs host time.
5. Each group becomes one ``prim::CpuFusionGroup`` / ``prim::CudaFusionGroup`` node holding a
   subgraph (constants are copied in); the block is re-sorted topologically, keeping the
   original order wherever dependencies allow. A reduction's dims / keepdim / dtype /
   correction / eps that profiling saw with one value fuse as if constant; they stay inputs of
   the subgraph, with their profiled values, until guard insertion makes them constants.
"""
from __future__ import annotations

import heapq
from typing import Optional, Sequence, Union

from ..config import config
from ..ir.clone import clone_node
from ..ir.graph import Block, Graph, Node, Value
from ..ir.implicit import implicit_tensors, reads_implicit_tensor
from ..ir.types import TensorType
from ..log import jit_log
from ..ops import fusible, lookup
from ..ops.axes import Axes, AxisScan, needs_axes, random_misfit
from ..ops.movement import movement_misfit
from .aliasing import AliasSets, may_alias_input
from .functionalize import mark_clone, restore_unfused
from .group_fit import pointwise_misfit
from .lone_groups import composite, one_op_under_grad

_SIDE_EFFECT_KINDS = {
    "prim::SetAttr", "prim::Print", "aten::append", "aten::warn", "aten::copy_",
    "aten::_set_item", "aten::insert", "aten::pop", "aten::clear", "aten::extend", "prim::DictConstruct",
    # a ``with`` block's entry and exit (``torch.no_grad()``, ``torch.enable_grad()``): they switch
    # the grad mode, so no group may take nodes from both sides of one (a group of the no-grad
    # sum and the product after the block had run wholly under no_grad: its result did not
    # require grad, and its backward differentiated through the sum)
    "prim::Enter", "prim::Exit",
}


# prim::RaiseException is not a barrier: a fused group is pure, so computing it on either side of a
# check that may raise changes nothing but wasted work on the raising path; the raise still waits
# for the values its condition reads (data edges). Without this every shape assert of an
# nn.functional wrapper would split the chain around it.


# Ops that update their running-stat arguments (positions 3, 4) in place when the flag at position 5
# (training / use_input_stats) holds, although their schema marks no argument as written.
_RUNNING_STATS_KINDS = frozenset({"aten::batch_norm", "aten::instance_norm", "aten::native_batch_norm",
                                  "aten::_batch_norm_impl_index"})


def _updates_running_stats(node: Node) -> bool:
    if node.kind not in _RUNNING_STATS_KINDS or len(node.inputs) < 6:
        return False
    flag = node.inputs[5]
    if flag.is_constant and flag.constant() is False:
        return False
    return any(not (v.is_constant and v.constant() is None) for v in node.inputs[3:5])


def in_place_kind(kind: str) -> bool:
    """An aten op that writes its first argument (``aten::relu_``; not a dunder like ``__and__``)."""
    return kind.startswith("aten::") and kind.endswith("_") and not kind.endswith("__")


def _mutates(node: Node) -> bool:
    if node.kind in _SIDE_EFFECT_KINDS or in_place_kind(node.kind) or _updates_running_stats(node) \
            or (node.kind == "prim::PythonOp" and getattr(node.attrs.get("call"), "effects", False)) \
            or _writes_an_argument(node):
        return True
    return any(_mutates(n) for b in node.blocks for n in b.nodes)


def _writes_an_argument(node: Node) -> bool:
    """An overload whose schema marks an argument written (``Tensor(a!)``): the ``out=`` variants
    (``torch.mul(a, 2.0, out=o)`` is ``aten::mul`` with a third input, ``mul.out``), whose result
    may go unused while the write is the point (dead code elimination had dropped it)."""
    call = node.schema
    text = getattr(call, "schema", None) if call is not None else None
    return isinstance(text, str) and "!)" in text[:text.rfind("->")]


# blocks up to this many nodes are first tried as one group (_BlockPartition.whole_block)
WHOLE_BLOCK_NODES = 200


def group_kind(device_type: str) -> str:
    return "prim::CudaFusionGroup" if device_type == "cuda" else "prim::CpuFusionGroup"


# scans kept for extension (``_BlockPartition._analyze``), the oldest dropped first
_KEPT_SCANS = 64


class _BlockPartition:
    def __init__(self, block: Block, aliases: Optional[AliasSets] = None,
                 implicit: frozenset[Value] = frozenset()) -> None:
        self.block = block
        self.aliases = aliases
        self.implicit = implicit
        self.nodes = list(block.nodes)
        self.index = {n: i for i, n in enumerate(self.nodes)}
        self.succ: dict[Node, set[Node]] = {n: set() for n in self.nodes}
        self.pred: dict[Node, set[Node]] = {n: set() for n in self.nodes}
        self._edges()
        self.group: dict[Node, int] = {}
        self.members: dict[int, list[Node]] = {}
        self.device: dict[int, object] = {}
        self._reasons: dict[Node, Optional[str]] = {}
        self._scans: dict[frozenset[Node], AxisScan] = {}      # (``_analyze``)
        self._misfits: dict[frozenset[Node], Optional[str]] = {}

    def _top(self, user: Node) -> Optional[Node]:
        """The node of this block that contains ``user`` (itself, or an enclosing If/Loop)."""
        while user is not None and user.owner is not self.block:
            owner_block = user.owner
            user = owner_block.owner if owner_block is not None else None
        return user

    def _edges(self) -> None:
        for n in self.nodes:
            for o in n.outputs:
                for u, _ in o.uses:
                    top = self._top(u)
                    if top is not None and top is not n:
                        self.succ[n].add(top)
                        self.pred[top].add(n)
            # a value returned by a block nested in n is read by n, though it is not a use
            for v in n.nested_returns():
                top = self._top(v.node) if v.node is not None else None
                if top is not None and top is not n:
                    self.succ[top].add(n)
                    self.pred[n].add(top)
        # A node that mutates state is a barrier: every node before it comes before it, every
        # node after it after it. The edges run to the neighbouring barriers only (each node
        # from the barrier before it, and to the barrier after it; the barriers in a chain),
        # which orders and reaches exactly as edges to every node would (a path through a
        # barrier passes the barriers between, and those are ancestors of its end too), without
        # barriers x nodes edges: a ResNet-50's training forward through torch.compile has 106
        # barriers among its 2749 nodes, and its partition took 594 ms with those edges, 277 without.
        last: Optional[Node] = None
        since: list[Node] = []
        for n in self.nodes:
            if last is not None:
                self.succ[last].add(n)
                self.pred[n].add(last)
            if _mutates(n):
                for m in since:
                    self.succ[m].add(n)
                    self.pred[n].add(m)
                last, since = n, []
            else:
                since.append(n)

    # -- reachability ------------------------------------------------------------------------
    def _closure(self, start: set[Node], edges: dict[Node, set[Node]],
                 within: Optional[set[Node]] = None, limit: Optional[int] = None) -> set[Node]:
        """Nodes reachable from ``start`` along ``edges``, with every existing group contracted to
        one unit: reaching one member reaches them all. Node-level reachability alone misses a
        cycle through a third group (a -> c1, c2 -> b with c1, c2 in one group C). With
        ``within``, only nodes of that set are visited; with ``limit``, only nodes at or before
        that position of the block."""
        seen, stack = set(), list(start)
        index = self.index
        while stack:
            n = stack.pop()
            for m in edges[n]:
                if m in seen or (within is not None and m not in within) or \
                        (limit is not None and index[m] > limit):
                    continue
                seen.add(m)
                stack.append(m)
                for k in self.members.get(self.group.get(m, -1), ()):
                    if k not in seen and (within is None or k in within):
                        seen.add(k)
                        stack.append(k)
        return seen

    def can_merge(self, a: set[Node], b: set[Node], limit: Optional[int] = None) -> bool:
        """False when a path from ``a`` to ``b`` (or back) leaves ``a | b``: merging would make a
        cycle. Every node on such a path reaches its end, so the forward search only visits the
        end's ancestors (and the two sets themselves): two full searches per check, not four.
        ``limit``: the position of the last grouped node of the block (while ``run`` grows
        groups in block order): no node after it leads back to a group, so none is visited."""
        union = a | b
        up_b = self._closure(b, self.pred, limit=limit)
        if (self._closure(a, self.succ, up_b | union, limit) & up_b) - union:
            return False
        up_a = self._closure(a, self.pred, limit=limit)
        return not ((self._closure(b, self.succ, up_a | union, limit) & up_a) - union)

    def can_absorb(self, node: Node, members: Sequence[Node]) -> bool:
        """``can_merge({node}, members)`` for a node that comes after every grouped node (how
        ``run`` grows groups, in block order). No path can lead from ``node`` back to a group, so
        the only cycle is one leaving ``members`` and entering ``node`` from outside; every node
        on it lies before ``node``, so the search stops at ``node``'s position."""
        return self.can_join([node], members, self.index[node])

    def can_join(self, a: Sequence[Node], b: Sequence[Node], limit: int) -> bool:
        """``can_merge`` for two convex units (groups, or a node not yet grouped) when no grouped
        node lies after position ``limit``: a node after it cannot lead back to a group, so the
        searches stop there. A path leaving ``a`` and entering ``b`` enters it from outside both
        (a re-entry into ``a`` would make ``a`` non-convex), so the check is: does the search
        from ``a`` reach a predecessor of ``b`` outside ``a | b`` (and the same the other way)."""
        union = set(a)
        union.update(b)
        index, succ = self.index, self.succ
        for src, dst in ((a, b), (b, a)):
            seen: set[Node] = set()
            stack = list(src)
            while stack:
                n = stack.pop()
                for m in succ[n]:
                    if m in seen or index[m] > limit:
                        continue
                    seen.add(m)
                    stack.append(m)
                    for k in self.members.get(self.group.get(m, -1), ()):
                        if k not in seen:
                            seen.add(k)
                            stack.append(k)
            if any(p in seen and p not in union for d in dst for p in self.pred[d]):
                return False
        return True

    # -- grouping ----------------------------------------------------------------------------
    def reason(self, node: Node) -> Optional[str]:
        """Why ``node`` stays out of every group ("" for nodes that are not ops), None where it
        may join one. Asked by ``whole_block`` and again by the greedy merges where the whole
        block does not fit: the answer depends on the node, the knobs and the block's alias
        sets, none of which change while the block is partitioned."""
        if node not in self._reasons:
            self._reasons[node] = self._reason(node)
        return self._reasons[node]

    def _reason(self, node: Node) -> Optional[str]:
        if node.kind in config.skip_node_kinds:
            return f"{node.kind} is a skipped node kind (set_skip_node_kind)"
        if node.kind == "prim::Constant" or not (node.kind.startswith("aten::") or lookup(node.kind)):
            return ""
        if reads_implicit_tensor(node, self.implicit):
            return ("a number input may hold the tensor of an implicit conversion (ir/implicit.py); "
                    "a kernel's scalar argument is a number")
        out = node.outputs[0].type if len(node.outputs) == 1 else None
        if isinstance(out, TensorType) and out.device is not None:
            if out.device.type == "cpu" and not config.fuse_cpu:
                return "CPU fusion is disabled (fuse_cpu: false)"
            if out.device.type == "cuda" and not config.fuse_cuda:
                return "CUDA fusion is disabled (fuse_cuda: false)"
            if out.device.type not in ("cpu", "cuda"):
                return f"no fusion backend for device {out.device}"
        why = fusible(node)
        if why is None and self.aliases is not None and may_alias_input(node) \
                and self.aliases.is_written(node.outputs[0]):
            # eager may return the input itself (or a view): a fused copy would not see the write
            return (f"{node.kind} may return an alias of its input, and an in-place op writes that "
                    "alias set; fusing it would make a copy that misses the write")
        return why

    def misfit(self, a: set[Node], b: set[Node]) -> Optional[str]:
        """Why one kernel cannot hold ``a | b`` (reductions and broadcasts must share loop axes;
        a pointwise group's inputs must broadcast together as its guard will require). The
        answer depends on the union alone: the horizontal merges ask about the same pair of
        groups once per tensor they share (a GPT-2 backward graph under autocast: 100 questions,
        36 distinct unions), so each union is answered once per block."""
        union = a | b
        key = frozenset(union)
        if key not in self._misfits:
            self._misfits[key] = self._misfit(a, b, union)
        return self._misfits[key]

    def _misfit(self, a: set[Node], b: set[Node], union: set[Node]) -> Optional[str]:
        moved = movement_misfit(union)
        if moved:
            return moved
        if not needs_axes(union):
            return pointwise_misfit(union)
        axes = self._analyze(a, b, union)
        if isinstance(axes, str):
            return axes
        return random_misfit(union, axes)

    def _analyze(self, a: set[Node], b: set[Node], union: set[Node]) -> Union[Axes, str]:
        """``analyze`` of ``union`` in block order. Where one side is a single node after every
        node of the other, and the other's scan is kept from an earlier fit, that scan extended
        by the node (``AxisScan``): ``run`` grows a group one node at a time, and analyzing the
        whole group again for each made the partition quadratic in a group's size."""
        one, rest = (a, b) if len(a) == 1 else (b, a)
        scan = self._scans.get(frozenset(rest)) if len(one) == 1 and rest else None
        if scan is not None:
            (node,) = one
            if self.index[node] > self.index[scan.nodes[-1]]:
                scan = scan.copy()
                why = scan.add(node)
                if why is not None:
                    return why
            else:
                scan = None
        if scan is None:
            scan = AxisScan()
            for n in sorted(union, key=self.index.__getitem__):
                why = scan.add(n)
                if why is not None:
                    return why
        axes = scan.finish()
        if not isinstance(axes, str):
            if len(self._scans) >= _KEPT_SCANS:         # (the groups growing now are the last few)
                del self._scans[next(iter(self._scans))]
            self._scans[frozenset(union)] = scan
        return axes

    def merge_groups(self, keep: int, drop: int) -> None:
        for n in self.members.pop(drop):
            self.group[n] = keep
            self.members[keep].append(n)
        self.members[keep].sort(key=self.index.__getitem__)
        self.device.pop(drop, None)

    def whole_block(self) -> Optional[list[Node]]:
        """Every fusible node of a small block as one group, where they are one piece through
        their data edges, that group fits one kernel and nothing outside it stands between its
        nodes (no mutation, no nested block, no path from a member through an outside node back
        to a member), else None. The greedy merges
        below ask ``misfit`` once per node and producer group, each a fresh ``analyze`` of the
        union: a backward graph of one forward group (the common case, all one group) asked
        it about 13 times; an HF ResNet-50 training step's 53 of them spent 0.66 s of their
        0.87 s of partitioning there (CPU). A block whose whole does not fit goes the greedy
        way: the groups found here are the ones the greedy merges would reach, or (where a
        part misfits that the whole does not) one group that passes the same checks."""
        if len(self.nodes) > WHOLE_BLOCK_NODES:
            return None
        members, outside = [], set()
        for n in self.nodes:
            if n.blocks or _mutates(n):
                return None
            if self.reason(n) is None:
                members.append(n)
            else:
                outside.add(n)
        devices = {n.outputs[0].type.device for n in members}
        if len(members) < 2 or len(devices) != 1:
            return None
        inside = set(members)
        reached = set()         # outside nodes a member's values lead to
        for n in self.nodes:
            if n in outside and any(p in inside or p in reached for p in self.pred[n]):
                reached.add(n)
            elif n in inside and any(p in reached for p in self.pred[n]):
                return None
        # one piece through their data edges, as merges of producers and consumers would join
        # them (unrelated nodes join only in horizontal mode, its own way)
        seen, stack = {members[0]}, [members[0]]
        while stack:
            n = stack.pop()
            for m in self.succ[n] | self.pred[n]:
                if m in inside and m not in seen:
                    seen.add(m)
                    stack.append(m)
        if len(seen) != len(members) or self.misfit(inside, set()):
            return None
        return members

    def run(self) -> list[list[Node]]:
        next_id = 0
        whole = self.whole_block()
        if whole is not None:
            self.members[0] = whole
            self.group.update(dict.fromkeys(whole, 0))
            self.device[0] = whole[0].outputs[0].type.device
            next_id = 1
            for node in whole:
                jit_log("partition", 2, f"{node.where()} -> group 0 (the block's fusible nodes fit one kernel)")
        for node in self.nodes if whole is None else ():
            why = self.reason(node)
            if why is not None:
                if why:
                    jit_log("partition", 1, f"rejected {node.where()}: {why}")
                continue
            dev = node.outputs[0].type.device
            gid = None
            producers = []
            for v in node.inputs:
                p = v.node
                if p is not None and p in self.group and self.group[p] not in producers:
                    producers.append(self.group[p])
            for pg in producers:
                if self.device[pg] != dev:
                    jit_log("partition", 1, f"{node.where()} not merged with group {pg}: device {dev} vs {self.device[pg]}")
                    continue
                current = set(self.members[gid]) if gid is not None else {node}
                misfit = self.misfit(current, set(self.members[pg]))
                if misfit:
                    jit_log("partition", 1, f"{node.where()} not merged with group {pg}: {misfit}")
                    continue
                ok = self.can_absorb(node, self.members[pg]) if gid is None else \
                    self.can_join(self.members[gid], self.members[pg], self.index[node])
                if ok:
                    if gid is None:
                        self.group[node] = pg
                        self.members[pg].append(node)
                        gid = pg
                    else:
                        self.merge_groups(gid, pg)
                else:
                    jit_log("partition", 1, f"{node.where()} not merged with group {pg}: the merge would create a cycle")
            if gid is None:
                gid, next_id = next_id, next_id + 1
                self.group[node] = gid
                self.members[gid] = [node]
                self.device[gid] = dev
            jit_log("partition", 2, f"{node.where()} -> group {gid}")
        from .reduction_split import split_reduction_chains

        split_reduction_chains(self, next_id)
        if config.horizontal_mode:
            from .horizontal import merge_siblings

            merge_siblings(self)
        from .column_sums import merge_column_sums

        merge_column_sums(self)
        groups = []
        for gid, mem in sorted(self.members.items()):
            if not mem:          # every node moved out (reduction_split's copies, merges)
                continue
            if len(mem) < 2 and not config.single_node_mode and not composite(mem[0]):
                jit_log("partition", 1, f"dropped single-node group {mem[0].where()} (single-node mode is off)")
                continue
            lone = one_op_under_grad(mem)
            if lone is not None and not config.single_node_mode:
                jit_log("partition", 1, f"dropped single-node group {lone.where()}"
                                        f"{f' (and {len(mem) - 1} identity casts / lists)' if len(mem) > 1 else ''}: "
                                        "under grad, eager runs it as one kernel and one backward node, so a group "
                                        "saves no kernel and adds an autograd node, a backward program and guards")
                continue
            groups.append(sorted(mem, key=self.index.__getitem__))
        return groups


def _materialize(block: Block, groups: list[list[Node]]) -> list[Node]:
    """Replace each member list by one fusion-group node; re-sort the block topologically."""
    graph = block.graph
    part = _BlockPartition(block)  # fresh edges over the unchanged block
    unit_of: dict[Node, object] = {n: n for n in block.nodes}
    nested_returned = {v for n in block.nodes for v in n.nested_returns()}
    group_nodes = []
    for mem in groups:
        memset = set(mem)
        sub = Graph()
        vmap: dict[Value, Value] = {}
        inputs: list[Value] = []
        for n in mem:
            for v in n.inputs:
                if v in vmap:
                    continue
                if v.node is not None and v.node.kind == "prim::Constant" and v.node not in memset:
                    clone_node(v.node, sub, vmap, sub.block)
                    continue
                if v.node is not None and v.node.kind == "prim::ListConstruct" and v.node not in memset:
                    # dims / normalized_shape lists are rebuilt inside the group (their length
                    # and constant items are part of the kernel's specialization)
                    for item in v.node.inputs:
                        if item in vmap:
                            continue
                        if item.is_constant:
                            clone_node(item.node, sub, vmap, sub.block)
                        else:
                            vmap[item] = sub.add_input(item.name, item.type)
                            vmap[item].profiled = item.profiled
                            inputs.append(item)
                    clone_node(v.node, sub, vmap, sub.block)
                    continue
                if v.node not in memset:
                    vmap[v] = sub.add_input(v.name, v.type)
                    vmap[v].profiled = v.profiled   # guard insertion specializes stable scalars
                    inputs.append(v)
            mark_clone(n, clone_node(n, sub, vmap, sub.block))
        outputs = []
        for n in mem:
            for o in n.outputs:
                external = (any(part._top(u) not in memset for u, _ in o.uses) or _returned(block, o)
                            or o in nested_returned)
                if external:
                    outputs.append(o)
        if not outputs:
            jit_log("partition", 1, f"dropped group of {len(mem)} node(s) from {mem[0].where()}: nothing reads its results")
            continue
        sub.block.returns = [vmap[o] for o in outputs]
        dev = mem[0].outputs[0].type.device
        gnode = graph.create(group_kind(dev.type), inputs, [o.type for o in outputs],
                             out_names=[o.name for o in outputs])
        gnode.subgraph = sub
        gnode.owner = block
        for old, new in zip(outputs, gnode.outputs):
            for u, i in list(old.uses):
                if part._top(u) not in memset:
                    u.replace_input(i, new)
            block.replace_return_everywhere(old, new)
        for n in mem:
            unit_of[n] = gnode
        group_nodes.append((gnode, mem))
    # Topological re-sort over units (groups collapse their members).
    units: list[object] = []
    first: dict[object, int] = {}
    for i, n in enumerate(block.nodes):
        u = unit_of[n]
        if u not in first:
            first[u] = i
            units.append(u)
    deps: dict[object, set] = {u: set() for u in units}
    for n in block.nodes:
        for p in part.pred[n]:
            if unit_of[p] is not unit_of[n]:
                deps[unit_of[n]].add(unit_of[p])
    users: dict[object, set] = {u: set() for u in units}
    for u, ds in deps.items():
        for d in ds:
            users[d].add(u)
    indeg = {u: len(deps[u]) for u in units}
    heap = [(first[u], k, u) for k, u in enumerate(units) if indeg[u] == 0]
    key = {u: k for k, u in enumerate(units)}
    heapq.heapify(heap)
    order = []
    while heap:
        _, _, u = heapq.heappop(heap)
        order.append(u)
        for w in users[u]:
            indeg[w] -= 1
            if indeg[w] == 0:
                heapq.heappush(heap, (first[w], key[w], w))
    assert len(order) == len(units), "partition produced a cycle"
    for gnode, mem in group_nodes:
        for n in mem:
            n.drop_inputs()
            n.owner = None
    block.nodes = []
    for u in order:
        block.append(u)
    return [g for g, _ in group_nodes]


def _returned(block: Block, v: Value) -> bool:
    return v in block.returns


def _partition_block(block: Block, aliases: AliasSets, implicit: frozenset[Value]) -> list[Node]:
    made = []
    for n in list(block.nodes):
        for b in n.blocks:
            made += _partition_block(b, aliases, implicit)
    groups = _BlockPartition(block, aliases, implicit).run()
    if groups:
        made += _materialize(block, groups)
    return made


def partition(graph: Graph) -> list[Node]:
    """Create fusion groups in ``graph`` (in place); returns the new group nodes.

    Shape reads (and the random ops' element counts) move to the value they come from
    (``passes/sources.py``), and dead nodes are dropped before and after that (a dead op would make a group
    member, or a whole group, whose result nobody reads). Functionalized in-place ops that no group took are turned back into
    in-place ops; automatically split bias adds that no group took go back into their conv /
    linear."""
    from .bias import restore_unfused_bias
    from .dce import dce
    from .sources import read_counts_from_sources, read_shapes_from_sources

    # dead nodes go before the shape reads move too: a normalization read only for its shape
    # keeps that read (and with it eager's shape check), which a dead reader of its output
    # would have hidden (fuzz graph 772 of seed 34701: ``layer_norm(x, [7]).size(-1)`` beside a
    # dead ``atan2`` of it; a batch of 0 raised in eager, not here)
    dce(graph)
    read_shapes_from_sources(graph)
    read_counts_from_sources(graph)
    dce(graph)
    from ..ops import bind_memo

    with bind_memo():       # (no node's inputs change until the groups are made)
        made = _partition_block(graph.block, AliasSets(graph), implicit_tensors(graph))
    restore_unfused(graph)
    restore_unfused_bias(graph)
    return made
