export TORCH_CPP_LOG_LEVEL=ERROR PYTHONPATH=.
timeout 60 python3 scratch/bnprobe.py > $OUT/bn.log 2>&1
timeout 60 python3 -m pytest -q -p no:cacheprovider -m cuda tests/cuda/test_cuda_pointwise.py -k vectorized tests/passes/test_autocast.py tests/ops/test_nan_semantics.py tests/codegen/test_reduction_edges.py > $OUT/t.log 2>&1; tail -3 $OUT/t.log
timeout 420 python3 tools/zoo.py --train --device cuda --out $OUT/zt > $OUT/zt.log 2>&1; tail -15 $OUT/zt.log
