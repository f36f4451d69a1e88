#!/usr/bin/env bash
# Run 147 (thirty-third session): v231-v233 against the default v224. v231 and v232: v222 and
# v223 whose ticket tables align every chain's last round with the longest's (M3_CP_ALIGNED_ENDS:
# the longest chains start first; methods/results/run147/chains_model.py puts it 0 to 4% faster
# on the visible cases' kernels, nothing on c01's equal lengths); v233 picks them by waves. The
# same jobs in another order: bitwise v222's and v223's (their forward and backward SASS are
# identical; only the angle kernel, which writes the tables, differs). In order: the GPU tests of
# v231-v233 (bitwise twins on three mixes each, dispatch, waves, forward-only, streams); the bench
# of v224 and v233 (five interleaved passes, pinned); the winner by rule (v233 if its tests passed
# and its latency geomean is at least 0.5% below v224's), made the default of the device's copy
# by switch_default.sh and rebuilt; the default's GPU tests and the winner's selfcheck.
# Carry ["scratch", ".deps"].
set -uo pipefail
source methods/results/prologue.sh
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/python/test_operator_gpu.py \
  tests/python/test_streams_graphs_gpu.py -k "v231 or v232 or v233" > $OUT/tests.log 2>&1
tests_rc=$?
echo "tests v231-v233 rc=$tests_rc $(( $(date +%s)-t0 ))s: $(tail -n 1 $OUT/tests.log)"
grep -E "^FAILED" $OUT/tests.log | head -5
timeout 240 python3 tools/bench.py --solver methods/versions/v224/solver.py --solver methods/versions/v233/solver.py \
  --no-baseline --reps 5 --pin-cpu 3 --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"
python3 methods/results/bench_table.py $OUT/bench.json | tee /tmp/table.txt
W=v224
if [ $tests_rc -eq 0 ]; then
  W=$(python3 -c '
import re
g = dict(re.findall(r"^(v\d+) latency geomean ([\d.]+) us", open("/tmp/table.txt").read(), re.M))
print("v233" if float(g["v233"]) < 0.995 * float(g["v224"]) else "v224")')
fi
echo "winner $W"
if [ "$W" != v224 ]; then
  bash methods/results/switch_default.sh v224 $W
  bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build2.log 2>&1; echo "rebuild rc=$? $(( $(date +%s)-t0 ))s"
fi
source methods/results/default_gpu_tests.sh
timeout 150 python3 tools/selfcheck.py --solver methods/versions/$W/solver.py --json $OUT/selfcheck_$W.json \
  > $OUT/selfcheck_$W.log 2>&1
echo "selfcheck $W rc=$? $(( $(date +%s)-t0 ))s: $(tail -n 1 $OUT/selfcheck_$W.log)"
