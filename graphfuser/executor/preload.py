"""The variant a reduction launcher's first call will take, compiled when the group is built.

A reduction group's CUDA variants (P rows per thread, vectorized or scalar, split across blocks,
32- or 64-bit indexing) compile on first use: which one a call takes depends on its sizes,
strides and pointer alignment. Left at that, the first call after profiling compiles one variant
per group, group after group, on the calling thread: a GPT-2 training step's cold start ran 6
NVRTC compiles (1.7 s) there on an H200 host, while the build threads
(``ScriptedFunction._prebuild``) had compiled only what they knew of. Here the launcher runs once,
at build time, on meta tensors of the profiled sizes and strides, and stops at its first variant
lookup: that variant is compiled and loaded on the build thread, beside the other groups'.

A call of other sizes (or an input the profile did not see, such as a misaligned slice) takes its
own variant as before: a wrong guess costs one kernel nobody launches, never a wrong launch, since
the guess only decides what is compiled early.
"""
from __future__ import annotations

import types
from typing import Any, Callable, Optional

import torch

from ..ir.graph import Graph
from ..ir.types import TensorType
from ..log import jit_log

# what a scalar input stands for in the dry run (its value decides no variant)
_SCALARS = {"int": 1, "float": 1.0, "bool": False}


class _Chosen(Exception):
    def __init__(self, index: Optional[int]) -> None:
        super().__init__(index)
        self.index = index


def _meta_inputs(sub: Graph) -> Optional[list[Any]]:
    """Meta tensors of the profiled sizes, strides and dtypes (scalars as stand-ins), or None
    where the profile holds no concrete sizes (a dim that changed between profiling runs)."""
    args: list[Any] = []
    for v in sub.inputs:
        t = v.type
        if isinstance(t, TensorType):
            dims = (t.sizes or ()) + (t.strides or ())
            if t.sizes is None or t.strides is None or t.dtype is None \
                    or any(not isinstance(s, int) or s < 0 for s in dims):
                return None
            args.append(torch.empty_strided(t.sizes, t.strides, dtype=t.dtype, device="meta"))
        elif getattr(t, "name", None) in _SCALARS:
            args.append(_SCALARS[t.name])
        else:
            return None
    return args


def predicted_variant(run: Callable, sub: Graph) -> Optional[int]:
    """The index of the variant ``run`` (a reduction launcher, ``run.namespace`` its globals)
    loads first for inputs like the profiled ones; None when it cannot tell (no concrete
    profile, or a call that defers to eager)."""
    args = _meta_inputs(sub)
    if args is None:
        return None
    ns = dict(run.namespace)

    def chosen(i: Optional[int] = None, *_: Any) -> None:
        raise _Chosen(i)

    def fail(e: BaseException, _args: tuple) -> None:
        raise e

    ns.update(_dev=torch.device("meta"), _load=chosen, _fns=[None] * len(ns["_fns"]), _fail=fail,
              _broken=False, _fallback=lambda *a: chosen(None))
    try:
        types.FunctionType(run.__code__, ns)(*args)
    except _Chosen as c:
        return c.index
    except Exception as e:  # noqa: BLE001 - a guess that fails only means nothing is compiled early
        jit_log("kernel_cache", 2, f"no variant guessed for the first call: {type(e).__name__}: {e}")
    return None


def preload(run: Callable, sub: Graph, load: Callable[[int], Any]) -> None:
    """Compile and load the variant the first call is expected to take (see the module doc)."""
    i = predicted_variant(run, sub)
    if i is not None:
        load(i)
