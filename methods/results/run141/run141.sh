#!/usr/bin/env bash
# Run 141 (written in the twenty-eighth session, not run there nor in the twenty-ninth: the pool
# refused every start until the device time was spent; the twenty-ninth reordered it for a short
# lease and warms its kernels beforehand, see prologue.sh on scratch/jc). Run 140 found the
# backward's spills missing L1 however the global loads are cached: 15 spill slots a thread (60
# bytes), 30 KB for two CTAs, against about 22 KB of L1. ptxas --register-usage-level=1 leaves 9 (36
# bytes, 18 KB): v201-v203 (with -dlcm=cs, the global loads evict-first), v204-v206 (the level
# alone), v207-v209 (v201's two options for m3_cp_backward's own module, the forward without them).
# In the order of what a short device lease must bring back first: the selfcheck of the default (the
# dispatcher loads m3_cp_backward through backward_source since cba67c0), the bench of v182 beside
# v203, v206 and v209 (three interleaved passes, pinned), the GPU tests of v201-v209 (bitwise twins,
# dispatch, waves, forward-only, streams), the default's GPU tests, then ncu of the backward on c01
# for v209 alone (the local loads' L1 hit rate first; its backward is v203's kernel, the same SASS;
# v182's hit rate is run 140's 0.00%).
# Carry ["scratch", ".deps"].
set -uo pipefail
source methods/results/prologue.sh
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 200 python3 tools/selfcheck.py --json $OUT/selfcheck.json > $OUT/selfcheck.log 2>&1
echo "selfcheck rc=$? $(( $(date +%s)-t0 ))s: $(tail -n 1 $OUT/selfcheck.log)"
timeout 300 python3 tools/bench.py --solver methods/versions/v182/solver.py --solver methods/versions/v203/solver.py \
  --solver methods/versions/v206/solver.py --solver methods/versions/v209/solver.py \
  --no-baseline --reps 3 --pin-cpu 3 --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"
python3 methods/results/bench_table.py $OUT/bench.json
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/python/test_operator_gpu.py \
  tests/python/test_streams_graphs_gpu.py -k "v201 or v202 or v203 or v204 or v205 or v206 or v207 or v208 or v209" \
  > $OUT/tests.log 2>&1
echo "tests v201-v209 rc=$? $(( $(date +%s)-t0 ))s: $(tail -n 1 $OUT/tests.log)"
grep -E "^FAILED" $OUT/tests.log | head -5
source methods/results/default_gpu_tests.sh
NCU_VARIANTS="v209" source methods/results/ncu_backward_c01.sh
(cd /tmp/prof && for v in v209; do echo "$v local-load L1 hit % $(python3 -c "
import csv; r=list(csv.reader(open('${v}_raw.csv'))); d=dict(zip(r[0], r[-1]))
print(d.get('l1tex__t_sector_pipe_lsu_mem_local_op_ld_hit_rate.pct'), 'global', d.get('l1tex__t_sector_pipe_lsu_mem_global_op_ld_hit_rate.pct'))")"; done)
