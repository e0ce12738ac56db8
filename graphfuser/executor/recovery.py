"""When a host program cannot run a call: the executor's recovery paths, mixed into
``ScriptedFunction``.

- the host program raised where torch.jit.script's own executor runs the call: from then on the
  function runs through TorchScript (one warning), or eagerly where TorchScript is no place for it;
- the optimized program raised where the unfused one runs: profiling starts again, once;
- CUDA ran out of memory: the memory held for speed (captured CUDA graphs, kept weights) is given
  back and the call runs once more;
- a call that may have written its arguments or the module's tensors before the error is never
  run a second time.
"""
from __future__ import annotations

import warnings
from typing import Any, Callable, Optional

import torch

from ..config import config
from ..log import jit_log
from .hostgen import build_program

_TORCHSCRIPT = (torch.jit.ScriptModule, torch.jit.ScriptFunction, torch._C.ScriptMethod)


class Recovering:
    """Mixed into ``ScriptedFunction``: its ``graph``, ``_captured``, ``_module``, ``_program``,
    ``_reset``, ``_bind``, ``_writes``, ``_reprofiled`` and ``_oom_retry`` are the executor's."""

    def _run_through_torchscript(self, obj: Any, scripted: Any, reason: str) -> None:
        """Never less available than torch.jit.script: a graph with a construct the host program
        cannot execute runs through TorchScript's own executor, unfused, with one warning; one whose
        scripted graph lost an in-place write eager makes (``scripted is obj``) runs eagerly."""
        name = type(obj).__name__ if isinstance(obj, torch.nn.Module) else getattr(obj, "__name__", None) \
            or getattr(obj, "name", "fn")
        # (a frontend's own runner that is not TorchScript's, a Dynamo graph module, runs eager ops)
        how = "through torch.jit.script" if isinstance(scripted, _TORCHSCRIPT) and scripted is not obj else "eagerly"
        warnings.warn(f"graphfuser.script({name}): {reason}; it runs {how}, unfused", stacklevel=3)
        jit_log("graph_fuser", 1, f"{name} runs {how}: {reason}")
        self._module = obj if isinstance(obj, torch.nn.Module) else None
        self.graph = None  # type: ignore[assignment]
        self._fast = None
        self._program = None
        self._optimized = None
        self._torchscript = self._torchscript_call(self._module, scripted)

    @staticmethod
    def _torchscript_call(module: Optional[torch.nn.Module], scripted: Any) -> Callable:
        if module is None:
            return scripted
        # scripting copied the modules' non-tensor attributes: keep ``training`` in step with them
        pairs = [(m, s) for (_, m), (_, s) in zip(module.named_modules(), scripted.named_modules())]

        def call(*args: Any, **kwargs: Any) -> Any:
            for m, s in pairs:
                if s.training != m.training:
                    s.training = m.training
            return scripted(*args, **kwargs)
        return call

    def _writes_state(self) -> bool:
        """Whether a call may write into its arguments or the module's tensors: then a call that
        raised is never run a second time (its writes before the error are made: a second run
        would see them, ``x.add_(1); x // x`` of uint8 255 raises in eager, and a rerun would not)."""
        if self._writes is None:
            from ..passes.aliasing import AliasSets, all_values

            g = self.graph
            sets = AliasSets(g)
            state = list(g.inputs) + [v for v in all_values(g) if v.node is not None and v.node.kind == "prim::GetAttr"]
            self._writes = any(v.type.is_tensor and sets.is_written(v) for v in state)
        return self._writes

    def _recover(self, args: tuple, kwargs: dict, exc: Exception) -> Any:
        """The host program raised: if torch.jit.script's own executor runs the same call, the
        graph has a construct the host program gets wrong; from now on it runs through
        TorchScript (one warning). Where TorchScript raises too, the original error stands.
        A ``raise`` in the scripted code (torch.jit.Error) and ``PYTORCH_NVFUSER_DISABLE=fallback``
        never recover, nor does an integer division by zero (eager's ``ZeroDivisionError``): it is
        eager's answer, and TorchScript's executor can take the division to a scalar path without
        the check, where the process dies of SIGFPE (``int8_0dim % False``, torch 2.13: fuzz graph
        172 of CPU seed 36532)."""
        if isinstance(exc, torch.OutOfMemoryError):
            return self._after_oom(args, kwargs, exc)
        scripted = self._captured.scripted if self._captured is not None else None
        if isinstance(exc, torch.jit.Error) or config.is_disabled("fallback") or self._writes_state() \
                or str(exc).startswith("ZeroDivisionError"):
            raise exc
        if self._program is not None and not self._reprofiled:
            # the optimized program assumed what profiling saw of the module (a bias that was a
            # tensor); if the unoptimized graph runs this call, those assumptions no longer hold:
            # profile again, once. The unfused program is built anew: the module's attributes
            # may have moved since a program read them from their dicts (hostgen's GetAttr)
            self._plain = build_program(self.graph, name="unfused", module=self._module)
            try:
                out = self._plain.fn(*self._bind(args, kwargs))
            except Exception:
                pass
            else:
                jit_log("graph_fuser", 1, f"{self._captured.name}: the optimized program raised "
                        f"{type(exc).__name__}: {exc}; profiling again")
                self._reset()
                self._reprofiled = True
                return out
        if scripted is None:
            raise exc
        if self._module is not None and _torchscript_unsafe():
            scripted = self._module     # the module's own forward: what the user runs unscripted
        call = self._torchscript_call(self._module, scripted)
        try:
            out = call(*args, **kwargs)
        except Exception:
            raise exc from None
        self._run_through_torchscript(self._module if self._module is not None else self._captured,
                                      scripted, f"the host program raised {type(exc).__name__}: {exc}")
        return out

    def _after_oom(self, args: tuple, kwargs: dict, exc: Exception) -> Any:
        """CUDA ran out of memory: the memory graphfuser holds for speed (captured CUDA graphs'
        pools, ``cuda_graphs.release_graphs``) is given back and the call runs once more, unless
        it may have written its arguments or the module's state before the error. Running out of
        memory is never a construct for TorchScript's executor to take over (under CUDA autocast
        that executor crashes on models with nn.MultiheadAttention)."""
        from .cuda_graphs import release_graphs
        from .weight_cache import release_weight_caches

        # graphs first: a captured graph may read a kept weight
        freed = release_graphs() + release_weight_caches()
        if self._oom_retry or not freed or self._writes_state():
            raise exc
        self._oom_retry = True
        try:
            return self(*args, **kwargs)
        finally:
            self._oom_retry = False


def _torchscript_unsafe() -> bool:
    """Whether TorchScript's executor is no place to send a call: under CUDA autocast it crashed
    the process (a segmentation fault, torch 2.11) on torchvision's models with
    nn.MultiheadAttention, where eager runs. A module recovering there runs its eager forward."""
    return torch.is_autocast_enabled("cuda")
