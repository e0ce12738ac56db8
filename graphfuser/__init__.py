"""graphfuser: a TorchScript-style graph fuser for PyTorch.

Example::

    import torch, graphfuser

    def forward(x):
        return (x + 1.0).relu()

    f = graphfuser.script(forward)
    for _ in range(3):
        y = f(torch.rand(2, 32, 128, 512))
    print(f.graph_for(torch.rand(2, 32, 128, 512)))   # prim::CpuFusionGuard / prim::CpuFusionGroup_0

    model = torch.compile(model, backend="graphfuser")   # the same pipeline behind Dynamo
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

from .config import ConfigError, config
from .executor.executor import ScriptedFunction, last_executed_optimized_graph
from .executor.fusion import refresh_checks as _refresh_checks
from .executor.source import UnsupportedError
from .frontend.dynamo import graphfuser_backend
from .frontend.module import ScriptedModule
from .frontend.torchscript import capture as _capture
from .log import enable_logging

__version__ = "0.1.0"


def script(fn_or_module: Any) -> Any:
    """Script a function or ``nn.Module`` for profiling, fusion and guarded fused execution.

    A function gives a ``ScriptedFunction``; a module gives a ``ScriptedModule``, an ``nn.Module``
    sharing the original's parameters, buffers and submodules (``state_dict`` keys included), so
    optimizers, checkpoints and ``DistributedDataParallel`` take it like the original::

        sm = graphfuser.script(model)
        ddp = torch.nn.parallel.DistributedDataParallel(sm)
    """
    if isinstance(fn_or_module, ScriptedModule):
        return fn_or_module
    if isinstance(fn_or_module, torch.nn.Module):
        return ScriptedModule(fn_or_module, _capture)
    return ScriptedFunction(fn_or_module, _capture)


# -- knobs, mirroring torch._C._jit_set_nvfuser_* -------------------------------------------------
def set_enabled(enabled: bool) -> bool:
    """Turn fusion on or off (like ``torch._C._jit_set_nvfuser_enabled``); returns the old value."""
    old = config.enabled
    config.set(enabled=bool(enabled))
    return old


def set_single_node_mode(flag: bool) -> bool:
    """Allow fusion groups of a single node; returns the old value."""
    old = config.single_node_mode
    config.set(single_node_mode=bool(flag))
    return old


def set_horizontal_mode(flag: bool) -> bool:
    """Fuse siblings that share a tensor input; returns the old value."""
    old = config.horizontal_mode
    config.set(horizontal_mode=bool(flag))
    return old


def set_guard_mode(flag: bool) -> bool:
    """Check guards before fused calls (off is for testing only); returns the old value."""
    old = config.guard_mode
    config.set(guard_mode=bool(flag))
    return old


def set_skip_node_kind(kind: str, flag: bool = True) -> bool:
    """Never fuse nodes of ``kind`` (e.g. ``"aten::add"``) when ``flag``; returns the old state."""
    kinds = list(config.skip_node_kinds)
    old = kind in kinds
    if flag and not old:
        kinds.append(kind)
    elif not flag and old:
        kinds.remove(kind)
    config.set(skip_node_kinds=kinds)
    return old


def set_check_every(n: int) -> int:
    """Every ``n``-th call of each fusion group also runs its eager program and compares; a group
    that disagrees is quarantined (runs eagerly from then on, one warning, a repro). 0 is off.
    Applies to scripted functions already running too; returns the old value."""
    old = config.check_every
    config.set(check_every=n)
    if int(n) != old:
        _refresh_checks()
    return old


@contextlib.contextmanager
def fuser(enabled: bool = True, **knobs: Any) -> Iterator[None]:
    """Temporarily set knobs: ``with graphfuser.fuser(single_node_mode=True): ...``."""
    with config.override(enabled=enabled, **knobs):
        yield


__all__ = [
    "script", "ScriptedFunction", "ScriptedModule", "last_executed_optimized_graph", "config", "ConfigError",
    "UnsupportedError",
    "set_enabled", "set_single_node_mode", "set_horizontal_mode", "set_guard_mode", "set_skip_node_kind",
    "set_check_every",
    "fuser", "enable_logging", "graphfuser_backend",
]


_FRONTEND = ("Fusion", "FusionDefinition", "DataType", "ParallelType", "ComputeAtMode")


def __getattr__(name: str) -> Any:
    """nvFuser's Python frontend, loaded on first use: ``graphfuser.FusionDefinition``."""
    if name in _FRONTEND:
        from . import frontend

        return getattr(frontend, name)
    raise AttributeError(f"module 'graphfuser' has no attribute {name!r}")
