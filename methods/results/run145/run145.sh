#!/usr/bin/env bash
# Run 145 (thirty-second session): v224 the default on the committed tree (fa42bc1 on): the
# selfcheck through methods/main (no --solver: the default's own path), then where v224's
# backward waits now that its spills are 6/5 (run 143: long-scoreboard stalls 0.99 -> 1.24 warps
# per issue while the spills went): ncu --set full of a lineinfo build, the second call, of the
# backward on c01, by source line (tools/ncu_lines.py), as run 130 profiled v173's.
# The lineinfo kernels come from scratch/jc_lines, warmed without a GPU by
#   MAMBA3_JIT_LINEINFO=1 mamba3-jit-warmup --cache-dir scratch/jc_lines --config variant=v224
# Carry ["scratch", ".deps"].
set -uo pipefail
source methods/results/prologue.sh
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 100 python3 tools/selfcheck.py --json $OUT/selfcheck.json > $OUT/selfcheck.log 2>&1
echo "selfcheck rc=$? $(( $(date +%s)-t0 ))s: $(grep -E 'selfcheck: ' $OUT/selfcheck.log | tail -n 1)"
export MAMBA3_JIT_LINEINFO=1 MAMBA3_JIT_CACHE_DIR=/tmp/jc_lines
mkdir -p /tmp/jc_lines
[ -d scratch/jc_lines ] && cp -r scratch/jc_lines/. /tmp/jc_lines/
NCU_SPECS="backward:c01" source methods/results/ncu_line_profile.sh
