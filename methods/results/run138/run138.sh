#!/usr/bin/env bash
# Run 138 (written in the twenty-sixth session, not run there: its device budget was spent). v192-
# v194 (v180/v181 whose dqr inter product waits in t1 while the intra product runs, so that the
# two tiles' accumulators are not live together; static spills LDL/STL 16/15 -> 13/12): their GPU
# tests (bitwise twins of v180/v181, dispatch, waves, forward-only, streams), the bench of v182
# beside v194 (three interleaved passes, pinned), and ncu of both backwards on c01 as run 137's
# (executed spill instructions, MIO-throttle stalls). Carry ["scratch", ".deps"].
set -uo pipefail
source methods/results/prologue.sh
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/python/test_operator_gpu.py \
  tests/python/test_streams_graphs_gpu.py -k "v192 or v193 or v194" > $OUT/tests.log 2>&1
echo "tests v192-v194 rc=$? $(( $(date +%s)-t0 ))s: $(tail -n 1 $OUT/tests.log)"
grep -E "^FAILED" $OUT/tests.log | head -5
timeout 200 python3 tools/bench.py --solver methods/versions/v182/solver.py --solver methods/versions/v194/solver.py \
  --no-baseline --reps 3 --pin-cpu 3 --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"
python3 methods/results/bench_table.py $OUT/bench.json
NCU_VARIANTS="v182 v194" source methods/results/ncu_backward_c01.sh
