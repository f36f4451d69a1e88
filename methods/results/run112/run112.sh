#!/usr/bin/env bash
# Run 112 (twenty-first session): the default (v155) on this commit: the tests that call it on the
# GPU and the selfcheck of the visible cases twice (the timing rule's spread); v158/v159 (the lean
# angle kernel) against their twins, dispatch, streams and graphs; the bench of v155 against v160;
# ncu of the angle kernels of v155 and v160 on c01 and c00.
# Carry ["scratch", ".deps"]; scratch/shared holds SPEC.md, VJP.md and cases.
set -uo pipefail
for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared
t0=$(date +%s)
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/python/test_operator_gpu.py tests/python/test_streams_graphs_gpu.py \
  -k "v158 or v159 or v160" > $OUT/tests_v158.log 2>&1
echo "tests v158 rc=$? $(( $(date +%s)-t0 ))s"; tail -2 $OUT/tests_v158.log
timeout 150 python3 tools/bench.py --solver methods/versions/v155/solver.py --solver methods/versions/v160/solver.py \
  --no-baseline --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"; grep -E '^\[|^    v1|m3_cp_angles' $OUT/bench.log | head -60
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/python/test_long_gpu.py tests/python/test_training.py \
  tests/python/test_training_states.py tests/python/test_validation.py tests/python/test_tools.py \
  tests/python/test_reference.py -k "not slow" > $OUT/tests_default.log 2>&1
echo "tests default rc=$? $(( $(date +%s)-t0 ))s"; tail -2 $OUT/tests_default.log
for i in 1 2; do
  timeout 150 python3 tools/selfcheck.py > $OUT/selfcheck$i.log 2>&1
  echo "selfcheck $i rc=$? $(( $(date +%s)-t0 ))s"; tail -10 $OUT/selfcheck$i.log
done
export MAMBA3_JIT_LINEINFO=1 MAMBA3_JIT_CACHE_DIR=/tmp/jc
for v in v155 v160; do for c in c01 c00; do
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
