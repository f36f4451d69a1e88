#!/usr/bin/env bash
# Run 135 (twenty-fifth session): the registry change that serves every sequence count of a
# chunk-parallel variant from its S<=any source (e730dd0): the default's GPU tests (as run 127's,
# their cases have 1 to 64 sequences, so every bucket runs) and the selfcheck. Carry ["scratch", ".deps"].
set -uo pipefail
source methods/results/prologue.sh
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 170 python3 -m pytest -q -p no:cacheprovider tests/python/test_long_gpu.py tests/python/test_training.py \
  tests/python/test_training_states.py tests/python/test_validation.py tests/python/test_tools.py \
  tests/python/test_reference.py tests/python/test_initial_states_gpu.py tests/python/test_operator_gpu.py \
  -k "(bind or rejects or current_stream or not operator_gpu) and not slow" > $OUT/tests_default.log 2>&1
echo "tests default rc=$? $(( $(date +%s)-t0 ))s: $(tail -n 1 $OUT/tests_default.log)"
grep -E "^FAILED" $OUT/tests_default.log | head -5
timeout 60 python3 tools/selfcheck.py --json $OUT/selfcheck.json > $OUT/selfcheck.log 2>&1
echo "selfcheck rc=$? $(( $(date +%s)-t0 ))s"; tail -n 10 $OUT/selfcheck.log
