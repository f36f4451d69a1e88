#!/usr/bin/env bash
# Run 135 (written in the twenty-fifth session, not run there: its device budget was spent). First
# the registry change that serves every sequence count of a chunk-parallel variant from its S<=any
# source (e730dd0): the default's GPU tests (as run 127's; their cases have 1 to 64 sequences, so
# every bucket runs) and the selfcheck. Then v180-v182 (prepared in 0eef6fa: the angles loaded
# four to a word), v183-v185 (the state copy's swizzle folded per thread) and v186-v188 (a zero
# tile for a missing state gradient): their GPU tests (bitwise twins, dispatch, waves, streams)
# and the bench of v179 beside v182, v185 and v188, three interleaved passes, pinned. Carry
# ["scratch", ".deps"].
set -uo pipefail
source methods/results/prologue.sh
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
source methods/results/default_gpu_tests.sh
timeout 60 python3 tools/selfcheck.py --json $OUT/selfcheck.json > $OUT/selfcheck.log 2>&1
echo "selfcheck rc=$? $(( $(date +%s)-t0 ))s"; tail -n 10 $OUT/selfcheck.log
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/python/test_operator_gpu.py \
  tests/python/test_streams_graphs_gpu.py -k "v180 or v181 or v182 or v183 or v184 or v185 or v186 or v187 or v188" > $OUT/tests.log 2>&1
echo "tests v180-v188 rc=$? $(( $(date +%s)-t0 ))s: $(tail -n 1 $OUT/tests.log)"
grep -E "^FAILED" $OUT/tests.log | head -5
timeout 240 python3 tools/bench.py --solver methods/versions/v179/solver.py --solver methods/versions/v182/solver.py \
  --solver methods/versions/v185/solver.py \
  --solver methods/versions/v188/solver.py --no-baseline --reps 3 --pin-cpu 3 --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"
python3 methods/results/bench_table.py $OUT/bench.json
