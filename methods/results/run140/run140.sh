#!/usr/bin/env bash
# Run 140 (twenty-eighth session). v195-v197 (v180/v181 compiled with ptxas -dlcm=cs: the global
# loads without an explicit cache operator allocate in L1 as evict-first) and v198-v200 (-dlcm=cg:
# they bypass L1), meant to let the backward's register spills stay in L1 (run 138's profile: the
# spill loads' L1 hit rate 0.0002%, 1.97 M sectors to L2 on c01). Their GPU tests (bitwise twins of
# v180/v181, dispatch, waves, forward-only, streams), the bench of v182 beside v197 and v200 (three
# interleaved passes, pinned) and ncu of the three backwards on c01 (stalls, spill sectors, the L1
# hit rates of local and global loads). Carry ["scratch", ".deps"].
set -uo pipefail
source methods/results/prologue.sh
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/python/test_operator_gpu.py \
  tests/python/test_streams_graphs_gpu.py -k "v195 or v196 or v197 or v198 or v199 or v200" > $OUT/tests.log 2>&1
echo "tests v195-v200 rc=$? $(( $(date +%s)-t0 ))s: $(tail -n 1 $OUT/tests.log)"
grep -E "^FAILED" $OUT/tests.log | head -5
timeout 240 python3 tools/bench.py --solver methods/versions/v182/solver.py --solver methods/versions/v197/solver.py \
  --solver methods/versions/v200/solver.py --no-baseline --reps 3 --pin-cpu 3 --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"
python3 methods/results/bench_table.py $OUT/bench.json
NCU_VARIANTS="v182 v197 v200" source methods/results/ncu_backward_c01.sh
