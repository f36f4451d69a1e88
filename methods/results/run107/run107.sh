#!/usr/bin/env bash
# Run 107 (twentieth session): with v149 the default, the tests that call the default variant on
# the GPU (long sequences, v8's kernels past 4096 tokens, the 262144-token test left out; training
# wrappers, validation, tools, reference) and the selfcheck of the visible cases; then ncu of v148's
# backward on c01 with source lines, to see what its waits are now.
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
export MAMBA3_JIT_LINEINFO=1 MAMBA3_JIT_CACHE_DIR=/tmp/jc
timeout 60 python3 methods/results/run92/ncu_fwd.py c01 methods/versions/v148/solver.py > /dev/null 2>&1
timeout 100 ncu --set full --import-source yes -k regex:'^m3_cp_backward$' --launch-skip 1 --launch-count 1 \
  -o /tmp/bwd_v148 python3 methods/results/run92/ncu_fwd.py c01 methods/versions/v148/solver.py > /tmp/ncu_bwd_v148.log 2>&1
echo "ncu v148 rc=$? $(( $(date +%s)-t0 ))s"; tail -2 /tmp/ncu_bwd_v148.log
ncu -i /tmp/bwd_v148.ncu-rep --page source --print-source cuda,sass --csv > /tmp/bwd_v148.csv 2>&1
ncu -i /tmp/bwd_v148.ncu-rep --page details > $OUT/bwd_v148_details.txt 2>&1
python3 tools/ncu_lines.py /tmp/bwd_v148.csv --top 40 > $OUT/bwd_v148_lines.txt 2>&1
gzip -c /tmp/bwd_v148.csv > $OUT/bwd_v148.csv.gz
head -6 $OUT/bwd_v148_lines.txt
grep -E "Duration|Executed Instructions  |L1/TEX Cache Throughput" $OUT/bwd_v148_details.txt | head -4
