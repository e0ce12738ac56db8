"""Python source the pipeline generates (kernel launchers, guards, host programs, autograd
functions), compiled once per text.

A model repeats itself: GPT-2's twelve blocks make twelve groups of each kind, whose launchers
and guards print the same text. ``compile`` is the costly step (a launcher takes about a
millisecond); running the code object into a fresh namespace is not. So code objects are kept
by (source, filename): each ``define`` still binds its own namespace, so nothing is shared
between the callers but the bytecode.
"""
from __future__ import annotations

import functools
import types
from typing import Any

STATS = {"compiled": 0, "reused": 0}


@functools.lru_cache(maxsize=4096)
def _code(source: str, filename: str) -> types.CodeType:
    STATS["compiled"] += 1
    return compile(source, filename, "exec")


def define(source: str, filename: str, ns: dict[str, Any]) -> dict[str, Any]:
    """Run ``source`` into ``ns`` (its globals) and return ``ns``."""
    hits = _code.cache_info().hits
    exec(_code(source, filename), ns)
    STATS["reused"] += _code.cache_info().hits - hits
    return ns
