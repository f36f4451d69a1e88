#!/usr/bin/env bash
# Run 110 (twentieth session): with v155 the default, the tests that call the default variant on
# the GPU (long sequences, v8's kernels past 4096 tokens, the 262144-token test left out; training
# wrappers, validation, tools, reference) and the selfcheck of the visible cases.
# Carry ["scratch", ".deps"]; scratch/shared holds SPEC.md, VJP.md and cases.
set -uo pipefail
for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared
t0=$(date +%s)
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/python/test_long_gpu.py tests/python/test_training.py \
  tests/python/test_training_states.py tests/python/test_validation.py tests/python/test_tools.py \
  tests/python/test_reference.py -k "not slow" > $OUT/tests_default.log 2>&1
echo "tests rc=$? $(( $(date +%s)-t0 ))s"; tail -2 $OUT/tests_default.log
timeout 150 python3 tools/selfcheck.py > $OUT/selfcheck.log 2>&1
echo "selfcheck rc=$? $(( $(date +%s)-t0 ))s"; tail -11 $OUT/selfcheck.log
