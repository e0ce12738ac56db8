"""Shared test helpers: graph text in / graph text out, and ``check(fn, *inputs)``.

``check`` is written once and run per backend: it scripts ``fn``, runs it past profiling, asserts
that fusion happened (or not) and that the fused path ran without guard misses, and compares
every call with eager through ``torch.testing.assert_close``. Tests parametrize it over
``DEVICES``; the CUDA entry carries ``@pytest.mark.cuda`` and is skipped where no GPU is present.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Optional, Sequence

import pytest
import torch

import graphfuser
from graphfuser.config import config
from graphfuser.ir import Graph, parse_graph, print_graph, verify

DEVICES = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=pytest.mark.cuda)]

# Loose enough for a kernel that computes half types in fp32 while eager rounds after every op.
TOLERANCES = {
    torch.float16: dict(rtol=5e-3, atol=5e-3),
    torch.bfloat16: dict(rtol=4e-2, atol=4e-2),
    torch.float32: dict(rtol=1.3e-6, atol=1e-5),
    torch.float64: dict(rtol=1e-7, atol=1e-7),
}


def FT(*sizes: int, strides: Optional[Sequence[int]] = None, dtype: str = "Float", device: str = "cpu",
       requires_grad: int = 0) -> str:
    """Text of a profiled tensor type, e.g. ``FT(4, 8)`` -> ``Float(4, 8, strides=[8, 1], ...)``."""
    if strides is None:
        strides, acc = [], 1
        for s in reversed(sizes):
            strides.insert(0, acc)
            acc *= s
    dims = [str(s) for s in sizes] + ["strides=[" + ", ".join(map(str, strides)) + "]"]
    return f"{dtype}({', '.join(dims)}, requires_grad={requires_grad}, device={device})"


def parse(text: str) -> Graph:
    """Parse graph text (with ``{F}``-style placeholders already formatted) and verify it."""
    return verify(parse_graph(text))


def kinds(g: Graph) -> list[str]:
    """Node kinds of ``g`` in order, depth first through blocks (not into subgraphs)."""
    return [n.kind for n in g.all_nodes()]


def fusion_groups(g: Graph) -> list:
    """Every fusion group node of ``g`` (nested blocks included)."""
    return [n for n in g.all_nodes() if n.kind.endswith("FusionGroup")]


def assert_in_order(text: str, *needles: str) -> None:
    """FileCheck-style CHECK lines: each needle occurs in ``text`` after the previous one."""
    pos = 0
    for needle in needles:
        i = text.find(needle, pos)
        assert i >= 0, f"expected {needle!r} after position {pos} in:\n{text}"
        pos = i + len(needle)


def assert_not_in(text: str, *needles: str) -> None:
    for needle in needles:
        assert needle not in text, f"did not expect {needle!r} in:\n{text}"


def normalize(text: str) -> str:
    """Graph text with value names renumbered in order of appearance (for exact comparisons)."""
    names: dict[str, str] = {}

    def sub(m: re.Match) -> str:
        return "%" + names.setdefault(m.group(1), f"v{len(names)}")

    return re.sub(r"%([\w.]+)", sub, text)


def fallback_counter(sf: graphfuser.ScriptedFunction) -> dict[str, int]:
    """Count fallback (eager) runs of every fusion site of an optimized ``sf`` from now on."""
    counts = {"fallback": 0}
    for site in set(sf._sites.values()):
        inner = site.fallback_fn

        def counting(*args: Any, _inner=inner) -> tuple:
            counts["fallback"] += 1
            return _inner(*args)

        site.fallback_fn = counting
    return counts


def make_input(*shape: int, dtype: torch.dtype = torch.float32, layout: str = "dense", low: Optional[float] = None,
               device: str = "cpu") -> torch.Tensor:
    """A tensor of ``shape`` laid out as ``layout``: dense, transposed (last two dims swapped in
    memory), sliced (every other element of a wider tensor along the last dim). Normal values,
    or uniform ones above ``low``; integers are rounded multiples of the same draw."""
    def rnd(s):
        t = torch.randn(s, dtype=torch.float64, device=device) if low is None else \
            torch.rand(s, dtype=torch.float64, device=device) + low
        return t.to(dtype) if dtype.is_floating_point else (t * 10).round().to(dtype)
    if layout == "transposed" and len(shape) >= 2:
        return rnd(shape[:-2] + (shape[-1], shape[-2])).transpose(-1, -2)
    if layout == "sliced":
        return rnd(shape[:-1] + (2 * shape[-1],))[..., ::2]
    return rnd(shape)


def run_fused(fn: Callable, *args: Any, tol: dict, n: int = 3) -> graphfuser.ScriptedFunction:
    """Script ``fn``, call it ``n + 1`` times with the fallback disabled, compare the last result
    with eager and assert that no call ran the eager fallback."""
    ref = fn(*args)
    sf = graphfuser.script(fn)
    counts = None
    with config.override(disable=["fallback"]):
        for _ in range(n + 1):
            out = sf(*args)
            if counts is None and sf._optimized is not None:
                counts = fallback_counter(sf)
    torch.testing.assert_close(out, ref, **tol)
    assert counts is not None and counts["fallback"] == 0, str(sf._optimized)
    return sf


def _tolerance(out: Any) -> dict:
    if isinstance(out, torch.Tensor):
        return TOLERANCES.get(out.dtype, {})
    if isinstance(out, (tuple, list)) and out:
        tols = [_tolerance(o) for o in out]
        return max(tols, key=lambda t: t.get("rtol", 0))
    return {}


def check(fn: Callable, *inputs: Any, fused: Optional[bool] = True, runs: int = 3,
          min_groups: int = 1, rtol: Optional[float] = None, atol: Optional[float] = None,
          ) -> graphfuser.ScriptedFunction:
    """Script ``fn``, call it ``runs`` (>= profiling_runs + 1) times, compare each call with eager.

    ``fused=True``: the optimized graph has at least ``min_groups`` fusion groups and, after
    profiling, every call takes the fused path (no fallback runs). ``fused=False``: no group.
    ``fused=None``: only correctness is checked. Returns the scripted function.
    """
    runs = max(runs, graphfuser.config.profiling_runs + 1)
    expected = fn(*inputs)
    tol = {"rtol": rtol, "atol": atol} if rtol is not None or atol is not None else _tolerance(expected)
    sf = graphfuser.script(fn)
    counts = None
    for i in range(runs):
        out = sf(*inputs)
        torch.testing.assert_close(out, expected, **tol, equal_nan=True,
                                   msg=lambda m: f"call {i} of {fn.__name__}: {m}")
        if counts is None and sf._optimized is not None:
            counts = fallback_counter(sf)
    g = sf._optimized
    assert g is not None, "profiling never finished"
    verify(g)
    groups = fusion_groups(g)
    if fused:
        assert len(groups) >= min_groups, f"expected >= {min_groups} fusion group(s):\n{g}"
        assert counts is not None and counts["fallback"] == 0, f"guards missed on identical inputs:\n{g}"
    elif fused is False:
        assert not groups, f"expected no fusion group:\n{g}"
    return sf


def roundtrip(g: Graph) -> str:
    """Print ``g``, parse it back, print again; assert both texts agree; return the text."""
    text = print_graph(g)
    again = print_graph(verify(parse_graph(text)))
    assert again == text, f"round trip changed the graph:\n{text}\n---\n{again}"
    return text


def out_of_memory_once(sf: graphfuser.ScriptedFunction) -> list:
    """Make ``sf``'s steady host program raise torch.OutOfMemoryError on its next call only; the
    returned list counts its calls."""
    fast, calls = sf._fast, []
    assert fast is not None, "not steady yet"

    def run(*args: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory (test)")
        return fast(*args)

    sf._fast = run
    sf._replay = None
    return calls


def philox_dropouts(model: torch.nn.Module) -> None:
    """Make ``model``'s ``nn.Dropout`` modules draw their training masks as graphfuser's fused
    dropout does: (seed, offset) from torch's generator, the mask from Philox."""
    for m in model.modules():
        if type(m) is torch.nn.Dropout:
            def forward(x, m=m):
                if not m.training or m.p == 0:
                    return x
                from graphfuser.ops.philox import philox_state
                from graphfuser.ops.random import dropout_mask

                seed, offset = philox_state(x, x.numel())
                keep = dropout_mask(x, m.p, seed, offset)
                ct = torch.float64 if x.dtype == torch.float64 else torch.float32
                scale = 0.0 if m.p >= 1 else 1.0 / (1.0 - m.p)
                return (x.to(ct) * torch.where(keep, scale, 0.0).to(ct)).to(x.dtype)
            m.forward = forward


def bf16_training_output(f, x, calls: int = 3):
    """``f(x)`` under CPU bf16 autocast with grad, ``calls`` times (profiling, then the optimized
    program): the last output, for a backward."""
    out = None
    for _ in range(calls):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = f(x)
    return out


def on_cuda(graph: Graph) -> Graph:
    """``graph`` with every CPU tensor type moved to ``cuda:0`` (in place; returned): a group
    profiled on the CPU, rendered for CUDA as the GPU would lower it (the op table decides some
    accumulators by the profiled device)."""
    import dataclasses

    from graphfuser.ir.types import TensorType

    cuda = torch.device("cuda", 0)
    values = list(graph.inputs) + [o for n in graph.all_nodes() for o in n.outputs]
    for v in values:
        t = v.type
        if isinstance(t, TensorType) and t.device is not None and t.device.type == "cpu":
            v.type = dataclasses.replace(t, device=cuda)
    return graph


def live_instances(cls: type) -> list:
    """Every object of ``cls`` the garbage collector tracks, skipping the dead weak proxies
    earlier tests may leave (``isinstance`` of one raises ReferenceError)."""
    import gc

    out = []
    for o in gc.get_objects():
        try:
            if isinstance(o, cls):
                out.append(o)
        except ReferenceError:
            continue
    return out


def backend_graph_with(m, x, kind: str, calls: int = 5):
    """Run ``m(x)`` through ``torch.compile(backend=graphfuser)`` ``calls`` times without grad,
    each against eager's values; return the last live graph executor whose optimized graph holds
    a ``kind`` node (None if none does)."""
    import torch

    from graphfuser.config import config
    from graphfuser.executor.executor import ScriptedFunction
    from graphfuser.frontend.dynamo import graphfuser_backend

    torch._dynamo.reset()
    f = torch.compile(m, backend=graphfuser_backend)
    with torch.no_grad(), config.override(disable=["fallback"]):
        for _ in range(calls):
            torch.testing.assert_close(f(x), m(x), rtol=1e-5, atol=1e-5)
    sfs = [o for o in live_instances(ScriptedFunction) if type(o) is ScriptedFunction and o._optimized is not None
           and any(n.kind == kind for n in o._optimized.all_nodes())]
    return sfs[-1] if sfs else None


def masked_softmax(scores, bias):
    """Attention scores plus a bias (a mask), softmaxed over the keys: with a bias permuted from a
    [B, Q, K, H] tensor, T5's relative position bias (the row-gather tests)."""
    return torch.softmax(scores + bias, -1)


def biased_scores_and_softmax(bias, scores):
    y = (bias + scores).to(bias.dtype)     # the bias's permuted layout: stored strided along the row
    return y, torch.softmax(y, -1)


# -- CUDA sources compile -------------------------------------------------------------------------
# Where no GPU is (CI), a generated CUDA source is checked by NVRTC's front end and an unoptimized
# code generation (``-G``): every syntax, type and template error is caught, in a quarter of an
# optimized compile's time (a layer norm group's 20 variants: 0.28 against 1.19 s to PTX, 2.7 s
# to a CUBIN), which was a fifth of the suite's time. On a GPU machine the tests compile the
# CUBIN the launcher loads (and then run it).
def _check_options(options: Sequence[str]) -> tuple:
    return tuple(options) if torch.cuda.is_available() else tuple(options) + ("-G",)


def cuda_compiles(source: str, name: str, arch: int = 90, options: Sequence[str] = ()) -> bytes:
    """Compile ``source`` (``name`` an entry of it): the CUBIN on a GPU machine, else PTX at -G."""
    from graphfuser.runtime import nvrtc

    if torch.cuda.is_available():
        return nvrtc.compile_cubin(source, name, arch, options)
    return nvrtc.compile_ptx(source, name, arch, _check_options(options))


def cuda_ptx(source: str, name: str, arch: int = 90, options: Sequence[str] = ()) -> bytes:
    """The PTX of ``source`` (optimized on a GPU machine, at -G elsewhere: see above)."""
    from graphfuser.runtime import nvrtc

    return nvrtc.compile_ptx(source, name, arch, _check_options(options))
