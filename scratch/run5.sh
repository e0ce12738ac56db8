export TORCH_CPP_LOG_LEVEL=ERROR
cd scratch/bn && (PYTHONPATH=. timeout 200 python3 -m pytest -q -p no:cacheprovider -m cuda --timeout 100 -x tests/cuda/test_cuda_outer_split.py tests/autodiff tests/runtime > $OUT/bn-tests.log 2>&1; tail -5 $OUT/bn-tests.log)
PYTHONPATH=. timeout 200 python3 tools/bench.py --device cuda --train --no-compile-check --out $OUT/bnb > $OUT/bn-bench.log 2>&1; tail -25 $OUT/bn-bench.log
cd ../tp && (PYTHONPATH=. timeout 200 python3 -m pytest -q -p no:cacheprovider -m cuda --timeout 100 tests/autodiff tests/ops > $OUT/tp-tests.log 2>&1; tail -5 $OUT/tp-tests.log)
PYTHONPATH=. timeout 200 python3 tools/bench.py --device cuda --train --no-compile-check --out $OUT/tpb > $OUT/tp-bench.log 2>&1; tail -25 $OUT/tp-bench.log
