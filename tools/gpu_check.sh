#!/usr/bin/env bash
# The GPU machine's checks, in the order they are worth most: the test suite, the benchmarks,
# the fuzzer, the model zoo. Each step writes under $OUT (default logs/) and its time is bounded.
#   STEPS="tests bench fuzz zoo" tools/gpu_check.sh
#   STEPS=tests1 tools/gpu_check.sh; STEPS=tests2 tools/gpu_check.sh   (the full suite, in two commands)
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
    # the whole suite takes longer than one 600 s device command on an H100 (-n 16): two halves
    tests1) timeout ${T_TESTS:-560} python3 -m pytest -q -p no:cacheprovider -n ${WORKERS:-16} -rfxX \
             tests/autodiff tests/cuda tests/models tests/ops tests/ir tests/test_*.py 2>&1 \
             | tee "$OUT/gpu-tests-1.log" | tail -25 ;;
    tests2) timeout ${T_TESTS:-560} python3 -m pytest -q -p no:cacheprovider -n ${WORKERS:-16} -rfxX \
             tests/executor tests/passes tests/codegen tests/frontend tests/fuzz tests/runtime 2>&1 \
             | tee "$OUT/gpu-tests-2.log" | tail -25 ;;
    # a host of several GPUs: the whole suite in one command, xdist workers spread over the GPUs
    # (tests/conftest.py), then the tests that need two GPUs with every GPU visible
    testsgpus) GRAPHFUSER_TEST_GPUS=${GPUS:-2} timeout ${T_TESTS:-540} python3 -m pytest -q -p no:cacheprovider \
             -n ${WORKERS:-28} -rfxX tests 2>&1 | tee "$OUT/gpu-tests.log" | tail -25
             timeout 120 python3 -m pytest -q -p no:cacheprovider -rfxX -k "second_device or other_device or cuda1" \
             tests/cuda tests/runtime 2>&1 | tee "$OUT/gpu-tests-multi.log" | tail -5 ;;
    # the torch.compile zoo (Hugging Face and torchvision / timm models, eager / Inductor /
    # graphfuser), its model list split over the GPUs, one process each
    hfzoo) parts=(${HF_PARTS:-"gpt2,bert,llama,mistral qwen2,t5,vit,whisper"}); n=${GPUS:-2}
           # part i runs on GPU i % n; the parts of one GPU one after another, the GPUs at once
           for g in $(seq 0 $((n - 1))); do
             ( for i in "${!parts[@]}"; do [ $((i % n)) -eq "$g" ] || continue
                 CUDA_VISIBLE_DEVICES=$g timeout ${T_ZOO:-560} python3 -m graphfuser.tools.hf_zoo --device cuda \
                   --models "${parts[$i]}" --out "/tmp/hf-zoo-part$i" ${HF_ARGS:-} > "/tmp/hf-zoo-part$i.log" 2>&1
                 cp "/tmp/hf-zoo-part$i.json" "$OUT/" 2>/dev/null
               done ) &
           # only the JSON records go to $OUT (the device machine sends back 8 files at most;
           # --merge writes the table from them)
           done; wait; for f in /tmp/hf-zoo-part*.log; do tail -n 3 "$f"; done ;;
    race) timeout ${T_RACE:-560} python3 -m graphfuser race --device cuda --gpus ${GPUS:-2} --out "$OUT" \
             ${RACE_ARGS:-} 2>&1 | tail -40 ;;
    testsfull) timeout ${T_TESTS:-420} python3 -m pytest -q -p no:cacheprovider tests ${TEST_ARGS:-} 2>&1 \
             | tee "$OUT/gpu-tests.log" | tail -25 ;;
    bench) timeout ${T_BENCH:-300} python3 tools/bench.py --device cuda --out "$OUT" ${BENCH_ARGS:-} 2>&1 \
             | tail -30 ;;
    train) timeout ${T_TRAIN:-300} python3 tools/bench.py --device cuda --train --out "$OUT" 2>&1 | tail -15 ;;
    fuzz) timeout ${T_FUZZ:-300} python3 tools/fuzz.py --device cuda ${FUZZ_ARGS:-} --out "$OUT" 2>&1 | tail -25 ;;
    zoo) timeout ${T_ZOO:-400} python3 tools/zoo.py --device cuda --out "$OUT" ${ZOO_ARGS:-} 2>&1 | tail -40 ;;
  esac
done
