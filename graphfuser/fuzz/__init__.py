"""The fuzzer: random graphs of every op in the op table, run through ``graphfuser.script`` (or the
``torch.compile`` backend: ``--frontend compile``) and compared with eager PyTorch (see
``tools/fuzz.py`` / ``python -m graphfuser fuzz``).

Modules: ``gen`` (hypothesis strategy of cases as source text), ``state`` (what a graph being
generated holds, shapes, promotion), ``emit`` (one statement of each kind), ``vocab`` (the ops and
literals drawn from), ``oracle`` (one case against
eager and a float64 reference), ``worker`` (a killable subprocess per worker), ``campaign``
(generate, run, count, shrink), ``report`` (markdown, JSON, repro files), ``known`` (the one
place naming deliberate deviations and known defect classes). hypothesis is imported lazily:
``import graphfuser`` never needs it.
"""
from .known import DEVIATIONS, KNOWN_DEFECTS, known_defect

__all__ = ["DEVIATIONS", "KNOWN_DEFECTS", "known_defect", "main"]


def main(argv=None) -> int:
    """The command line (``tools/fuzz.py``)."""
    from .cli import main as _main

    return _main(argv)
