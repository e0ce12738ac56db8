"""Run pytest with the reduction settings before chunks of 64 / short column slots (chunks of
1024 on the CPU, none on CUDA, one column slot per thread): a test of their accuracy must fail."""
import sys
import pytest
from graphfuser.codegen import dialects
from graphfuser.executor import compiled_reduction

dialects.CPP.sum_block = int(__import__("os").environ.get("OLD_BLOCK", "1024"))
dialects.CUDA.sum_block = 0
compiled_reduction.SLOT_ROWS = 1 << 40
sys.exit(pytest.main(sys.argv[1:]))
