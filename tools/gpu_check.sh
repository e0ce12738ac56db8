#!/usr/bin/env bash
# The GPU machine's checks, in the order they are worth most: the test suite, the benchmarks,
# the fuzzer, the model zoo. Each step writes under $OUT (default logs/) and its time is bounded.
#   STEPS="tests bench fuzz zoo" tools/gpu_check.sh
set -u
OUT=${OUT:-logs}
STEPS=${STEPS:-"tests bench"}
export PYTHONPATH=. PYTHONUNBUFFERED=1
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
for step in $STEPS; do
  case $step in
    tests) timeout ${T_TESTS:-420} python3 -m pytest -q -x -p no:cacheprovider tests ${TEST_ARGS:-} 2>&1 \
             | tee "$OUT/gpu-tests.log" | tail -15 ;;
    testsfull) timeout ${T_TESTS:-420} python3 -m pytest -q -p no:cacheprovider tests ${TEST_ARGS:-} 2>&1 \
             | tee "$OUT/gpu-tests.log" | tail -25 ;;
    bench) timeout ${T_BENCH:-300} python3 tools/bench.py --device cuda --out "$OUT" ${BENCH_ARGS:-} 2>&1 \
             | tail -30 ;;
    train) timeout ${T_TRAIN:-300} python3 tools/bench.py --device cuda --train --out "$OUT" 2>&1 | tail -15 ;;
    fuzz) timeout ${T_FUZZ:-300} python3 tools/fuzz.py --device cuda ${FUZZ_ARGS:-} --out "$OUT" 2>&1 | tail -25 ;;
    zoo) timeout ${T_ZOO:-400} python3 tools/zoo.py --device cuda --out "$OUT" ${ZOO_ARGS:-} 2>&1 | tail -40 ;;
  esac
done
