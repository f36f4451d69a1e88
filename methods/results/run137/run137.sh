#!/usr/bin/env bash
# Run 137 (twenty-sixth session): why v183's 240 fewer backward instructions made it slower (run
# 135) and the zero tile helped v183 but not v180 (runs 135, 136). ncu --set full (no source) of
# the backward on c01, the second call, for v182 (v180's kernels), v185 (v183's), v188 (v186's)
# and v191 (v189's): duration, executed instructions, issue, stalls, and the local-memory (spill)
# instructions from the raw page. Carry ["scratch", ".deps"].
set -uo pipefail
source methods/results/prologue.sh
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
mkdir -p /tmp/prof
for v in v182 v185 v188 v191; do
  s=methods/versions/$v/solver.py
  timeout 60 python3 methods/results/run92/ncu_fwd.py c01 $s > /dev/null 2>&1
  timeout 90 ncu --set full -k regex:"^m3_cp_backward\$" --launch-skip 1 --launch-count 1 \
    -o /tmp/prof/$v python3 methods/results/run92/ncu_fwd.py c01 $s > /tmp/prof/$v.log 2>&1
  echo "ncu $v rc=$? $(( $(date +%s)-t0 ))s"
  ncu -i /tmp/prof/$v.ncu-rep --page details > /tmp/prof/${v}_details.txt 2>&1
  ncu -i /tmp/prof/$v.ncu-rep --page raw --csv > /tmp/prof/${v}_raw.csv 2>&1
  grep -E "^    Duration|Executed Instructions  |Issue Slots Busy|Registers Per|Executed Ipc Active|Local Memory Spilling" \
    /tmp/prof/${v}_details.txt | head -8
  python3 - /tmp/prof/${v}_raw.csv <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
head, vals = rows[0], rows[-1]
for h, x in zip(head, vals):
    if ("local" in h and "inst_executed" in h) or "warp_issue_stalled" in h and h.endswith("_per_warp_active.pct"):
        print(f"    {h} {x}")
PY
done
(cd /tmp/prof && tar czf $OUT/profiles.tgz *_details.txt *_raw.csv *.log)
