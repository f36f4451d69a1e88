#!/usr/bin/env bash
# Run 113 (twenty-first session; run 112's machine, its build): the default (v155) on this commit:
# the tests that call it on the GPU and the selfcheck of the visible cases twice (the timing rule's
# spread); ncu of the angle kernels of v155 and v163 (v158's) on c01 and c00.
set -uo pipefail
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared
t0=$(date +%s)
[ -d /tmp/deps ] || for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/python/test_long_gpu.py tests/python/test_training.py \
  tests/python/test_training_states.py tests/python/test_validation.py tests/python/test_tools.py \
  tests/python/test_reference.py -k "not slow" > $OUT/tests_default.log 2>&1
echo "tests default rc=$? $(( $(date +%s)-t0 ))s"; tail -2 $OUT/tests_default.log
for i in 1 2; do
  timeout 150 python3 tools/selfcheck.py > $OUT/selfcheck$i.log 2>&1
  echo "selfcheck $i rc=$? $(( $(date +%s)-t0 ))s"; tail -10 $OUT/selfcheck$i.log
done
export MAMBA3_JIT_LINEINFO=1 MAMBA3_JIT_CACHE_DIR=/tmp/jc
for v in v155 v163; do for c in c01 c00; do
  timeout 60 python3 methods/results/run92/ncu_fwd.py $c methods/versions/$v/solver.py > /dev/null 2>&1
  timeout 100 ncu --set full --import-source yes -k regex:'^m3_cp_angles$' --launch-skip 1 --launch-count 1 \
    -o /tmp/ang_${v}_$c python3 methods/results/run92/ncu_fwd.py $c methods/versions/$v/solver.py > /tmp/ncu.log 2>&1
  echo "ncu angles $v $c rc=$? $(( $(date +%s)-t0 ))s"
  ncu -i /tmp/ang_${v}_$c.ncu-rep --page source --print-source cuda,sass --csv > /tmp/ang.csv 2>&1
  ncu -i /tmp/ang_${v}_$c.ncu-rep --page details > $OUT/ang_${v}_${c}_details.txt 2>&1
  python3 tools/ncu_lines.py /tmp/ang.csv --top 30 > $OUT/ang_${v}_${c}_lines.txt 2>&1
  head -2 $OUT/ang_${v}_${c}_lines.txt
  grep -E "Duration|Executed Instructions  |Executed Ipc Active" $OUT/ang_${v}_${c}_details.txt | head -3
done; done
