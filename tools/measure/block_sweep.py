import runpy, sys
from graphfuser.codegen import dialects
dialects.CPP.sum_block = int(sys.argv[1])
sys.argv = [sys.argv[2]] + sys.argv[3:]
runpy.run_path(sys.argv[0], run_name="__main__")
