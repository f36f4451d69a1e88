#!/usr/bin/env bash
# Run 163 as one call (thirty-seventh session, whose device starts failed for an hour and left
# about 13 minutes): run163.sh's bench, then run163_default.sh's default suite and selfcheck,
# then run163.sh's tests of v249 to v251 and the host-stage traces while the time lasts.
# Carry ["scratch", ".deps"].
set -uo pipefail
source methods/results/prologue.sh
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 150 python3 tools/bench.py --solver methods/versions/v248/solver.py --solver methods/versions/v251/solver.py \
  --no-baseline --reps 4 --pin-cpu 3 --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"
python3 methods/results/bench_table.py $OUT/bench.json --ratios m3_cp_backward m3_reduce_all
source methods/results/default_gpu_tests.sh
timeout 150 python3 tools/selfcheck.py --json $OUT/selfcheck.json > $OUT/selfcheck.log 2>&1
echo "selfcheck rc=$? $(( $(date +%s)-t0 ))s"
tail -n 10 $OUT/selfcheck.log
left=$(( 520 - ($(date +%s)-t0) ))
if [ $left -gt 30 ]; then
  timeout $left python3 -m pytest -q -p no:cacheprovider tests/python/test_operator_gpu.py \
    -k "v249 or v250 or v251" > $OUT/tests.log 2>&1
  echo "tests rc=$? $(( $(date +%s)-t0 ))s: $(tail -n 1 $OUT/tests.log)"
  grep -E "^FAILED" $OUT/tests.log | head -5
fi
for c in c00 c06; do
  [ $(( $(date +%s)-t0 )) -lt 530 ] || break
  MAMBA3_JIT_LOG_LEVEL=trace timeout 25 python3 methods/results/run116/stages.py run methods/main/solver.py $c \
    2> /tmp/trace_$c.log
  python3 methods/results/run116/stages.py summarize /tmp/trace_$c.log
done
echo "done $(( $(date +%s)-t0 ))s"
