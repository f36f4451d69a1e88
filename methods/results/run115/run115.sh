#!/usr/bin/env bash
# Run 115 (twenty-second session; run 114's machine, its build): the default (v166) on this commit:
# the tests that call it on the GPU and the selfcheck of the visible cases twice (the timing rule's spread).
set -uo pipefail
[ -d /tmp/deps ] || for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared
t0=$(date +%s)
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/python/test_long_gpu.py tests/python/test_training.py \
  tests/python/test_training_states.py tests/python/test_validation.py tests/python/test_tools.py \
  tests/python/test_reference.py -k "not slow" > $OUT/tests_default.log 2>&1
echo "tests default rc=$? $(( $(date +%s)-t0 ))s"; tail -2 $OUT/tests_default.log
for i in 1 2; do
  timeout 150 python3 tools/selfcheck.py > $OUT/selfcheck$i.log 2>&1
  echo "selfcheck $i rc=$? $(( $(date +%s)-t0 ))s"; tail -10 $OUT/selfcheck$i.log
done
