"""Fuzz graphfuser against eager PyTorch with random graphs of every op in the op table.

    python tools/fuzz.py --device cpu --graphs 2000 --seed 7 --out logs/

writes logs/fuzz-<device>.md (counts per category, fusion rate, deviations, shrunk classes,
per-op coverage), logs/fuzz-<device>.json and repro files under logs/fuzz-repros/.
The same command is ``python -m graphfuser fuzz``.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from graphfuser.fuzz import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
