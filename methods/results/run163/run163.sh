#!/usr/bin/env bash
# Run 163 (thirty-sixth session): v249 and v250 are v246 and v247 whose count for the overlapped
# reduce (heads_done, red.release) is released by warp 1 after the per-token tail instead of by
# thread 0 right after the tail's first barrier (M3_CP_LATE_HEADS_DONE). In v246's SASS that
# release's MEMBAR.ALL.GPU sits on warp 0's path before the per-token tail, which every warp waits
# for; level 4 of the hand-off carries took 2.6% by removing one L2 round trip from that path. The
# same sums: bitwise v246's and v247's. ptxas: 128 registers, 24-byte stack, 10 LDL/STL (v246 16
# and 8), 6,528 static instructions.
# Prediction: m3_cp_backward 1 to 3% shorter than v246's; the reduce's last chunk a little later
# (its count comes a per-token tail later), so the latency geomean 0.5 to 2% lower than v248's.
# Written in the thirty-sixth session and not run there: its device time was spent (the call was
# refused for want of time to start a machine). If v251 wins, `bash methods/results/switch_default.sh
# v248 v251`, then the default's GPU suite and the selfcheck (as run 162's script).
# Warm scratch/jc first: `mamba3-jit-warmup --cache-dir scratch/jc --config variant=v246 --config
# variant=v247 --config variant=v249 --config variant=v250`. Carry ["scratch", ".deps"].
# Not run as written: its steps ran in one call as run163_all.sh (thirty-seventh session), whose
# output is in this folder.
set -uo pipefail
source methods/results/prologue.sh
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 150 python3 tools/bench.py --solver methods/versions/v248/solver.py --solver methods/versions/v251/solver.py \
  --no-baseline --reps 4 --pin-cpu 3 --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"
python3 methods/results/bench_table.py $OUT/bench.json --ratios m3_cp_backward m3_reduce_all
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/python/test_operator_gpu.py \
  -k "v249 or v250 or v251" > $OUT/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s)-t0 ))s: $(tail -n 1 $OUT/tests.log)"
grep -E "^FAILED" $OUT/tests.log | head -5
