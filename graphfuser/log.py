"""Logs and dumps, rich-formatted and opt-in.

The library itself attaches only a ``NullHandler`` to the ``graphfuser`` logger. Output appears
when a log name is enabled through ``PYTORCH_JIT_LOG_LEVEL`` (TorchScript's syntax, e.g.
``">partition:graph_fuser:>>kernel_cache"``), when a dump is named in ``PYTORCH_NVFUSER_DUMP``,
or after ``graphfuser.enable_logging()``.

Example::

    >>> from graphfuser import log
    >>> log.jit_log("partition", 1, "rejected aten::mm: not a pointwise op")  # prints if enabled
"""
from __future__ import annotations

import logging
import sys

from .config import config

logger = logging.getLogger("graphfuser")
logger.addHandler(logging.NullHandler())

_rich_handler: logging.Handler | None = None


def _console(stderr: bool = True):
    from rich.console import Console

    return Console(stderr=stderr, soft_wrap=True, highlight=False)


def enable_logging(level: int = logging.INFO) -> None:
    """Attach a rich handler to the ``graphfuser`` logger (idempotent)."""
    global _rich_handler
    if _rich_handler is None:
        from rich.logging import RichHandler

        _rich_handler = RichHandler(console=_console(), show_path=False, markup=False,
                                    rich_tracebacks=False, show_time=False)
        _rich_handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(_rich_handler)
    logger.setLevel(level)


def log_enabled(name: str, level: int = 0) -> bool:
    """True if ``PYTORCH_JIT_LOG_LEVEL`` enables ``name`` at ``level`` (0 dump, 1 update, 2 debug)."""
    return config.log_level(name) >= level


def jit_log(name: str, level: int, message: str) -> None:
    """Log ``message`` under a TorchScript-style log name if that name is enabled at ``level``."""
    if config.log_level(name) >= level:
        enable_logging()
        logger.info("[%s] %s", name, message)


def jit_log_graph(name: str, title: str, graph) -> None:
    """Dump a graph under ``name`` at level 0, as TorchScript's GRAPH_DUMP does."""
    if config.log_level(name) >= 0:
        enable_logging()
        logger.info("[%s] %s\n%s", name, title, graph)


def dump(option: str, title: str, text: str, lexer: str | None = None) -> None:
    """Print a named dump (``PYTORCH_NVFUSER_DUMP=option``) to stdout, syntax-highlighted on a tty."""
    if not config.dumps(option):
        return
    print_block(title, text, lexer)


def print_block(title: str, text: str, lexer: str | None = None, stream=None) -> None:
    stream = stream or sys.stdout
    if lexer and stream.isatty():
        from rich.console import Console
        from rich.syntax import Syntax

        console = Console(file=stream)
        console.rule(title)
        console.print(Syntax(text, lexer, theme="monokai", line_numbers=False))
    else:
        stream.write(f"===== {title} =====\n{text}\n")
        stream.flush()


def warn(message: str) -> None:
    """A user-facing warning (fallbacks, specialization limits): Python's warnings + log."""
    import warnings

    warnings.warn(message, RuntimeWarning, stacklevel=3)
    logger.warning(message)
