"""Print the C++ source of one reduction case of ``ab_blocks.py`` with a given chunk size."""
import sys
import ab_blocks
import graphfuser
from graphfuser.codegen import dialects

dialects.CPP.sum_block = int(sys.argv[1])
for name, fn, make in ab_blocks.CASES:
    if sys.argv[2] in name:
        args = make()
        f = graphfuser.script(fn)
        for _ in range(3):
            f(*args)
