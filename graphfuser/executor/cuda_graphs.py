"""Steady-state CUDA graph replay of an optimized host program (calls without grad; calls under
grad: ``cuda_graphs_train.py``).

A small model at batch 64 spends more time in the host program (one Python call per aten op and
per fused launch) than on the GPU: mobilenet_v3_small runs 1.3 ms of kernels in ~3 ms of host
time. Once a specialization is steady, the host program of a no-grad CUDA call is captured into a
CUDA graph (``torch.cuda.CUDAGraph``) and later calls with the same signature copy their inputs
into the graph's static input buffers, replay it and hand out its static outputs: the same
kernels with the same arguments, launched by the driver in one call. An output is handed out
uncopied, as an alias of the graph's memory, and that graph is replayed again only once no
caller holds the alias or a view of it; a caller that holds its last result while calling again
gets a second graph of the signature (``_Variant``), and one that keeps every result gets copies
(see ``GraphReplayer._replay``): a 412 MB logits tensor is not copied on every call.

Replay is only the same program when nothing the host program decides can differ between the
captured call and a later one. So a call replays only when all of these hold, else it runs the
host program as before:

- the graph (checked once, ``ineligible_reason``) has no in-place write into a graph input (the
  static input copy would take it; writes into module buffers replay in place, at the address the
  key checks: a TorchScript graph's attributes, and the parameters and buffers a Dynamo graph
  takes as static arguments, which are never copied), no print or SetAttr, no write into a list or dict that is neither its own nor a
  module attribute, no call into Python (``prim::CallMethod`` / ``CallFunction`` / ``PythonOp``;
  a ``PythonOp`` its frontend marks free of effects is allowed: ``_pure_call``),
  and reads module attributes only through ``prim::GetAttr`` chains from the module;
- the call: grad mode off, every tensor argument a dense (contiguous or channels-last) CUDA
  tensor, every other argument a hashable constant; the key is the arguments' shapes, strides,
  dtypes, devices and values, torch's TF32 / cuDNN / matmul-precision flags, and the current
  value of every module attribute the graph reads (tensors by identity and data pointer, so a
  replaced or re-pointed parameter captures anew; ``training`` flags and other numbers by value;
  lists and dicts by their items, so a cache a module keeps in a dict attribute — LeViT's
  attention biases by device, filled on the first call — is part of the key);
- the capture itself: a call that draws random numbers (advances the CUDA or CPU generator: a
  replay would repeat its draws) is not captured; a host read of a device value (``.item()``,
  ``if x.sum() > 0``) makes capture fail; such a signature is never captured again; an output
  that is not dense (but for a no-grad output whose elements do not overlap: a padded layout), or
  that shares memory with an input, a module tensor or another output is not replayed (its
  aliasing could not be reproduced by a clone); a call that writes into a list or dict module
  attribute (a cache being filled: the write is a host effect a replay would skip) is not
  captured — the call after it has another key (the filled cache), and that one is.

A replay copies every tensor argument into the static inputs (and may clone its outputs): GPU time
that the saved host time must pay for, and replay only helps a call whose host time exceeds its
GPU time. So a signature is captured only when the host time of its first steady call exceeds
what the copies take plus the least GPU time of a program reading its inputs and writing its
outputs once (``COPY_BYTES_PER_S``; CUDA events cannot time the kernels alone: a host-bound
call's events also time the host's gaps). A training step's backward programs (each fused
group's, run by autograd) run with grad mode off, but they are a few launches over tensors of
hundreds of MB (RMSNorm [16384, 4096]'s backward: 0.34 ms of copies per step against ~30 us of
host time): they keep running their host programs. The copies and clones also cost host time, a launch each: a call of one or two kernels
over small tensors enqueues faster than a replay does, so the first ``REPLAY_TRIALS`` replays of
a signature are timed, and its graph is dropped unless one of them enqueued faster than the host
program had (``_judge``).

The first ``warm`` steady calls of a signature run normally (variants compile on first use), the
next is captured (after one warm-up run on a side stream, as torch.cuda.make_graphed_callables
does, with host syncs turned into errors and the module buffers it writes restored; a call that
writes a parameter in place is not captured); at most ``max_graphs`` signatures are kept per specialization (least recently used is
dropped). A captured signature keeps its graph's private memory pool (the program's
intermediates, the static inputs and outputs) for as long as the scripted function lives: the
memory eager allocates for a call, held. When a call of any scripted function runs out of CUDA
memory, every replayer gives its graphs back (``release_graphs``) and those signatures run their
host programs from then on, so that graphfuser never holds memory eager would have had (the zoo's
vit_h_14 under bf16 autocast ran out of memory with 38 GiB held in graph pools).
``PYTORCH_NVFUSER_DISABLE=cuda_graphs`` turns replay off.
"""
from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections import OrderedDict
from typing import Any, Callable, Iterator, Optional

import torch

from ..ir.graph import Graph
from ..ir.types import TensorType
from ..log import jit_log
from ..passes.module_flags import module_attr as _attr
from .lent import _copy_out, _dense
from .replay_key import StaticKey, _container_state
from .start_up import gc_paused
from .replay_eligibility import _chains, ineligible_reason, launches  # noqa: F401 - (the eligibility tests read them here)

STATS = {"captures": 0, "replays": 0, "capture_failures": 0, "copy_bound": 0, "slower_replays": 0}
REPLAY_TRIALS = 3           # replays timed before a signature's graph is kept or dropped (_judge)
# Bytes of tensor data a device-to-device copy moves per second (read + write of an H100 / H200's
# HBM at ~3 TB/s, each byte read once and written once): what a replay's input copies and output
# clones cost, against the host time it saves.
COPY_BYTES_PER_S = 1.5e12
MAX_STATES = 64   # module-attribute states a replayer numbers before it starts afresh
_LIVE: "weakref.WeakSet[GraphReplayer]" = weakref.WeakSet()


def release_graphs() -> int:
    """Drop every live replayer's captured graphs (and their memory pools); their signatures are
    not captured again. Returns how many graphs were dropped."""
    dropped = 0
    for r in list(_LIVE):
        with r.lock:
            dropped += len(r.entries)
            r.failed.update(r.entries)
            r.entries.clear()
    if dropped:
        STATS["released"] = STATS.get("released", 0) + dropped
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        jit_log("executor", 1, f"out of CUDA memory: dropped {dropped} captured CUDA graphs and their memory pools")
    return dropped



@contextlib.contextmanager
def autocast_cache_off() -> Iterator[None]:
    """Autocast's cast cache off, for a warm-up and a capture: a cast the capture took from the
    cache (filled by the warm-up in the same autocast region, or by the user's code) would not be
    in the graph, whose replays would then read that copy: stale once the weight changes, and
    freed when the region ends. With the cache off, the casts are captured and every replay
    makes them from the weights as they are then."""
    was = torch.is_autocast_cache_enabled()
    torch.set_autocast_cache_enabled(False)
    try:
        yield
    finally:
        torch.set_autocast_cache_enabled(was)


def _disjoint(t: torch.Tensor) -> bool:
    """No two elements share memory (a padded layout, a slice's; not an expanded view): what a
    copy with the same strides can hold."""
    span = 1
    for stride, size in sorted((st, sz) for st, sz in zip(t.stride(), t.shape) if sz > 1):
        if stride < span:
            return False
        span = stride * size
    return True


_USE_COUNT = getattr(torch._C, "_storage_Use_Count", None)
MAX_VARIANTS = 2    # graphs per signature whose outputs are handed out without a copy
HELD_LIMIT = 2      # calls that found every variant's outputs still held before the signature clones


def _use_count(t: torch.Tensor) -> int:
    """Tensors sharing ``t``'s storage, plus one for the storage object this call makes."""
    return _USE_COUNT(t.untyped_storage()._cdata)


class _Variant:
    """One captured graph of a signature and its static outputs. Its outputs are handed out as
    aliases (``detach``: the caller's tensor shares the static memory); the variant is free
    again once no tensor but its own shares that memory (the caller dropped its result and every
    view of it), which the storage's use count tells."""
    __slots__ = ("graph", "outputs", "tensors", "ptrs", "counts")

    def __init__(self, graph: Any, outputs: list) -> None:
        self.graph, self.outputs = graph, outputs
        self.tensors = [o for o in outputs if isinstance(o, torch.Tensor)]
        self.ptrs = [t.data_ptr() for t in self.tensors]
        self.counts = [_use_count(t) for t in self.tensors] if _USE_COUNT is not None else []

    def free(self) -> bool:
        return all(_use_count(t) == c for t, c in zip(self.tensors, self.counts))

    def moved(self) -> bool:
        """A caller grew a handed-out output in place (``resize_``): its storage moved, the
        graph still writes the old address."""
        return any(t.data_ptr() != p for t, p in zip(self.tensors, self.ptrs))


class _Entry:
    __slots__ = ("variants", "inputs", "treedef", "host", "trials", "best", "clones", "held", "limit")

    def __init__(self, graph: Any, inputs: list, outputs: list, treedef: Any, host: float) -> None:
        self.variants = [_Variant(graph, outputs)]
        self.inputs, self.treedef = inputs, treedef
        self.host = host                # host seconds of the steady call the capture followed
        self.trials = 0                 # replays timed so far; -1 once the graph is kept
        self.best = float("inf")        # the fastest of them
        # outputs handed out as copies (the first variant's outputs never leave): where the
        # storage use count is not there, or after callers kept every variant's outputs
        self.clones = _USE_COUNT is None
        self.held = 0                   # calls that found every variant's outputs held
        self.limit = MAX_VARIANTS       # variants this signature may capture


class GraphReplayer:
    """Captures and replays calls of one specialization's steady host program (see module doc)."""

    def __init__(self, graph: Graph, module: Optional[torch.nn.Module], name: str, warm: int = 2,
                 max_graphs: int = 4, static: tuple[int, ...] = ()) -> None:
        self.module = module
        # argument positions whose tensors stay put between calls (a graph's parameters and
        # buffers, as a frontend that passes them in says): keyed by identity and address like
        # module attributes, read in place by the graph, never copied into static inputs
        self.static = frozenset(static)
        self._static_key = StaticKey(self.static)
        self._moving: dict[int, list] = {}
        self._pinned: list = []         # those of the last capture that are parameters (checked unwritten)
        self._held_buffers: list = []   # and its other module tensors (written in place, put back after a warm-up)
        self.name = name
        self.chains = _chains(graph, module is not None)
        self.warm = warm
        self.max_graphs = max_graphs
        self.entries: "OrderedDict[tuple, _Entry]" = OrderedDict()
        self.seen: dict[tuple, int] = {}
        self.failed: set[tuple] = set()
        self.lock = threading.Lock()
        # the module-attribute part of the key (hundreds of entries on a real model) as a small
        # number: hashing it on every call cost more than building it; consecutive calls
        # usually see the same values, which one tuple comparison confirms
        # (numbers are never reused: the table is dropped when it grows past MAX_STATES)
        self._states: dict[tuple, int] = {}
        self._last: tuple = (None, -1)
        self._numbered = 0
        from .weight_cache import caches_of

        self.caches = caches_of(graph)  # kept weights the graph reads: brought up to date before a replay
        _LIVE.add(self)

    # -- the key ---------------------------------------------------------------------------
    grad = False            # the grad mode of the calls this replayer takes (cuda_graphs_train.py: True)
    # set once a replay of some signature enqueued slower than the host program (_judge): the
    # program's host time is below a replay's copies and launch at that size, and so at every
    # larger one; every call then goes straight to the host program, without computing a key
    # (a tiny fusion: 13.5-14.9 us per call with the key against 8.5-9.0 us without, H200)
    off = False
    _untimed = False        # the replay just made captured a variant first (not timed)
    training: "Optional[GraphReplayer]" = None      # the replayer of this specialization's calls under grad

    def _key(self, args: tuple) -> Optional[tuple]:
        if torch.is_grad_enabled() is not self.grad:
            return None
        parts: list = []
        cuda = False
        static = self.static
        # the positions outside the static part (one or two of a Dynamo graph's hundreds of
        # arguments), per argument count; a tensor in a static position joins the static part
        moving = self._moving.get(len(args))
        if moving is None:
            moving = self._moving[len(args)] = [i for i in range(len(args)) if i not in static]
        for i in moving:
            a = args[i]
            if isinstance(a, torch.Tensor):
                if not a.is_cuda or not _dense(a):
                    return None
                cuda = True
                parts.append((a.shape, a.stride(), a.dtype, a.get_device(), a.requires_grad))
            elif a is None or isinstance(a, (bool, int, float, str)):
                parts.append((type(a), a))
            else:
                return None
        if static:
            held = self._static_key(args)
            if held is None:
                return None
            parts.append(held)
            cuda = cuda or held[0] != ()       # (tensors, values in static positions)
        if not cuda:
            return None
        vals: list = []
        if self.chains:
            objs: list = []
            root = self.module
            for parent, name in self.chains:
                obj = _attr(root if parent < 0 else objs[parent], name)
                objs.append(obj)
                if isinstance(obj, torch.Tensor):
                    if not obj.is_cuda:
                        return None
                    vals.append((id(obj), obj.data_ptr(), obj.shape, obj.stride(), obj.dtype, obj.requires_grad))
                elif isinstance(obj, torch.nn.Module):
                    vals.append(id(obj))
                elif obj is None or isinstance(obj, (bool, int, float, str)):
                    vals.append((type(obj), obj))
                else:
                    v = _container_state(obj)
                    if v is None:
                        return None
                    vals.append(v)
        vals_t = tuple(vals)
        last, number = self._last
        if vals_t != last:
            number = self._states.get(vals_t)
            if number is None:
                if len(self._states) >= MAX_STATES:
                    self._states.clear()
                number = self._states[vals_t] = self._numbered
                self._numbered += 1
            self._last = (vals_t, number)
        b = torch.backends
        flags = (b.cudnn.allow_tf32, b.cuda.matmul.allow_tf32, b.cudnn.enabled, b.cudnn.deterministic,
                 torch.get_float32_matmul_precision(), torch.are_deterministic_algorithms_enabled())
        return (tuple(parts), number, flags, torch.cuda.current_device())

    # -- calls -----------------------------------------------------------------------------
    def __call__(self, fast: Callable, args: tuple) -> Any:
        if self.training is None and (self.off or torch.is_grad_enabled() is not self.grad):
            return fast(*args)
        if self.off and not torch.is_grad_enabled():
            return fast(*args)
        key = self._key(args)
        if key is None:
            train = self.training
            if train is not None and torch.is_grad_enabled():
                return train(fast, args)
            return fast(*args)
        entry = self.entries.get(key)
        if entry is not None and not self._busy(entry):
            start = time.perf_counter() if entry.trials >= 0 else 0.0
            self._untimed = False
            with self.lock:
                out = self._replay(entry, fast, args)
            self.entries.move_to_end(key)
            if entry.trials >= 0 and not self._untimed:
                self._judge(key, entry, time.perf_counter() - start)
            return out
        if entry is not None or key in self.failed:
            return fast(*args)
        n = self.seen.get(key, 0) + 1
        self.seen[key] = n
        if n <= self.warm:
            return self._observe(key, args, fast(*args))
        start = time.perf_counter()
        out = fast(*args)
        host = time.perf_counter() - start
        copied = self._copied_bytes(args, out)
        # copies (read + write each byte) plus the least GPU time of the program itself (each byte once)
        if host < 1.5 * copied / COPY_BYTES_PER_S:
            self.failed.add(key)
            STATS["copy_bound"] += 1
            jit_log("executor", 1, f"{self.name}: no CUDA graph for this signature: its host time "
                    f"({host * 1e6:.0f} us) is below what replaying would add ({copied / 1e6:.1f} MB of copies)")
            return out
        # (without the cyclic collector over the process's objects: a capture's warm-up and
        # recording allocate enough to trigger collections, each a walk over every object of a
        # process that imported Dynamo and transformers: GPT-2's training step spent 0.42 s of
        # its 1.38 s capture in 20 collections on an H200 machine)
        with gc_paused():
            self._capture(fast, args, key, host)
        return out

    def _busy(self, entry: Any) -> bool:
        """Whether ``entry``'s static buffers are still in use (cuda_graphs_train.py)."""
        return False

    def _observe(self, key: tuple, args: tuple, out: Any) -> Any:
        """A warm call's outputs, on their way to the caller (cuda_graphs_train.py watches which
        of them receive gradients)."""
        return out

    def _replay(self, entry: _Entry, fast: Callable, args: tuple) -> Any:
        """Replay a variant of ``entry`` whose outputs no caller holds and hand its outputs out
        without copying them (Inductor's CUDA graph trees hand out their static outputs too, but
        a later replay overwrites what the caller still holds). A caller that holds the last
        result while making the next call (``y = f(x)`` in a loop) gets a second variant, so
        replays alternate between two sets of outputs; a caller that keeps results (appends
        them to a list) finds both held, runs the host program, and after ``HELD_LIMIT`` such
        calls the signature hands out copies of one variant's outputs, as replay did before."""
        if not entry.variants:          # a variant for copies could not be captured
            return fast(*args)
        for c in self.caches:
            c.refresh()
        if entry.clones:
            variant = entry.variants[0]
        else:
            live = [v for v in entry.variants if not v.moved()]
            if len(live) != len(entry.variants):
                entry.variants = live
            variant = next((v for v in entry.variants if v.free()), None)
            if variant is None and len(entry.variants) < entry.limit:
                variant = self._another_variant(entry, fast, args)
                self._untimed = True
            if variant is None:
                entry.held += 1
                STATS["held_outputs"] = STATS.get("held_outputs", 0) + 1
                if entry.held >= HELD_LIMIT:
                    self._to_clones(entry, fast, args)
                return fast(*args)
        for s, a in zip(entry.inputs, args):
            if s is not None:
                s.copy_(a)
        variant.graph.replay()
        STATS["replays"] += 1
        # non-tensor outputs (a None aux output, a size) are kept as captured
        if entry.clones:
            outs = [_copy_out(o) if isinstance(o, torch.Tensor) else o for o in variant.outputs]
        else:
            outs = [o.detach() if isinstance(o, torch.Tensor) else o for o in variant.outputs]
        return torch.utils._pytree.tree_unflatten(outs, entry.treedef)

    def _another_variant(self, entry: _Entry, fast: Callable, args: tuple) -> Optional[_Variant]:
        """Capture the signature's program again, into its own memory pool (its outputs must not
        share memory with another variant's intermediates); the program was checked, warmed and
        captured once already. None (and no more variants) if that fails."""
        call_args = tuple(s if s is not None else a for s, a in zip(entry.inputs, args))
        try:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, capture_error_mode="thread_local"), autocast_cache_off():
                out = fast(*call_args)
            flat, _ = torch.utils._pytree.tree_flatten(out)
            why = self._outputs_unfit(flat, entry.inputs)
            if why:
                raise RuntimeError(why)
        except Exception as e:  # noqa: BLE001 - the signature keeps the variants it has
            entry.limit = len(entry.variants)
            jit_log("executor", 1, f"{self.name}: no further CUDA graph variant: {type(e).__name__}: {e}")
            torch.cuda.synchronize()
            return None
        variant = _Variant(g, flat)
        entry.variants.append(variant)
        STATS["variants"] = STATS.get("variants", 0) + 1
        return variant

    def _to_clones(self, entry: _Entry, fast: Callable, args: tuple) -> None:
        """Callers keep the outputs: capture a variant whose outputs never leave, hand out
        copies of them from now on, and drop the others (their memory stays with the callers)."""
        entry.variants, entry.limit, entry.clones = [], 1, True
        if self._another_variant(entry, fast, args) is not None:
            jit_log("executor", 1, f"{self.name}: callers keep replayed outputs: copies from now on")

    def _copied_bytes(self, args: tuple, out: Any) -> int:
        """Bytes a replayed call copies: its tensor arguments in, its outputs out."""
        moved = [a for i, a in enumerate(args) if i not in self.static]
        return sum(t.numel() * t.element_size() for t in moved + torch.utils._pytree.tree_leaves(out)
                   if isinstance(t, torch.Tensor))

    def _capture_failed(self, key: tuple, e: Exception) -> None:
        """This signature runs the host program from now on."""
        self.failed.add(key)
        STATS["capture_failures"] += 1
        STATS["last_error"] = f"{type(e).__name__}: {e}"
        jit_log("executor", 1, f"{self.name}: no {'training ' if self.grad else ''}CUDA graph for this signature: "
                f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        torch.cuda.synchronize()

    def _judge(self, key: tuple, entry: _Entry, seconds: float) -> None:
        """After REPLAY_TRIALS replays: keep the graph only if replaying (copies, the replay,
        the clones: a launch each) enqueues faster than the host program did. A call of one or
        two kernels over small tensors enqueues in less time than the copies around a replay
        (an elementwise function of two [3, 5, 3, 3] tensors: 58 us per replayed call on an
        H100 host, where TorchScript takes 10)."""
        entry.best, entry.trials = min(entry.best, seconds), entry.trials + 1
        if entry.best < entry.host:
            entry.trials = -1
        elif entry.trials >= REPLAY_TRIALS:
            self.entries.pop(key, None)
            self.failed.add(key)
            STATS["slower_replays"] += 1
            self.off = True
            jit_log("executor", 1, f"{self.name}: dropped the CUDA graph of a signature: a replay enqueues in "
                    f"{entry.best * 1e6:.0f} us, the host program in {entry.host * 1e6:.0f} us; "
                    f"no more replays of this specialization")

    def _capture(self, fast: Callable, args: tuple, key: tuple, host: float) -> None:
        if self._key(args) != key:
            # the call just made changed what the key covers (it filled a cache in a module
            # dict): a graph captured now would be filed under the state before it
            return
        statics = [torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=a.device).copy_(a)
                   if isinstance(a, torch.Tensor) and i not in self.static else None for i, a in enumerate(args)]
        call_args = tuple(s if s is not None else a for s, a in zip(statics, args))
        self._hold(args)
        try:
            gen = torch.cuda.default_generators[torch.cuda.current_device()]
            before, cpu_state = gen.get_offset(), torch.default_generator.get_state()
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            mode = torch.cuda.get_sync_debug_mode()
            # the warm-up call is an extra call: module buffers it writes (running stats) are put
            # back afterwards, so the user's call count is what the buffers saw
            # (every buffer: cuDNN's batch norm writes the running stats without bumping versions)
            saved = [(t, t.clone()) for t in self._buffers()]
            params = [(t, t._version) for t in self._parameters()]
            torch.cuda.set_sync_debug_mode("error")      # a host read of a device value raises here,
            try:                                          # not inside the capture
                with torch.cuda.stream(stream), autocast_cache_off():
                    fast(*call_args)
            finally:
                torch.cuda.set_sync_debug_mode(mode)
                for t, copy in saved:
                    t.copy_(copy)
            if any(t._version != v for t, v in params):
                raise RuntimeError("the call writes module parameters in place")
            if self._key(args) != key:
                raise RuntimeError("the call writes into a list or dict held by the module")
            torch.cuda.current_stream().wait_stream(stream)
            if gen.get_offset() != before or not torch.equal(torch.default_generator.get_state(), cpu_state):
                raise RuntimeError("the call draws random numbers (a replay would repeat them)")
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, capture_error_mode="thread_local"), autocast_cache_off():
                out = fast(*call_args)
            flat, treedef = torch.utils._pytree.tree_flatten(out)
            why = self._outputs_unfit(flat, statics)
            if why:
                raise RuntimeError(why)
        except Exception as e:  # noqa: BLE001 - this signature runs the host program from now on
            self._capture_failed(key, e)
            return
        self.entries[key] = _Entry(g, statics, flat, treedef, host)
        STATS["captures"] += 1
        jit_log("executor", 1, f"{self.name}: captured a CUDA graph ({len(self.entries)} signatures)")
        while len(self.entries) > self.max_graphs:
            self.entries.popitem(last=False)

    def _hold(self, args: tuple) -> None:
        """Sort the static arguments of a call being captured: parameters (and any tensor that
        requires grad), which a call must not write, and buffers, which it may (running stats)."""
        held = [a for i, a in enumerate(args) if i in self.static and isinstance(a, torch.Tensor)]
        self._pinned = [a for a in held if isinstance(a, torch.nn.Parameter) or a.requires_grad]
        self._held_buffers = [a for a in held if not (isinstance(a, torch.nn.Parameter) or a.requires_grad)]

    def _buffers(self) -> list:
        return (list(self.module.buffers()) if self.module is not None else []) + self._held_buffers

    def _parameters(self) -> list:
        return (list(self.module.parameters()) if self.module is not None else []) + self._pinned

    def _outputs_unfit(self, flat: list, statics: list) -> Optional[str]:
        owners = {s.untyped_storage().data_ptr() for s in statics if s is not None}
        owners |= {t.untyped_storage().data_ptr() for t in self._parameters() + self._buffers()}
        seen: set = set()
        for o in flat:
            if not isinstance(o, torch.Tensor):
                if o is None or isinstance(o, (bool, int, float, str, torch.dtype, torch.device)):
                    continue
                return f"output of type {type(o).__name__}"
            if o.requires_grad and not self.grad:
                return "an output requires grad"
            # (a view of the program's own memory leaves as it is, padded GEMM outputs through
            # torch.compile: passes/gemm_pad.py; its copies keep its strides)
            if not _dense(o) and o.numel() > 1 and not _disjoint(o):
                return "an output is not dense"
            p = o.untyped_storage().data_ptr()
            if p in owners or p in seen:
                return "an output shares memory with an input, a module tensor or another output"
            seen.add(p)
        return None


def make_replayer(graph: Graph, module: Optional[torch.nn.Module], name: str, device_type: Optional[str],
                  static: tuple[int, ...] = ()) -> Optional[GraphReplayer]:
    """A replayer for ``graph`` where replay is possible (CUDA, eligible graph), else None.
    ``static``: argument positions whose tensors stay put between calls (``Captured.static_inputs``)."""
    from ..config import config

    if device_type != "cuda" or config.is_disabled("cuda_graphs") or not torch.cuda.is_available():
        return None
    why = ineligible_reason(graph, module is not None, static)
    if why is not None:
        jit_log("executor", 1, f"{name}: no CUDA graph replay: {why}")
        return None
    # a call that launches one kernel at most: a replay would enqueue its input copies and the
    # graph launch in place of that one launch
    single = launches(graph) <= 1
    replayer = GraphReplayer(graph, module, name, static=static)
    replayer.off = single
    # a training replayer only where a call of this specialization can want gradients: an input
    # profiled with requires_grad (guards hold it), or a module with parameters; elsewhere a call
    # under grad mode (a small function called outside no_grad) goes straight to the host program
    wants = module is not None and any(True for _ in module.parameters()) or any(
        isinstance(v.type, TensorType) and v.type.requires_grad for v in graph.inputs)
    if wants and not config.is_disabled("cuda_graphs_training"):
        from .cuda_graphs_train import TrainingReplayer

        replayer.training = TrainingReplayer(graph, module, name, static=static)
    if single and replayer.training is None:
        jit_log("executor", 1, f"{name}: no CUDA graph replay: it launches one kernel at most")
        return None
    return replayer
