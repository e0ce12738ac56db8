"""Errors raised by the runtime (compilation, loading, launching)."""
from __future__ import annotations

from typing import Any, Sequence


class CompileError(RuntimeError):
    """A generated kernel failed to compile.

    ``source`` is the kernel text, ``log`` the compiler's diagnostics and ``command`` the command
    line (a list of arguments; for NVRTC, its options). The message includes the log, so the
    error is readable on its own.

    Example::

        >>> e = CompileError("boom", source="int x", log="error: expected ';'", command=["g++"])
        >>> e.log
        "error: expected ';'"
    """

    def __init__(self, message: str, *, source: str = "", log: str = "",
                 command: Sequence[str] | str | None = None) -> None:
        super().__init__(message)
        self.source = source
        self.log = log
        self.command = list(command) if isinstance(command, (list, tuple)) else command

    def __reduce__(self) -> tuple[Any, ...]:
        # Keep the attributes when the error crosses a process boundary (pickle).
        return (self.__class__, (str(self),), dict(self.__dict__))


class LaunchError(RuntimeError):
    """A compiled kernel could not be loaded or launched (driver error, bad launch config)."""
