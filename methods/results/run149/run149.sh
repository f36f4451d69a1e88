#!/usr/bin/env bash
# Run 149 (thirty-third session): v234, v233 with the waves picker's threshold at 1.5 waves instead
# of two (run 148: the wide kernels as fast or faster from about 1.7 waves). Its GPU tests
# (dispatch, waves, the m1 mix at 1.70 waves bitwise v231's), then the bench of v233 and v234 on
# run 148's panel (c00 and five mixes of 398 to 890 tokens), three interleaved passes, pinned.
# Prediction: m1, m2 and m5 2 to 5 us faster (v231's kernels there), c00, m3 (a tie in run 148)
# and m4 as v233 (m3 now runs v231's kernels too). The rule: v234 becomes the default if its tests
# pass and its geomean on that panel is at least 0.5% below v233's (the visible panel runs the
# same kernels under both: no case there lies between 1.5 and 2 waves); then the default's GPU
# tests and its selfcheck. Carry ["scratch", ".deps"].
set -uo pipefail
source methods/results/prologue.sh
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/python/test_operator_gpu.py -k "v234" > $OUT/tests.log 2>&1
tests_rc=$?
echo "tests v234 rc=$tests_rc $(( $(date +%s)-t0 ))s: $(tail -n 1 $OUT/tests.log)"
grep -E "^FAILED" $OUT/tests.log | head -5
timeout 240 python3 tools/bench.py --cases methods/results/run148/picker_panel.json \
  --solver methods/versions/v233/solver.py --solver methods/versions/v234/solver.py \
  --no-baseline --reps 3 --pin-cpu 3 --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"
python3 methods/results/bench_table.py $OUT/bench.json | tee /tmp/table.txt
W=v233
if [ $tests_rc -eq 0 ]; then
  W=$(python3 -c '
import re
g = dict(re.findall(r"^(v\d+) latency geomean ([\d.]+) us", open("/tmp/table.txt").read(), re.M))
print("v234" if float(g["v234"]) < 0.995 * float(g["v233"]) else "v233")')
fi
echo "winner $W"
if [ "$W" != v233 ]; then
  bash methods/results/switch_default.sh v233 $W
  bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build2.log 2>&1; echo "rebuild rc=$? $(( $(date +%s)-t0 ))s"
  source methods/results/default_gpu_tests.sh
  timeout 150 python3 tools/selfcheck.py --solver methods/versions/$W/solver.py --json $OUT/selfcheck_$W.json \
    > $OUT/selfcheck_$W.log 2>&1
  echo "selfcheck $W rc=$? $(( $(date +%s)-t0 ))s: $(tail -n 1 $OUT/selfcheck_$W.log)"
fi
