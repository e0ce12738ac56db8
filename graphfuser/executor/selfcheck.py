"""The executor's side of ``check_every: N`` (``fusion.FusionSite`` holds the per-group side).

With N > 0 a scripted function has two host programs built from its optimized graph: the steady
one (the compiled runners themselves, CUDA graph replay included) and a checking one, whose group
nodes call ``FusionSite.checking_entry``. Every N-th steady call runs the checking program
(``_check_due``); its groups return eager's results and add whether their kernels agreed to
``_check_flags``, read with one host sync at the end of the call (``_checked_call``). A site that
disagreed is suspect: the next call is a check, and checks it in full.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Optional

from ..config import config
from ..ir.graph import Node
from .fusion import settle
from .hostgen import build_program


class SelfChecking:
    """Mixed into ``ScriptedFunction``: its ``_optimized`` graph, ``_module``, ``_sites``,
    ``_runners`` and ``_special`` are the executor's."""

    def _build_checking(self) -> None:
        """(Re)build the checking program for the current ``check_every`` (none when 0)."""
        self._check_every = max(0, int(config.check_every))
        self._checking = self._checking_fast = None
        if self._check_every:
            self._checking = build_program(self._optimized, name="checking", special=self._checking_special,
                                           module=self._module)
            cfn = self._checking.fn
            self._checking_fast = functools.partial(cfn, self._module) if self._module is not None else cfn

    def _check_due(self) -> bool:
        """Count a steady call; True for every ``check_every``-th (it runs the checking program)."""
        self._check_count += 1
        if self._check_count < self._check_every:
            return False
        self._check_count = 0
        return True

    def _checked_call(self, fn: Callable, args: tuple) -> Any:
        """A call through the checking program: every group returns eager's result and adds
        whether its kernel agreed to ``_check_flags``, read with one host sync at the end; a
        site that disagreed is suspect, and the next call checks it in full."""
        try:
            return fn(*args)
        finally:
            bad = settle(self._check_flags)
            for site in bad:
                site.suspect = True
            if bad:
                self._check_count = self._check_every     # the next call is a check

    def _checking_special(self, node: Node) -> Optional[Callable]:
        fn = self._special(node)
        site = self._sites.get(node) if node.kind.endswith("FusionGroup") else None
        if site is None:
            return fn
        runner = self._runners[node]
        return site.checking_entry(node, getattr(runner, "run", runner))
