"""What a frontend hands the executor: a graph and how to read a call's arguments.

The executor runs a ``Captured`` and never knows which frontend made it (TorchScript capture,
the ``torch.compile`` backend, ``FusionDefinition``): the frontend's job ends here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch

from ..ir.graph import Graph


class UnsupportedError(RuntimeError):
    """A construct graphfuser cannot capture or execute."""

    def __init__(self, message: str, scripted: Any = None) -> None:
        super().__init__(message)
        self.scripted = scripted    # the frontend's own runner of the program, when it has one


@dataclass
class Captured:
    """A captured program.

    ``graph``: graphfuser IR (its first input is ``self`` where ``module`` is set);
    ``arg_names`` / ``defaults``: the user-facing arguments (``self`` excluded) and their defaults;
    ``scripted``: the frontend's own unfused runner of the whole program (what ``torch.jit.script``
    returned; a Dynamo graph module's forward), run where the host program cannot run a call;
    ``static_inputs``: positions of arguments whose tensors stay put between calls (parameters and
    buffers a frontend passes as arguments): CUDA graph replay reads them in place, uncopied.
    ``fixed_sizes``: every argument's sizes are those profiled for the life of the program (a
    Dynamo graph without symbolic sizes: Dynamo guards each size and compiles anew for another),
    so a rewrite may rely on a profiled size (``passes/rotary.py``).
    ``loose_output_strides``: the entry point promises the values of what it returns, not their
    strides (``torch.compile``: Inductor returns a padded GEMM's output as a strided view of its
    padded buffer), so a padded linear's result may leave uncopied (``passes/gemm_pad.py``)."""

    graph: Graph
    module: Optional[torch.nn.Module]
    arg_names: list[str]
    defaults: dict[str, Any]
    name: str
    scripted: Any = None
    static_inputs: tuple[int, ...] = ()
    fixed_sizes: bool = False
    loose_output_strides: bool = False
