"""The autograd node of a differentiable fusion group.

``make_differentiable_runner(group, forward)`` wraps the group's compiled forward in a
``torch.autograd.Function``: the forward launches the fused kernel (no autograd graph inside),
keeps the group's inputs for the backward (see ``backward.py`` for why nothing else is saved),
and the backward runs the group's backward graph as a scripted graph of its own, which the
profiling executor partitions, guards and compiles like any other. Outside grad mode, or when
no input requires grad, the forward kernel runs directly.

Double backward (``create_graph=True``) runs the group's eager program on the saved inputs and
differentiates that, with a one-time warning: the fused backward is not itself differentiable.
"""
from __future__ import annotations

import threading

import weakref
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from ..ir.graph import Graph, Node
from ..ir.printer import SECTION_HOOKS, print_graph
from ..log import jit_log, jit_log_graph, warn
from ..runtime.pycode import define
from .backward import NO_GRADIENT, BackwardPlan, plan_backward

STATS = {"forward": 0, "backward": 0, "double_backward": 0}
_warned_double = False
# group node -> its autograd node, for graph_for's printer. Weak both ways: the scripted
# function's runners own the autograd node (which holds the group), so the entry goes with them.
GROUPS: "weakref.WeakKeyDictionary[Node, weakref.ref[DifferentiableGroup]]" = weakref.WeakKeyDictionary()


def live_groups() -> list["DifferentiableGroup"]:
    """The differentiable groups of scripted functions still alive."""
    return [dg for dg in (r() for r in list(GROUPS.values())) if dg is not None]


@dataclass(frozen=True)
class GraphRunners:
    """How the graphs an autodiff node needs are run; the executor hands them in (autodiff sits
    below the executor and never imports it).

    ``script(graph, name, known, like=None)``: a profiled, fused runner of a backward graph (the executor's
    ``ScriptedFunction.from_graph`` with ``replay=False``: replay would copy every input into
    static buffers and clone every output, a second pass over a backward's tensors, which are
    fresh every step. Measured on an H100, ConvNeXt-T, batch 64, bf16 autocast: replayed backward
    groups added 343 device-to-device copies, 4.7 ms of the step's 27 ms of kernels).
    ``like``: the group's full backward, which a partial one optimizes beside (its family).
    ``eager(graph)``: the group's program op by op through aten (fallbacks, double backward)."""

    script: Callable[..., Callable[..., Any]]
    eager: Callable[[Graph], Callable[..., tuple]]


class DifferentiableGroup:
    """Forward kernel + backward graph of one group: what ``graph_for`` shows as
    ``prim::DifferentiableGraph``."""

    def __init__(self, group: Node, forward: Callable[..., tuple], plan: BackwardPlan, sub: Graph,
                 runners: GraphRunners, saved: int = 0) -> None:
        self.group = group
        self.runners = runners
        self.forward = forward
        self.plan = plan
        self.sub = sub              # what ``forward`` computes: the group's subgraph, or a copy that
        self.saved = saved          # appends ``saved`` statistics to its outputs (saved.py)
        self.n_in = len(sub.inputs)
        self.n_out = len(sub.outputs) - saved
        self.tensor_in = [i for i, v in enumerate(sub.inputs) if v.type.is_tensor]
        # saved for the backward (version-checked): the tensor inputs its graph reads. The others
        # (a batch norm's running stats, which a copy_ after the group updates in place) are
        # kept as plain references, for the eager program of a double backward only.
        bin_ = plan.graph.inputs
        self.saved_in = [i for i in self.tensor_in if bin_[i].uses or bin_[i] in plan.graph.block.returns]
        self.unsaved_in = [i for i in self.tensor_in if i not in self.saved_in]
        # saved inputs the graph writes in place after the group (through any alias) are saved as
        # copies: autograd's version check would otherwise fail where eager's op saved nothing
        # (its bf16 rms_norm keeps a float32 copy) or the backward would read the new values
        from ..passes.aliasing import written_after

        self.copied_in = [i for i in written_after(group) if i in self.saved_in]
        self.non_diff_out = [k for k in range(self.n_out) if k not in plan.diff_outputs]
        self.backward = runners.script(plan.graph, f"{group.kind.split('::')[-1]}_backward", self.known(plan))
        # the group's own program, not ``sub``'s statistics-saving copy (make_differentiable_runner)
        self.eager = runners.eager(group.subgraph)
        self._partial: dict[frozenset, Any] = {}
        self.fn = self._function()

    def _function(self) -> type:
        """The autograd Function of the group, its forward and backward generated as straight-line
        Python once (as host programs are): no per-call loops over the inputs, no lists built."""
        n, plan = self.n_in, self.plan
        xs = [f"x{i}" for i in range(n)]
        kept = [i for i in range(n) if i not in self.saved_in]   # non-tensors, unsaved tensors: references
        n_out = self.n_out
        gs = [f"g{k}" for k in range(n_out)]
        ss = [f"outs[{n_out + j}]" for j in range(self.saved)]   # statistics saved, not returned
        ns: dict[str, Any] = {"_run": self.forward, "_S": STATS, "_grad_enabled": torch.is_grad_enabled,
                              "_zeros_like": torch.zeros_like, "_dg": self}
        written = {j: k for j, k in sorted(getattr(self.sub, "writes_into", {}).items())
                   if j in self.non_diff_out and k in self.unsaved_in}
        # gradients left undefined (an output no loss reaches) stay None, not zeros: its terms are
        # left out of the backward, as eager never runs the nodes behind it (0 * the NaN derivative
        # of asin past 1 would otherwise poison another output's gradient)
        L = [f"def forward(ctx, {', '.join(xs)}):",
             "    ctx.set_materialize_grads(False)",
             f"    outs = _run({', '.join(xs)})",
             # an eager fallback may return a view of an input (an instance norm of an empty
             # tensor): a custom Function's view output cannot be written in place later (fuzz
             # graph 2088 of seed 9595), so such outputs are copies
             f"    if {' or '.join(f'outs[{k}]._is_view()' for k in range(n_out) if k not in written)}:",
             "        outs = [o.clone() if o._is_view() else o for o in outs]"]
        if written:
            # outputs the kernel wrote into their input buffers (a batch norm's running statistics,
            # ``passes/in_place.py``) are those inputs, marked dirty: autograd then returns them as
            # they are, not as views of themselves (a view each), and the host program skips its
            # copy_ of a buffer onto itself (8.5 us of host time each on an H100 host). An eager
            # fallback's fresh results are returned as results, which that copy_ writes, or not
            # (an empty batch leaves the running statistics alone).
            L += [f"    if {' and '.join(f'outs[{j}] is {xs[k]}' for j, k in written.items())}:",
                  f"        ctx.mark_dirty({', '.join(xs[k] for k in written.values())})"]
        if self.saved_in:
            saved = [f"{xs[i]}.clone()" if i in self.copied_in else xs[i] for i in self.saved_in]
            L.append(f"    ctx.save_for_backward({', '.join(saved)})")
        # the statistics are the group's own fresh outputs, never returned: nothing can write
        # them, so they are kept as references, without save_for_backward's version records
        if kept or ss:
            L.append(f"    ctx.kept = ({', '.join([xs[i] for i in kept] + ss)},)")
        if self.non_diff_out:
            L.append(f"    ctx.mark_non_differentiable({', '.join(f'outs[{k}]' for k in self.non_diff_out)})")
        L += ['    _S["forward"] += 1',
              f"    return tuple(outs{f'[:{n_out}]' if ss else ''})",
              f"def backward(ctx, {', '.join(gs)}):"]
        sv = [f"s{j}" for j in range(self.saved)]
        if self.saved_in:
            L.append(f"    ({', '.join(xs[i] for i in self.saved_in)},) = ctx.saved_tensors")
        if kept or sv:
            L.append(f"    ({', '.join([xs[i] for i in kept] + sv)},) = ctx.kept")
        # the engine runs a backward in grad mode only for create_graph=True: a double backward
        L += ["    if _grad_enabled():",
              f"        return _dg.double_backward([{', '.join(xs)}], ({', '.join(gs)},))",
              '    _S["backward"] += 1',
              f"    if {' or '.join(f'{gs[k]} is None' for k in plan.diff_outputs)}:",
              f"        return _dg.partial([{', '.join(xs)}], ({', '.join(gs)},), [{', '.join(sv)}])",
              f"    r = _dg.backward({', '.join(xs + [gs[k] for k in plan.diff_outputs] + sv)})"]
        grads = ["None"] * n
        for j, i in enumerate(plan.grad_inputs):
            grads[i] = "r" if len(plan.grad_inputs) == 1 else f"r[{j}]"
        for i in plan.zero_inputs:
            grads[i] = f"_zeros_like({xs[i]})"
        L.append(f"    return ({', '.join(grads)},)")
        source = "\n".join(L) + "\n"
        define(source, f"<graphfuser autograd {self.group.kind}>", ns)
        fn = type("FusedGroup", (torch.autograd.Function,), {"forward": staticmethod(ns["forward"]),
                                                            "backward": staticmethod(ns["backward"])})
        fn.source = source
        # Function.apply (Python) binds default arguments and unwraps functorch's dead wrappers
        # before calling the C apply; a group's forward has no defaults, and outside functorch's
        # transforms the C apply is called directly
        c_apply = super(torch.autograd.Function, fn).apply
        functorch_active = torch._C._are_functorch_transforms_active
        py_apply = fn.apply

        forward, n_out = self.forward, self.n_out
        if self.saved:
            def run(*args: Any) -> tuple:
                if torch.is_grad_enabled():
                    return py_apply(*args) if functorch_active() else c_apply(*args)
                return tuple(forward(*args)[:n_out])
        else:
            def run(*args: Any) -> tuple:
                if torch.is_grad_enabled():
                    return py_apply(*args) if functorch_active() else c_apply(*args)
                return forward(*args)
        # tensor inputs no gradient reaches (the operand of a comparison only) enter the Function
        # detached, as eager's ops record no edge to them: with an edge, autograd's engine would
        # run the node that made such an input, whose saved tensors an in-place write after it may
        # have invalidated (fuzz graph 1829 of seed 33651: clamp_max(v0) > 0 as a where's mask,
        # then v0.copy_(x0): "modified by an inplace operation", where eager never runs that node)
        reach = set(plan.grad_inputs) | set(plan.zero_inputs) | set(written.values())
        cut = [i for i in self.tensor_in if i not in reach]
        if cut:
            inner = run

            def run(*args: Any) -> tuple:     # noqa: F811 - the same entry, some inputs detached
                if torch.is_grad_enabled():
                    args = list(args)
                    for i in cut:
                        a = args[i]
                        if a is not None and a.requires_grad:
                            args[i] = a.detach()
                return inner(*args)
        self.run = run
        return fn

    def known(self, plan: BackwardPlan) -> dict[int, str]:
        """What the backward's guards need not check again (``guards.guard_source``): the inputs
        this node saved are the tensors the forward group's guard accepted (those saved as copies
        excepted: a clone's layout is its own), the statistics are the kernel's own outputs, and
        the gradients come from autograd's engine with their outputs' shapes and dtypes."""
        n, k = self.n_in, len(plan.diff_outputs)
        known = {i: "saved" for i in self.saved_in if i not in self.copied_in}
        known.update({n + j: "grad" for j in range(k)})
        known.update({n + k + j: "saved" for j in range(self.saved)})
        return known

    def partial(self, args: list, gouts: tuple, saved: list) -> tuple:
        """The backward when some outputs' gradients are undefined: a backward graph of the outputs
        whose gradients are (built once per such set)."""
        key = frozenset(k for k in self.plan.diff_outputs if gouts[k] is not None)
        if key not in self._partial:
            plan = plan_backward(self.sub, key, self.saved) if key else NO_GRADIENT
            self._partial[key] = plan if isinstance(plan, str) else \
                (plan, self.runners.script(plan.graph, f"{self.group.kind.split('::')[-1]}_backward_partial",
                                           self.known(plan), like=self.backward))
        entry = self._partial[key]
        full: list[Optional[torch.Tensor]] = [None] * self.n_in
        if isinstance(entry, str):
            if entry == NO_GRADIENT:
                return tuple(full)
            zeros = getattr(entry, "zero_inputs", None)
            if zeros is not None:
                # only zero-derivative ops between these outputs and the inputs (a round beside a
                # batch norm whose output's gradient is undefined): zeros, as eager's nodes give,
                # never the full backward with zeros for the undefined gradients (a batch norm of
                # NaN statistics made them NaN: fuzz graph 829 of CPU seed 34452)
                for i in zeros:
                    full[i] = torch.zeros_like(args[i])
                return tuple(full)
            # (not expected: a subset of a differentiable group's outputs is differentiable)
            gouts = tuple(g if g is not None else torch.zeros_like(o) for g, o in zip(gouts, self.eager(*args)))
            plan, run = self.plan, self.backward
        else:
            plan, run = entry
        r = run(*args, *[gouts[k] for k in plan.diff_outputs], *saved)
        rs = (r,) if len(plan.grad_inputs) == 1 else r
        for i, g in zip(plan.grad_inputs, rs):
            full[i] = g
        for i in plan.zero_inputs:
            full[i] = torch.zeros_like(args[i])
        return tuple(full)

    def double_backward(self, args: list, gouts: tuple) -> tuple:
        global _warned_double
        if not _warned_double:
            _warned_double = True
            warn(f"graphfuser: double backward through {self.group.kind} runs its eager program "
                 "(the fused backward is not differentiable)")
        STATS["double_backward"] += 1
        ins = [a for i, a in enumerate(args) if i in self.tensor_in and a.requires_grad]
        outs = self.eager(*args)
        pairs = [(outs[k], gouts[k]) for k in self.plan.diff_outputs
                 if outs[k].requires_grad and gouts[k] is not None]
        res = torch.autograd.grad([o for o, _ in pairs], ins, [g for _, g in pairs],
                                  create_graph=True, allow_unused=True)
        full: list[Optional[torch.Tensor]] = [None] * self.n_in
        it = iter(res)
        for i, a in enumerate(args):
            if i in self.tensor_in and a.requires_grad:
                full[i] = next(it)
        return tuple(full)

    def __call__(self, *args: Any) -> tuple:
        return self.run(*args)

    def text(self, name: str) -> str:
        """The ``prim::DifferentiableGraph`` section printed after the group's own section: the
        forward group, what it saves, and the backward graph (optimized once it has run)."""
        sub = self.sub
        index = name.rsplit("_", 1)[-1]
        saved = ", ".join([f"%{sub.inputs[i].name}" for i in self.saved_in]
                          + [f"%{v.name} (statistics)" for v in sub.outputs[self.n_out:]])
        bwd = self.backward._optimized or self.backward.graph
        body = print_graph(bwd).rstrip("\n").splitlines()
        return "\n".join([f"with prim::DifferentiableGraph_{index} = {name} as one autograd node:",
                          f"  forward = {name}  # saves {saved}; the backward recomputes intermediates",
                          "  backward:"] + ["    " + line for line in body]) + "\n"


def _section(node: Node, name: str) -> Optional[str]:
    ref = GROUPS.get(node)
    dg = ref() if ref is not None else None
    return dg.text(name) if dg is not None else None


SECTION_HOOKS.append(_section)


_calling_thread = [False]
# autograd's multithreading before graphfuser turned it off (None: not turned off)
MULTITHREADING_BEFORE: list = [None]


COMPILE_THREAD_PREFIX = "graphfuser-compile"
_deferred = [False]


def settle_calling_thread() -> None:
    """What a compile thread deferred (``_backward_on_the_calling_thread``), done on this one."""
    if _deferred[0]:
        _deferred[0] = False
        _backward_on_the_calling_thread()


def _backward_on_the_calling_thread() -> None:
    """Once a CUDA group runs as an autograd node, backward passes run on the thread that calls
    them (``torch.autograd.set_multithreading_enabled(False)``), not on autograd's CUDA device
    thread. The group's backward is Python, and on the device thread each such node cost about
    340 us more (H100, vit_small bf16 training, batch 64, 39 group backwards: backward() 24.7 ms
    against 11.5 ms on the calling thread; in another measurement the step 23.7 ms against 17.9,
    eager's 25.4 either way). Where the time goes between the nodes is not known yet.
    What runs is unchanged; backward passes of several GPUs in one process no longer overlap.
    ``PYTORCH_NVFUSER_DISABLE=calling_thread_backward`` keeps the device threads."""
    from ..config import config

    if _calling_thread[0] or config.is_disabled("calling_thread_backward"):
        return
    if threading.current_thread().name.startswith(COMPILE_THREAD_PREFIX):
        # the setting is per thread: a compile thread (the executor builds a graph's runners on
        # several) leaves it to the thread that called the graph (``settle_calling_thread``)
        _deferred[0] = True
        return
    _calling_thread[0] = True
    if torch.autograd.is_multithreading_enabled():
        MULTITHREADING_BEFORE[0] = True
        torch._C._set_multithreading_enabled(False)
        jit_log("graph_fuser", 1, "backward passes run on the calling thread from now on "
                                  "(PYTORCH_NVFUSER_DISABLE=calling_thread_backward keeps autograd's device threads)")


def make_differentiable_runner(group: Node, forward: Callable[..., tuple], runners: GraphRunners,
                               sub: Optional[Graph] = None, saved: int = 0) -> Callable[..., tuple]:
    """``forward`` (the group's compiled runner) as one autograd node when the group was
    specialized for inputs requiring grad; ``forward`` itself otherwise. A group whose backward
    cannot be built runs its eager program, and the reason is logged under ``>partition``.
    ``sub``: what ``forward`` computes (default: the group's subgraph), whose last ``saved``
    outputs are statistics (``saved.save_statistics``) that only the autograd node's backward reads.

    The eager program (of a group left to eager, and of a node's double backward) is the group's
    own subgraph, never ``sub``: where ``sub`` saves statistics, its ``graphfuser::batch_norm_train``
    runs eagerly as a composite of torch ops (``ops.norm_programs.batch_norm_train_eager``), and autograd
    then differentiates that composite in float32 instead of running eager's batch-norm backward.
    A MobileNetV3 block, whose batch norm + hardswish groups have no fused backward, had its first
    conv's and batch norm's weight gradients 1.39x and 1.27x eager's distance from float64 (rms
    over 24 steps) that way; 1.01x and 0.97x with the batch norm's own program."""
    sub = sub or group.subgraph
    if not any(v.type.is_tensor and getattr(v.type, "requires_grad", None) for v in sub.inputs):
        return _first(forward, len(sub.outputs) - saved, saved)
    plan = plan_backward(sub, saved=saved)
    if plan == NO_GRADIENT:
        jit_log("partition", 1, f"{group.kind} runs its forward kernel under grad: {plan}")
        return _first(forward, len(sub.outputs) - saved, saved)
    if isinstance(plan, str):
        jit_log("partition", 1, f"{group.kind} not fused under grad: {plan}; it runs eagerly")
        return runners.eager(group.subgraph)   # its own outputs: no statistics to drop
    if group.kind.startswith("prim::Cuda"):
        _backward_on_the_calling_thread()
    jit_log("partition", 1, f"{group.kind} runs under grad as one autograd node; its backward graph "
                            f"returns the gradients of inputs {plan.grad_inputs}")
    jit_log_graph("graph_fuser", f"Backward of {group.kind} (before fusion):", plan.graph)
    dg = DifferentiableGroup(group, forward, plan, sub, runners, saved)
    GROUPS[group] = weakref.ref(dg)    # read by graph_for's printer
    return dg


def _first(run: Callable[..., tuple], n: int, saved: int) -> Callable[..., tuple]:
    """``run`` without the ``saved`` statistics it appends (a group that runs no autograd node)."""
    if not saved:
        return run
    return lambda *args: tuple(run(*args)[:n])
