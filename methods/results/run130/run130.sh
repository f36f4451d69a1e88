#!/usr/bin/env bash
# Run 130 (twenty-fifth session): v173 the default: its GPU tests (the default's set, as run 127's)
# and selfcheck; then where v173's kernels spend their time, by source line: ncu --set full of a
# lineinfo build, the second call, of the backward and the chunk-64 forward on c01 and the backward
# on c00 (v172's kernels there). The last line profiles of the backward were run 100's (v103's),
# of the forward run 96's (v135's). Carry ["scratch", ".deps"].
set -uo pipefail
source methods/results/prologue.sh
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/python/test_long_gpu.py tests/python/test_training.py \
  tests/python/test_training_states.py tests/python/test_validation.py tests/python/test_tools.py \
  tests/python/test_reference.py tests/python/test_initial_states_gpu.py tests/python/test_operator_gpu.py \
  -k "(bind or rejects or current_stream or not operator_gpu) and not slow" > $OUT/tests_default.log 2>&1
echo "tests default rc=$? $(( $(date +%s)-t0 ))s: $(tail -n 1 $OUT/tests_default.log)"
timeout 100 python3 tools/selfcheck.py > $OUT/selfcheck.log 2>&1
echo "selfcheck rc=$? $(( $(date +%s)-t0 ))s: $(grep -E 'selfcheck: ' $OUT/selfcheck.log | tail -n 1)"
export MAMBA3_JIT_LINEINFO=1 MAMBA3_JIT_CACHE_DIR=/tmp/jc_lines
NCU_SPECS="backward:c01 forward64:c01 backward:c00" source methods/results/ncu_line_profile.sh
