"""Command-line tools, each reachable as ``python -m graphfuser <tool>`` and as ``tools/<tool>.py``.

The top layer of the package: a tool may import any stage, and no stage imports a tool.
"""
from __future__ import annotations

import os

# Where the tools write by default: ``logs/`` at the repository root.
LOGS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "logs")
