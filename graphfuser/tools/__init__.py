"""Command-line tools, each reachable as ``python -m graphfuser <tool>`` and as ``tools/<tool>.py``."""
