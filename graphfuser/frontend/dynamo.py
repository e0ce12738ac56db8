"""The ``torch.compile`` backend: ``torch.compile(model, backend="graphfuser")``.

Dynamo traces the model into torch-level FX graphs and calls ``graphfuser_backend`` once per
graph; ``frontend/fx.py`` turns each into graphfuser's IR and the executor runs it like a scripted
function: profiled, partitioned, guarded, fused, cached, with the same knobs, dumps and logs.

Why torch-level FX graphs and not AOTAutograd's ATen graphs:

- training: a plain backend's callable is differentiated by eager autograd, and graphfuser's
  differentiable fusion groups are autograd nodes already, with a backward built from the op
  table's derivative rows and fused through the same pipeline. AOTAutograd would hand over a
  second, separately traced backward graph that graphfuser would have to match to its forward;
- vocabulary: torch-level calls (``linear``, ``layer_norm``, ``softmax``, ``dropout``, SDPA) are
  the ops TorchScript's graphs have, which the op table, the decompositions and the schedulers
  (persistent normalization, Philox dropout) are built around; ``core_aten_decompositions``
  would take SDPA, ``silu`` and the norms apart;
- start-up: no second trace (AOTAutograd's functionalization and joint graph) before the first
  output;
- what the graph does is what runs: in-place ops, grad-mode and autocast switches stay in the
  graph and run in order (unfused where they must), instead of a functionalized copy of it.

The backend is registered by the ``torch_dynamo_backends`` entry point (``pyproject.toml``)
pointing at the undecorated ``graphfuser_backend``: ``torch.compile(m, backend="graphfuser")``
works in a process that never imports graphfuser. Nothing here calls ``register_backend``
(Dynamo would then see the name twice).

Example::

    >>> import torch
    >>> from graphfuser.frontend.dynamo import graphfuser_backend
    >>> f = torch.compile(lambda x: (x * 2.0 + 1.0).relu(), backend=graphfuser_backend)
    >>> bool((f(torch.ones(3)) == 3.0).all())
    True
"""
from __future__ import annotations

import itertools
from typing import Any, Callable, Optional

import torch

from ..config import ConfigError, config, options_to_knobs
from ..executor.executor import ScriptedFunction
from ..executor.start_up import warm_cuda
from ..executor.source import Captured, UnsupportedError
from ..log import jit_log
from .fx import capture

# torch.compile's modes -> knob settings. CUDA graph replay is graphfuser's answer to
# "reduce-overhead" (on unless disabled); "max-autotune-no-cudagraphs" turns it off.
_REPLAY = ("cuda_graphs", "cuda_graphs_training")
MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
_counter = itertools.count()


def knobs_for(mode: Optional[str] = None, options: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """The config knobs that ``torch.compile(..., mode=mode, options=options)`` sets, checked
    against the config (an unknown key or value raises ``ConfigError`` listing the valid ones)."""
    knobs = options_to_knobs(dict(options or {}))
    mode = mode or "default"
    if mode not in MODES:
        raise ConfigError(f"torch.compile(backend='graphfuser'): unknown mode {mode!r}; valid modes are: "
                          f"{', '.join(MODES)}")
    disable = list(knobs.get("disable", config.disable))
    if isinstance(disable, str):
        disable = [t.strip() for t in disable.split(",") if t.strip()]
    if mode == "reduce-overhead":
        knobs["disable"] = [d for d in disable if d not in _REPLAY]
    elif mode == "max-autotune-no-cudagraphs":
        knobs["disable"] = disable + [d for d in _REPLAY if d not in disable]
    with config.override(**knobs):      # raises ConfigError naming the valid knobs / options
        pass
    return knobs


def _scoped(fn: Callable, knobs: dict[str, Any]) -> Callable:
    """``fn`` run with ``knobs`` set for the duration of each call (compile options apply to the
    model they were given with, not to the process)."""
    def call(*args: Any) -> Any:
        with config.override(**knobs):
            return fn(*args)
    call.__wrapped__ = fn     # type: ignore[attr-defined]
    return call


def graphfuser_backend(gm: torch.fx.GraphModule, example_inputs: list[Any], *, mode: Optional[str] = None,
                       options: Optional[dict[str, Any]] = None, **unused: Any) -> Callable:
    """A Dynamo backend: returns a callable with ``gm.forward``'s calling convention that runs the
    graph through graphfuser's profiling executor. ``example_inputs`` are not read (they are fake
    tensors under DDP's graph splitting): profiling happens on the first real calls. ``mode`` and
    ``options`` are ``torch.compile``'s; other keywords a newer Dynamo may pass are logged, unused."""
    if unused:
        jit_log("graph_fuser", 1, f"torch.compile backend: ignored arguments {sorted(unused)}")
    knobs = knobs_for(mode, options)
    name = f"dynamo_graph_{next(_counter)}"
    warm_cuda(example_inputs)       # (the first kernels' toolchain, while Dynamo finishes its guards)

    def capture_graph(module: torch.fx.GraphModule) -> Captured:
        try:
            return capture(module, name)
        except UnsupportedError as e:
            if config.is_disabled("fallback"):
                raise UnsupportedError(f"{name}: {e}\nrepro (the FX graph):\n{module.code}") from e
            raise

    with config.override(**knobs):
        fn = ScriptedFunction(gm, capture_graph)
    jit_log("graph_fuser", 1, f"torch.compile backend: {name} with {len(gm.graph.nodes)} FX nodes")
    changed = {k: v for k, v in knobs.items() if config.as_dict().get(k) != v}
    return _scoped(fn, changed) if changed else fn


def registered_backend() -> Any:
    """What to pass as ``torch.compile(..., backend=)`` for graphfuser: its name where the package
    is installed (the entry point registers it), the function itself in a source checkout on
    ``PYTHONPATH`` (the tools run that way on the GPU machine)."""
    from importlib.metadata import entry_points

    # (read off the package metadata: ``torch._dynamo.list_backends()`` would load and register
    # every entry point just to answer)
    installed = any(ep.name == "graphfuser" for ep in entry_points(group="torch_dynamo_backends"))
    return "graphfuser" if installed else graphfuser_backend
