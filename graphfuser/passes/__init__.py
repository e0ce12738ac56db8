"""Graph passes, run in this order by the executor (``PIPELINE``).

Before profiling (on the captured graph, so new nodes get profiled types):
   insert_autocast  under torch.autocast only: autocast's casts become explicit nodes (before
                  decompose, which splits ops whose autocast policy is their own)
   decompose      opt-in: split linear / conv bias adds off so they fuse with what follows

After profiling:

0. fold_constant_ifs  inline If nodes with constant conditions (F.* wrappers' `inplace` flags), so
                  they do not act as barriers (before everything that looks at blocks)
1. functionalize  in-place ops on fresh, unaliased intermediates become functional where eager's
                  in-place shape / dtype rules hold on the profiled types (must precede partition,
                  which never fuses in-place ops; may-alias sets come from schema annotations,
                  passes/aliasing.py)
1b. sink_views   permute / transpose / unsqueeze of a single-use pointwise result move onto its
                  inputs, so views between fusible ops stop splitting groups (after functionalize,
                  whose alias sets see the original views; before partition)
2. partition      the graph fuser: shape reads move to their source value, dead nodes go (dce),
                  then fusion groups from the op table's verdicts and the knobs; functionalized
                  ops no group took become in-place again
3. insert_guards  guard + If(group | fallback) around every group (needs the groups' types); a
                  reduction's profiled scalar arguments become group constants the guard checks
4. dce            drop what the rewrites left unused (after everything that replaces uses)
"""
from .autocast import insert_autocast
from .dce import dce
from .decompose import decompose
from .functionalize import functionalize
from .guard import insert_guards, wrap_group
from .partition import partition
from .simplify import fold_constant_ifs
from .sink_views import sink_views

PRE_PROFILING = ("insert_autocast", "decompose")
PIPELINE = ("fold_constant_ifs", "functionalize", "sink_views", "partition", "insert_guards", "dce")

__all__ = ["PRE_PROFILING", "PIPELINE", "insert_autocast", "decompose", "fold_constant_ifs", "functionalize", "sink_views", "partition", "insert_guards", "wrap_group", "dce"]
