"""``ScriptedModule``: what ``graphfuser.script(module)`` returns, an ``nn.Module`` itself.

As ``torch.jit.script`` returns a ``ScriptModule``, scripting an ``nn.Module`` returns a module
that optimizers, checkpoints and ``DistributedDataParallel`` take like the original:

- it *is* the original's state: its ``_parameters``, ``_buffers``, ``_modules`` (and the root's
  non-persistent buffer set and state-dict hooks) are the original's own dicts, so
  ``parameters()``, ``named_parameters()``, ``state_dict()`` keys, submodule access
  (``sm.layer1``) and parameter replacement are the original's, with no prefix; a checkpoint of
  the eager model loads into the scripted one and the other way round;
- its ``forward`` is a ``ScriptedFunction`` over the original module, whose host programs read
  parameters and buffers from those dicts at run time (so in-place optimizer steps, DDP's
  broadcasts and ``load_state_dict`` are seen on the next call);
- ``train()`` / ``eval()`` and ``training`` are the original's (the executor specializes on the
  training flags of the modules it reads them from);
- ``.to()`` / ``.cuda()`` / ``.half()`` move the original's tensors (``_apply``); where a dtype,
  device, layout or ``requires_grad`` changed, the scripted function profiles again from its
  captured graph (no new ``torch.jit.script``), so kernels are specialized for what now runs;
- ``copy.deepcopy`` copies the original and scripts the copy; pickling pickles the original and
  scripts it again on load (a scripted module pickles wherever its eager module does);
- attributes it does not have are the scripted function's (``graph_for``, ``code``, ``graph``
  and the executor's state that tools inspect), then the original's.

Example::

    >>> import torch, graphfuser
    >>> model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU())
    >>> sm = graphfuser.script(model)
    >>> isinstance(sm, torch.nn.Module), list(sm.state_dict()) == list(model.state_dict())
    (True, True)
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Iterator, Optional

import torch

from ..executor.executor import ScriptedFunction
from ..executor.source import Captured
from .torchscript import capture

# the original root's dicts that the scripted module shares (nn.Module keeps its state in them)
_SHARED = ("_parameters", "_buffers", "_modules", "_non_persistent_buffers_set", "_state_dict_hooks",
           "_state_dict_pre_hooks", "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks")
# attributes of the scripted module itself (everything else is read from the function or the original)
_OWN = frozenset(("_orig", "_fn", "_capture", "_version") + _SHARED)


class ScriptedModule(torch.nn.Module):
    """A scripted ``nn.Module``: the original's parameters, buffers and submodules, run fused.

    Example::

        >>> import torch, graphfuser
        >>> model = torch.nn.Linear(8, 8)
        >>> sm = graphfuser.script(model)
        >>> sm.weight is model.weight
        True
        >>> x = torch.rand(2, 8)
        >>> for _ in range(3):
        ...     y = sm(x)
        >>> torch.allclose(y, model(x))
        True
    """

    def __init__(self, module: torch.nn.Module, capture: Callable[[Any], Captured] = capture,
                 function: Optional[ScriptedFunction] = None) -> None:
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"ScriptedModule expects an nn.Module, got {type(module).__name__}")
        self.__dict__["_orig"] = module          # before nn.Module.__init__ sets ``training``
        mode = module.training
        super().__init__()
        module.training = mode                   # (which it set to True on the original)
        for name in _SHARED:
            shared = module.__dict__.get(name, getattr(module, name, None))
            if shared is not None:      # a ScriptModule keeps some of them elsewhere
                self.__dict__[name] = shared
        self.__dict__["_version"] = getattr(module, "_version", 1)
        self.__dict__["_capture"] = capture
        self.__dict__["_fn"] = function if function is not None else ScriptedFunction(module, capture)

    # -- the original's state --------------------------------------------------------------
    @property
    def original(self) -> torch.nn.Module:
        """The module that was scripted (sharing this one's parameters, buffers and submodules)."""
        return self.__dict__["_orig"]

    @property
    def training(self) -> bool:  # type: ignore[override]
        return self.__dict__["_orig"].training

    @training.setter
    def training(self, mode: bool) -> None:
        orig = self.__dict__.get("_orig")
        if orig is not None:
            orig.training = mode

    def train(self, mode: bool = True) -> "ScriptedModule":
        """The original's ``train(mode)`` (its own override included); returns this module."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self._orig.train(mode)
        return self

    def _apply(self, fn: Callable, recurse: bool = True) -> "ScriptedModule":
        # .to() / .cuda() / .half() / .float(): the original's tensors move (its own _apply
        # override included); a changed dtype, device, layout or requires_grad profiles again
        before = _tensor_specs(self._orig)
        self._orig._apply(fn, recurse)
        if _tensor_specs(self._orig) != before:
            self._reprofile()
        return self

    def _reprofile(self) -> None:
        """A fresh executor over the same captured graph: profiling, partition and kernels anew."""
        fn: ScriptedFunction = self.__dict__["_fn"]
        captured = getattr(fn, "_captured", None)
        if getattr(fn, "_torchscript", None) is not None or captured is None:
            return              # runs through torch.jit.script or eagerly: nothing specialized
        self.__dict__["_fn"] = ScriptedFunction(self._orig, lambda _obj: captured)

    def _save_to_state_dict(self, destination: dict, prefix: str, keep_vars: bool) -> None:
        self._orig._save_to_state_dict(destination, prefix, keep_vars)

    def _load_from_state_dict(self, *args: Any, **kwargs: Any) -> None:
        self._orig._load_from_state_dict(*args, **kwargs)

    # -- running ----------------------------------------------------------------------------
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.__dict__["_fn"](*args, **kwargs)

    def graph_for(self, *args: Any, **kwargs: Any) -> Any:
        """Run once with ``args`` and return the graph that ran (``ScriptedFunction.graph_for``)."""
        return self._fn.graph_for(*args, **kwargs)

    @property
    def code(self) -> str:
        """Source of the current host program."""
        return self._fn.code

    @property
    def graph(self) -> Any:
        """The captured graph (``self`` is its first input)."""
        return self._fn.graph

    @property
    def function(self) -> ScriptedFunction:
        """The ``ScriptedFunction`` that runs ``forward``."""
        return self.__dict__["_fn"]

    # -- attributes ---------------------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)       # parameters, buffers, submodules (shared dicts)
        except AttributeError:
            pass
        d = self.__dict__
        if "_fn" not in d:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute {name!r}")
        # the executor's state (``_optimized``, ``_sites``, ``_specialized``...) first for private
        # names, the original's attributes first for public ones
        order = (d["_fn"], d["_orig"]) if name.startswith("_") else (d["_orig"], d["_fn"])
        for owner in order:
            try:
                return getattr(owner, name)
            except AttributeError:
                continue
        raise AttributeError(f"'{type(self).__name__}' ({type(d['_orig']).__name__}) object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        d = self.__dict__
        if name not in _OWN and name not in d and "_fn" in d and name not in type(self).__dict__ \
                and not isinstance(value, (torch.nn.Parameter, torch.nn.Module, torch.Tensor)):
            # a plain attribute the original or the executor holds: set it there
            for owner in (d["_fn"], d["_orig"]) if name.startswith("_") else (d["_orig"], d["_fn"]):
                if name in getattr(owner, "__dict__", {}):
                    setattr(owner, name, value)
                    return
        super().__setattr__(name, value)

    def __dir__(self) -> list:
        return sorted(set(super().__dir__()) | set(dir(self._orig)))

    def _get_name(self) -> str:
        return "ScriptedModule"

    def extra_repr(self) -> str:
        inner = self._orig.extra_repr()
        return f"original_name={type(self._orig).__name__}" + (f", {inner}" if inner else "")

    # -- copies --------------------------------------------------------------------------------
    def __deepcopy__(self, memo: dict) -> "ScriptedModule":
        orig = copy.deepcopy(self._orig, memo)
        new = type(self)(orig, self._capture)
        memo[id(self)] = new
        return new

    def __reduce_ex__(self, protocol: Any) -> tuple:
        # the original, scripted again on load: compiled programs and locks do not pickle
        return _rescript, (self._orig,)


def _rescript(module: torch.nn.Module) -> ScriptedModule:
    """Unpickling: script the unpickled original again."""
    return ScriptedModule(module)


def _tensor_specs(module: torch.nn.Module) -> list[tuple]:
    """What a scripted module's kernels are specialized on, for every parameter and buffer."""
    def spec(t: torch.Tensor) -> tuple:
        return t.dtype, t.device, t.layout, t.stride(), t.requires_grad

    return [spec(t) for t in _tensors(module)]


def _tensors(module: torch.nn.Module) -> Iterator[torch.Tensor]:
    for t in module.parameters():
        yield t
    for t in module.buffers():
        yield t
