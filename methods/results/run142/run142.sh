#!/usr/bin/env bash
# Run 142 (thirtieth session): v210-v212, v180/v181 compiled with NVRTC's -ftz=true and
# -prec-div=false. In SASS (CPU) every kernel of the module is smaller and nothing spills more (the
# backward 6,864 -> 6,552 instructions, LDL/STL 16/15 -> 15/12; the chunk-64 forward 4,840 ->
# 4,560; the chunk-32 forward 3,320 -> 3,176), the first compile change in several runs whose
# spills did not grow. Results not bitwise: within rounding of v180's and v181's.
# In order: the GPU tests of v210-v212 (within rounding of v180/v181 and right against the float64
# truth, repeatable, dispatch, waves, forward-only, streams), the bench of v182 beside v212 (three
# interleaved passes, pinned), the selfcheck of v212, then ncu of the backward on c01 for v182 and
# v210 (stalls.py).
# Carry ["scratch", ".deps"].
set -uo pipefail
source methods/results/prologue.sh
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/python/test_operator_gpu.py \
  tests/python/test_streams_graphs_gpu.py -k "v210 or v211 or v212" > $OUT/tests.log 2>&1
echo "tests v210-v212 rc=$? $(( $(date +%s)-t0 ))s: $(tail -n 1 $OUT/tests.log)"
grep -E "^FAILED" $OUT/tests.log | head -5
timeout 240 python3 tools/bench.py --solver methods/versions/v182/solver.py --solver methods/versions/v212/solver.py \
  --no-baseline --reps 3 --pin-cpu 3 --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"
python3 methods/results/bench_table.py $OUT/bench.json
timeout 200 python3 tools/selfcheck.py --solver methods/versions/v212/solver.py --json $OUT/selfcheck_v212.json \
  > $OUT/selfcheck_v212.log 2>&1
echo "selfcheck v212 rc=$? $(( $(date +%s)-t0 ))s: $(tail -n 1 $OUT/selfcheck_v212.log)"
NCU_VARIANTS="v182 v210" source methods/results/ncu_backward_c01.sh
