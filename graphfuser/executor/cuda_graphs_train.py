"""Steady-state CUDA graph replay of training calls: the forward and its backward, a graph each.

A training step of a mid-size model at batch 64 is host-bound on an H100: vit_small under bf16
autocast has 14.8 ms of GPU work per step (one fwd + bwd graph of eager's, captured by
``torch.cuda.make_graphed_callables``) against 17-30 ms of host time per step in eager, and the
host time moves with the machine's load. Inference calls replay a graph of their host program
(``cuda_graphs.py``); this module does the same for calls under grad, where the backward is
autograd's walk over the fused groups' nodes and eager's ops.

A call with grad enabled replays when everything ``GraphReplayer`` requires holds (same key, plus
every argument's and module tensor's ``requires_grad``) and some argument or module parameter
requires grad. After ``warm`` steady calls the next is captured as ``make_graphed_callables``
captures a callable: one warm-up forward + ``torch.autograd.grad`` on a side stream (nothing is
accumulated; module buffers are put back), then the forward into one graph and the backward
(``autograd.grad`` of the outputs that require grad, from static incoming gradients, with respect
to the arguments and the module parameters that require grad) into a second graph on the same
memory pool. The backward graph leaves out the outputs to which no warm call's caller gave a
gradient (``_Probe`` notes it): a step whose loss is returned beside the logits (a Hugging Face causal
LM's) gave the logits no gradient, and its replays had filled a zero gradient of the logits' size
and carried it back through the graph (GPT-2 at 8 x 512 tokens: 412 MB of zeros, then added to
the loss's gradient of the logits). A replay whose backward then gets a gradient for such an
output differentiates the host program (as a recompute, below), and the signature runs the host
program from then on. A replayed call copies its arguments into the static inputs (except the parameters
and buffers a Dynamo graph takes as arguments: read and written in place, as a TorchScript
graph's module attributes; batch norm's running stats update the module's own), replays the forward
graph and returns the outputs from one autograd node (``_Replay``) whose inputs are the
arguments and parameters requiring grad. Its backward copies the incoming gradients into the
static ones (zeros where an output got none), replays the backward graph and returns the
gradients, which autograd accumulates into ``.grad`` (a gradient autograd takes as a parameter's
``.grad`` is not copied) and passes to hooks as usual.

The gradients of 64 KiB and more are lent, not copied (``lent.py``): each is handed to autograd
as an alias of the backward graph's buffer, which autograd makes the parameter's ``.grad`` as it
is (nothing else references it; checked on an H200 and in tests/executor/test_lent.py), and a
replay never writes a buffer the caller still references. A buffer two gradients share, or one
referenced elsewhere when lending starts, is copied (an MLP's 4 weight and bias gradients of 8;
GPT-2's 50 large ones of 148 are lent, and its training step took 15.7 ms against 16.05 with
every gradient copied, in one process on an H200). A backward that finds a lent gradient still
a leaf's ``.grad`` (steps accumulating without ``zero_grad``) swaps that ``.grad`` for a copy first; one held otherwise (a caller kept
it) differentiates the host program, and after ``HELD_LIMIT`` such backwards the signature is
captured again handing out copies (GPT-2's training step at 8 x 512 tokens copied 0.25 GB of
gradients per step). The outputs of 64 KiB and more are lent too (GPT-2's padded logits: a
copy of 0.4 GB per step): a call that finds one still held (``y = model(x)`` in a loop holds the
last ``y`` while the next call runs) runs the host program, and after ``HELD_LIMIT`` such calls
the signature is captured again handing out copies (``_busy``); a lent output written in place
before the backward (the backward graph may read it: an activation saved for the backward) makes
that backward a recompute.

What keeps it the same computation:

- one replay in flight per signature: the static buffers hold one call's saved activations, so a
  call made while an earlier replay's node is alive and its backward has not run (two forwards
  before one backward: a siamese loss) runs the host program instead;
- a replay node whose buffers were used again by a later replay (a second backward through a
  retained graph after the next forward), and a backward that records a graph
  (``create_graph=True``: double backward), recompute: the host program runs again from the
  call's arguments and parameters under grad, with module buffers put back after it, and autograd
  differentiates that (as eager would); an argument or parameter changed in place since the call
  raises there as eager raises;
- autocast's cast cache is off during the warm-up and the captures (``autocast_cache_off``);
- fused random ops (dropout, ``rand_like``: ``ops/philox.py``) are recorded drawing from a base
  that each replay reserves from the CUDA generator and writes into the entry's ``rng`` tensor
  before the forward graph runs: the numbers a replay draws are those the host program would
  have drawn in its place, and ``torch.manual_seed`` reproduces them; the warm-up draws from the
  generator's current offset without taking it. Random ops that run eager's kernels (torchvision's
  stochastic depth, an in-place dropout) are recorded as ``torch.cuda.graph`` records them: the
  generator is graph-safe, and each replay advances it past the graph's draws. A recompute
  (below) of such a call sets the generator to where that replay's eager draws started and puts
  it back after, so it draws that replay's numbers again;
- a capture is kept only if a replayed step (``train_entry._replay_seconds``: copies included) is faster
  than a step of the host program in a loop, the longer of its host time (measured during the
  warm-up) and its kernels' time (the graphs without copies, ``_graphs_seconds``);
- out of CUDA memory, ``release_graphs`` drops these graphs too.

``PYTORCH_NVFUSER_DISABLE=cuda_graphs_training`` (or ``cuda_graphs``) turns it off.
"""
from __future__ import annotations

import contextlib
import time
import weakref
from typing import Any, Callable, Optional

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from ..log import jit_log
from ..ops.philox import philox_capture, philox_fixed, signed_seed
from ..runtime.row_copy import copy_rows
from .cuda_graphs import HELD_LIMIT, STATS, GraphReplayer, _attr, autocast_cache_off
from .lent import Lent, clone_broadcast
from .train_entry import _backward_roots, _graphs_seconds, _replay_seconds, _set_base, _TrainEntry


_TENSOR = object()     # where a static output sits in a signature's flat outputs (``_TrainEntry.lent`` holds it)


class _Replay(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, replayer: "TrainingReplayer", entry: _TrainEntry, fast: Callable, args: tuple,
                *leaves: torch.Tensor) -> tuple:
        for s, a in zip(entry.inputs, args):
            if s is not None:
                s.copy_(a)
        ctx.rng = _set_base(entry) if entry.draws else None
        if entry.eager_draws:
            gen = torch.cuda.default_generators[entry.rng.device.index]
            ctx.eager_rng = (gen.initial_seed(), gen.get_offset())
        entry.fwd.replay()
        entry.generation += 1
        ctx.generation, ctx.ran = entry.generation, False
        ctx.replayer, ctx.entry, ctx.fast = replayer, entry, fast
        ctx.versions = [t._version for t in leaves]
        # the call's tensors are saved, not kept on ctx: autograd frees them after the backward,
        # so a loop that keeps its loss (whose graph holds this node) does not hold a lent output
        # of another replayed call that it took as an argument through the next step
        ctx.shape = (tuple(_TENSOR if isinstance(a, torch.Tensor) else a for a in args), len(leaves))
        ctx.save_for_backward(*(a for a in args if isinstance(a, torch.Tensor)), *leaves)
        ctx.autocast = (torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda"))
        ctx.set_materialize_grads(False)   # an output the caller does not differentiate: None, no fill
        entry.node = weakref.ref(ctx)
        outs = tuple(entry.lent.hand_out())
        # a lent output shares its version counter with the static buffer the backward graph
        # may read (an activation saved for the backward): written in place, it is recomputed
        ctx.out_versions = entry.lent.versions()
        fixed = [o for o, d in zip(outs, entry.diff) if not d]
        if fixed:
            ctx.mark_non_differentiable(*fixed)
        return outs

    @staticmethod
    def backward(ctx: Any, *grads: Optional[torch.Tensor]) -> tuple:
        entry: _TrainEntry = ctx.entry
        # a second backward through a retained graph: the first replay of the backward graph
        # reused the memory of the activations it had finished with
        again, ctx.ran = ctx.ran, True
        diff_grads = [g for g, d in zip(grads, entry.diff) if d]
        unseen = any(g is not None and not w for g, w in zip(diff_grads, entry.wanted))
        if unseen:
            # a gradient for an output the backward graph was captured without: this call
            # differentiates the host program, later ones run it
            ctx.replayer._unwanted(entry)
        fresh = ctx.generation == entry.generation and not (unseen or again or torch.is_grad_enabled()) \
            and entry.lent.versions() == ctx.out_versions
        if fresh and entry.lent_grads.moved():
            # a caller grew a lent gradient in place: the graph would write memory nobody reads
            ctx.replayer._drop(entry, "a caller grew a replayed gradient in place")
            fresh = False
        if fresh and not _give_back_grads(entry, lambda: _saved(ctx)[1]):
            ctx.replayer._grads_held(entry)
            fresh = False
        if not fresh:
            res = ctx.replayer._recompute(ctx, diff_grads)
        else:
            for s, g in zip(entry.grad_outs, [g for g, w in zip(diff_grads, entry.wanted) if w]):
                if g is None:
                    s.zero_()
                elif not copy_rows(s, g):       # (a padded result's view: its rows kernel)
                    s.copy_(g)
            entry.bwd.replay()
            res = entry.lent_grads.hand_out()
        return (None, None, None, None) + tuple(res)


_TENSOR = object()      # where a saved argument goes back


def _saved(ctx: Any) -> tuple[tuple, tuple]:
    """(the call's arguments, its leaves) from the tensors ``_Replay.forward`` saved."""
    template, n_leaves = ctx.shape
    saved = ctx.saved_tensors
    tensors = iter(saved[:len(saved) - n_leaves])
    args = tuple(next(tensors) if a is _TENSOR else a for a in template)
    return args, tuple(saved[len(saved) - n_leaves:])


def _give_back_grads(entry: _TrainEntry, leaves_of: Callable[[], tuple]) -> bool:
    """Before the backward graph writes its gradients again: a lent gradient that is still a
    leaf's ``.grad`` and held by nothing else (gradients accumulated over steps without
    ``zero_grad``) becomes a copy (one ``_foreach_mul`` for all of them), into which autograd
    then accumulates. False if a lent gradient is held otherwise (a caller kept it or a view).
    ``leaves_of`` gives the call's leaves (its saved tensors: unpacked only where one is held)."""
    lent = entry.lent_grads
    held = lent.held()
    if not held:
        return True
    leaves = leaves_of()
    mine = []
    for i in held:
        g = leaves[i].grad
        if g is None or lent.holders(i) != 1 or g.data_ptr() != lent.tensors[i].data_ptr():
            return False
        mine.append(i)
    for i, copy in zip(mine, torch._foreach_mul([leaves[i].grad for i in mine], 1)):
        leaves[i].grad = copy
    return not lent.held()


class _Probe(torch.autograd.Function):
    """The identity on a warm call's outputs that require grad (copies: the caller may write
    them in place; an expanded one stays expanded, with eager's strides); its backward adds to
    ``seen`` the positions (``at``) of those that got a gradient."""

    @staticmethod
    def forward(ctx: Any, seen: set, at: list, *outs: torch.Tensor) -> tuple:
        ctx.seen, ctx.at = seen, at
        ctx.set_materialize_grads(False)
        return tuple(clone_broadcast(o) for o in outs)

    @staticmethod
    def backward(ctx: Any, *grads: Optional[torch.Tensor]) -> tuple:
        ctx.seen.update(j for j, g in zip(ctx.at, grads) if g is not None)
        ctx.seen.add(-1)                  # a backward reached the probe
        return (None, None) + grads


def _backward_autocast() -> Any:
    """The capture runs inside the call, under the caller's autocast; its backward is recorded as
    a training loop runs it, after leaving autocast (as autocast's documentation asks): the
    backward groups' programs are those of their no-autocast specialization, as in the steps
    before and after."""
    return torch.autocast("cuda", enabled=False)


def _restore(swapped: list) -> None:
    while swapped:
        slot, name, obj = swapped.pop()
        slot[name] = obj


def _reset_generator() -> None:
    """A capture that failed inside ``torch.cuda.graph`` can leave the CUDA generator marked as
    capturing (its capture end never ran), and every later random op raises "Offset increment
    outside graph capture": give the generator a fresh state with the same seed and offset."""
    try:
        gen = torch.cuda.default_generators[torch.cuda.current_device()]
        gen.graphsafe_set_state(gen.clone_state())
    except Exception:  # noqa: BLE001 - an older torch without graph-safe states
        pass


class TrainingReplayer(GraphReplayer):
    """Captures and replays training calls of one specialization (see module doc)."""

    grad = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.grads_seen: dict[tuple, set] = {}     # per signature: outputs a warm call's caller gave a gradient
        self.grads_copied: set[tuple] = set()      # signatures whose gradients are handed out as copies
        self.outputs_copied: set[tuple] = set()    # signatures whose outputs are handed out as copies

    def _busy(self, entry: _TrainEntry) -> bool:
        """An earlier replay's backward has not run, or a caller still holds (or grew in place)
        an output lent by an earlier replay, which the next replay would overwrite: the call
        runs the host program. After ``HELD_LIMIT`` calls that found outputs held, the signature
        is captured again, handing out copies of its outputs (``y = model(x)`` in a loop holds
        the last ``y`` while the next call runs)."""
        if entry.busy():
            return True
        if entry.lent.moved():
            self._drop(entry, "a caller grew a replayed output in place")
            return True
        if not entry.lent.held():
            return False
        entry.held += 1
        STATS["held_outputs"] = STATS.get("held_outputs", 0) + 1
        if entry.held >= HELD_LIMIT:
            for key, e in list(self.entries.items()):
                if e is entry:
                    del self.entries[key]
                    self.seen[key] = 0
                    self.outputs_copied.add(key)
                    jit_log("executor", 1, f"{self.name}: callers keep replayed outputs: captured again, "
                                           "handing out copies")
        return True

    def _replay(self, entry: _TrainEntry, fast: Callable, args: tuple) -> Any:
        for c in self.caches:           # kept weights (of parameters that want no gradient)
            c.refresh()
        leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad] + entry.params
        outs = iter(_Replay.apply(self, entry, fast, args, *leaves))
        flat = [next(outs) if o is _TENSOR else o for o in entry.outputs]
        STATS["train_replays"] = STATS.get("train_replays", 0) + 1
        return tree_unflatten(flat, entry.treedef)

    def _copied_bytes(self, args: tuple, out: Any) -> int:
        """The arguments and outputs, and the parameters' gradients (read and written once more)."""
        grads = sum(t.numel() * t.element_size() for t in self._parameters() if t.requires_grad)
        return super()._copied_bytes(args, out) + 2 * grads

    def _key(self, args: tuple) -> Optional[tuple]:
        # whether the call wants gradients first: a call under grad mode that needs none (a tiny
        # function called outside no_grad) pays for this check only, not for the full key
        if not (any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)
                or any(p.requires_grad for p in self._parameters())):
            return None
        return super()._key(args)

    def _capture(self, fast: Callable, args: tuple, key: tuple, host: float) -> None:
        if self._key(args) != key:
            return
        # an argument is copied into a static input before each replay, except the module's
        # parameters and buffers a Dynamo graph takes as arguments (``self.static``): read and
        # written in place as a TorchScript graph's attributes are, a parameter through an alias
        # leaf (``_alias_parameters`` says why), whose gradient is the parameter's
        self._hold(args)
        statics: list = []
        call: list = []
        arg_leaves: list = []
        for i, a in enumerate(args):
            if not isinstance(a, torch.Tensor):
                statics.append(None)
                call.append(a)
                continue
            if i in self.static:
                statics.append(None)
                if a.requires_grad:
                    a = torch.nn.Parameter(a.detach(), requires_grad=True) if a.is_leaf else a
                    arg_leaves.append(a)
                call.append(a)
                continue
            st = torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=a.device).copy_(a.detach()) \
                .requires_grad_(a.requires_grad)
            statics.append(st)
            call.append(st)
            if st.requires_grad:
                arg_leaves.append(st)
        call_args = tuple(call)
        params = [t for t in self._read_tensors() if t.requires_grad]
        swapped: list = []
        try:
            if any(not p.is_leaf for p in params + self._pinned if p.requires_grad):
                raise RuntimeError("a module tensor that requires grad is not a leaf")
            aliases = self._alias_parameters(params, swapped)
            leaves = arg_leaves + aliases
            gen = torch.cuda.default_generators[torch.cuda.current_device()]
            before, cpu_state = gen.get_offset(), torch.default_generator.get_state()
            versions = [(t, t._version) for t in self._parameters()]
            saved = [(t, t.clone()) for t in self._buffers()]
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            mode = torch.cuda.get_sync_debug_mode()
            try:
                with torch.cuda.stream(stream), autocast_cache_off(), torch.autograd.set_multithreading_enabled(False), \
                        philox_fixed(signed_seed(gen), before, gen.device.index):
                    for _ in range(2):        # the second one timed: a step as the host program runs it
                        stream.synchronize()
                        start = time.perf_counter()
                        torch.cuda.set_sync_debug_mode("error")   # a host read of a device value raises here
                        flat = [o for o in tree_flatten(fast(*call_args))[0]]
                        diff = [o for o in flat if isinstance(o, torch.Tensor) and o.requires_grad]
                        if not diff:
                            raise RuntimeError("no output requires grad")
                        # the backward the capture records: of the wanted outputs, from the same
                        # roots (all outputs' made the groups on a path no step's backward takes,
                        # GPT-2's logits' in its own graph, profile and build for the warm-up alone)
                        roots, feeds, into = _backward_roots(
                            [o for o, w in zip(diff, self._wanted(key, len(diff))) if w])
                        for g in into:
                            g.fill_(1)
                        with _backward_autocast():
                            torch.autograd.grad(roots, leaves, feeds, allow_unused=True)
                        torch.cuda.set_sync_debug_mode(mode)
                        launched = time.perf_counter() - start
                        stream.synchronize()
            finally:
                torch.cuda.set_sync_debug_mode(mode)
                for t, copy in saved:
                    t.data.copy_(copy)   # (.data: no version bump; the call's own graph may have saved it)
            torch.cuda.current_stream().wait_stream(stream)
            if any(t._version != v for t, v in versions):
                raise RuntimeError("the call writes module parameters in place")
            if not torch.equal(torch.default_generator.get_state(), cpu_state):
                raise RuntimeError("the call draws random numbers on the CPU (a replay would repeat them)")
            eager_draws = gen.get_offset() != before
            gen.set_offset(before)            # (the warm-up's draws were not the user's)
            entry = _TrainEntry()
            entry.fwd, entry.bwd = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
            entry.rng = torch.zeros(2, dtype=torch.int64, device=torch.device("cuda", gen.device.index))
            with philox_capture(entry.rng) as draws:
                with torch.cuda.graph(entry.fwd, capture_error_mode="thread_local"), autocast_cache_off():
                    out = fast(*call_args)
                flat, entry.treedef = tree_flatten(out)
                why = self._outputs_unfit(flat, statics)
                if why:
                    raise RuntimeError(why)
                tensors = [o for o in flat if isinstance(o, torch.Tensor)]
                entry.diff = [o.requires_grad for o in tensors]
                diff = [o for o in tensors if o.requires_grad]
                entry.wanted = self._wanted(key, len(diff))
                diff = [o for o, w in zip(diff, entry.wanted) if w]
                roots, feeds, entry.grad_outs = _backward_roots(diff)
                with torch.cuda.graph(entry.bwd, pool=entry.fwd.pool(), capture_error_mode="thread_local"), \
                        autocast_cache_off(), torch.autograd.set_multithreading_enabled(False), _backward_autocast():
                    grads = list(torch.autograd.grad(roots, leaves, feeds, allow_unused=True))
            entry.draws, entry.eager_draws = draws.used, eager_draws
            # (the static outputs live in ``entry.lent``: the flat list keeps the other items)
            entry.outputs = [_TENSOR if isinstance(o, torch.Tensor) else o for o in flat]
            # (outputs are copies: a caller may hold one through the next call, and a replay then
            # would have to run the host program, whose draws and timing the replay's rules
            # would have to follow too)
            entry.lent = Lent([o.detach() for o in tensors], lend=key not in self.outputs_copied)
            entry.lent_grads = Lent(grads, batched=True, lend=key not in self.grads_copied)
            entry.inputs = statics
            replayed = _replay_seconds(entry, args)
            step = max(launched, _graphs_seconds(entry))
            gen.set_offset(before)            # (nor the timed replays')
            for t, copy in saved:             # the captured forward (and the timed replays) updated
                t.data.copy_(copy)            # the running stats
            _restore(swapped)
            if replayed >= step:
                raise RuntimeError(f"a replayed step takes {replayed * 1e3:.2f} ms, the host program's "
                                   f"{step * 1e3:.2f} ms (its host time or its kernels' time, the longer)")
            if self._key(args) != key:
                raise RuntimeError("the call writes into a list or dict held by the module")
        except Exception as e:  # noqa: BLE001 - this signature runs the host program from now on
            _restore(swapped)
            _reset_generator()
            self._capture_failed(key, e)
            return
        entry.params, entry.host = params, host
        self.entries[key] = entry
        STATS["train_captures"] = STATS.get("train_captures", 0) + 1
        jit_log("executor", 1, f"{self.name}: captured the forward and backward of a training call "
                f"({len(self.entries)} signatures)")
        while len(self.entries) > self.max_graphs:
            self.entries.popitem(last=False)

    def _observe(self, key: tuple, args: tuple, out: Any) -> Any:
        """A warm call's outputs requiring grad pass through ``_Probe``, whose backward notes
        which of them received a gradient from the caller: a training step's loss does, a
        model's logits returned beside it usually do not (their gradient inside the call, on
        the way to the loss, does not count: the probe sits after it). The backward graph is
        captured for those that did (``_wanted``). The probe hands out copies, so an output that
        shares memory with an argument, a module tensor or another output (its aliasing is
        what the caller sees) is not probed, and counts as given a gradient."""
        if key is None:
            return out
        flat, spec = tree_flatten(out)
        diff = [i for i, o in enumerate(flat) if isinstance(o, torch.Tensor) and o.requires_grad]
        if not diff:
            return out
        seen = self.grads_seen.setdefault(key, set())
        owners = {a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor)}
        owners |= {t.untyped_storage().data_ptr() for t in self._parameters() + self._buffers()}
        ptrs = [o.untyped_storage().data_ptr() if isinstance(o, torch.Tensor) else None for o in flat]
        probed = []
        for j, i in enumerate(diff):
            if ptrs[i] in owners or ptrs.count(ptrs[i]) > 1:
                seen.add(j)
            else:
                probed.append((j, i))
        if probed:
            outs = _Probe.apply(seen, [j for j, _ in probed], *[flat[i] for _, i in probed])
            for (_, i), o in zip(probed, outs):
                flat[i] = o
        return tree_unflatten(flat, spec)

    def _wanted(self, key: tuple, n: int) -> list[bool]:
        """Per output requiring grad: whether the backward graph takes its gradient. Those no
        warm call's caller gave a gradient are left out (their incoming gradients would be
        zeros: a fill, and its way back through the graph), unless none got one (no warm call's
        backward ran yet): then all."""
        seen = self.grads_seen.get(key, set())
        return [i in seen for i in range(n)] if -1 in seen else [True] * n

    def _unwanted(self, entry: _TrainEntry) -> None:
        """A replay's backward got a gradient for an output its graph left out: drop the entry;
        this signature runs the host program from now on."""
        self._drop(entry, "a backward gave a gradient to an output no warm call's caller had given one")

    def _grads_held(self, entry: _TrainEntry) -> None:
        """A backward found gradients it lent still held: it differentiated the host program.
        After ``HELD_LIMIT`` such backwards the signature is captured again, its graphs handing
        out copies of the gradients (the callers keep what they hold: the old graphs' memory
        stays with them)."""
        entry.held += 1
        STATS["held_grads"] = STATS.get("held_grads", 0) + 1
        if entry.held < HELD_LIMIT:
            return
        for key, e in list(self.entries.items()):
            if e is entry:
                del self.entries[key]
                self.seen[key] = 0
                self.grads_copied.add(key)
                jit_log("executor", 1, f"{self.name}: callers keep replayed gradients: captured again, handing out copies")

    def _drop(self, entry: _TrainEntry, why: str) -> None:
        for key, e in list(self.entries.items()):
            if e is entry:
                del self.entries[key]
                self._capture_failed(key, RuntimeError(why))

    def _alias_parameters(self, params: list, swapped: list) -> list:
        """For the warm-up and the captures, each parameter the graph reads becomes a new leaf
        sharing its memory (restored by ``_restore(swapped)``). Autograd keeps one gradient
        accumulator per leaf, made on the stream of the backward that first needed it: the
        parameters' own, from the steps before (alive while the last step's loss is), sit on the
        default stream, and a backward capture that reached them made the default stream wait
        on the capturing one (cudaErrorStreamCaptureImplicit). The aliases' are made in the
        capture; the graphs read and write the parameters' memory all the same."""
        alias = {id(p): torch.nn.Parameter(p.detach(), requires_grad=True) for p in params}
        objs: list = []
        for parent, name in self.chains:
            owner = self.module if parent < 0 else objs[parent]
            obj = _attr(owner, name)
            objs.append(obj)
            slot = getattr(owner, "_parameters", None) if isinstance(owner, torch.nn.Module) else None
            if isinstance(obj, torch.Tensor) and id(obj) in alias and slot is not None and slot.get(name) is obj:
                swapped.append((slot, name, obj))
                slot[name] = alias[id(obj)]
        return [alias[id(p)] for p in params]

    def _read_tensors(self) -> list[torch.Tensor]:
        """The module tensors the graph reads (``prim::GetAttr`` chains), each once."""
        objs: list = []
        seen: dict[int, torch.Tensor] = {}
        for parent, name in self.chains:
            obj = _attr(self.module if parent < 0 else objs[parent], name)
            objs.append(obj)
            if isinstance(obj, torch.Tensor):
                seen.setdefault(id(obj), obj)
        return list(seen.values())

    def _recompute(self, ctx: Any, grads: list) -> list:
        """The backward by running the host program again from the call's arguments (see module
        doc): for a backward that records a graph, or buffers a later replay reused."""
        args, leaves = _saved(ctx)
        for t, v in zip(leaves, ctx.versions):
            if t._version != v:
                raise RuntimeError("graphfuser: one of the variables needed for gradient computation has been "
                                   "modified by an inplace operation since the replayed call (as eager raises)")
        saved = [(t, t.clone()) for t in self._buffers()]
        eager_rng = getattr(ctx, "eager_rng", None)
        gen = torch.cuda.default_generators[ctx.entry.rng.device.index] if eager_rng else None
        state = gen.get_state() if gen is not None else None
        try:
            if gen is not None:
                if gen.initial_seed() != eager_rng[0]:
                    gen.manual_seed(eager_rng[0])
                gen.set_offset(eager_rng[1])
            # the forward's autocast state: a backward runs outside the caller's autocast region
            enabled, dtype = ctx.autocast
            with torch.enable_grad(), torch.autocast("cuda", dtype=dtype, enabled=enabled), (philox_fixed(*ctx.rng, ctx.entry.rng.device.index) if ctx.rng is not None
                                       else contextlib.nullcontext()):
                flat = tree_flatten(ctx.fast(*args))[0]
        finally:
            if gen is not None:
                gen.set_state(state)
            with torch.no_grad():
                for t, copy in saved:
                    t.data.copy_(copy)
        diff = [o for o in flat if isinstance(o, torch.Tensor) and o.requires_grad]
        gs = [g if g is not None else torch.zeros_like(o) for o, g in zip(diff, grads)]
        return list(torch.autograd.grad(diff, list(leaves), gs, allow_unused=True,
                                        create_graph=torch.is_grad_enabled()))
