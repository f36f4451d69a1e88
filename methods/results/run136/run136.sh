#!/usr/bin/env bash
# Run 136: v182 the default (run 135: latency geomean 385.4 against v179's 388.7 us, every case
# lower): the default's GPU tests with it and the selfcheck. Then v189-v191 (v180/v181 with v186's
# zero tile for a missing state gradient, without v183's swizzle fold, which run 135 measured
# slower): their GPU tests (bitwise twins of v180/v181, dispatch, waves, forward-only, streams)
# and the bench of v179, v182 and v191, three interleaved passes, pinned. Carry ["scratch", ".deps"].
set -uo pipefail
source methods/results/prologue.sh
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
source methods/results/default_gpu_tests.sh
timeout 60 python3 tools/selfcheck.py --json $OUT/selfcheck.json > $OUT/selfcheck.log 2>&1
echo "selfcheck rc=$? $(( $(date +%s)-t0 ))s"; tail -n 10 $OUT/selfcheck.log
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/python/test_operator_gpu.py \
  tests/python/test_streams_graphs_gpu.py -k "v189 or v190 or v191" > $OUT/tests.log 2>&1
echo "tests v189-v191 rc=$? $(( $(date +%s)-t0 ))s: $(tail -n 1 $OUT/tests.log)"
grep -E "^FAILED" $OUT/tests.log | head -5
timeout 200 python3 tools/bench.py --solver methods/versions/v179/solver.py --solver methods/versions/v182/solver.py \
  --solver methods/versions/v191/solver.py --no-baseline --reps 3 --pin-cpu 3 --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"
python3 methods/results/bench_table.py $OUT/bench.json
