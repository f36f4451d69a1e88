#!/usr/bin/env bash
# Run 152 (thirty-fourth session), two questions for the redesign, no kernel change:
# 1. Co-residency of kinds (coresidency.py): two c01 calls on two streams, the second started d us
#    after the first. Prediction: if a forward CTA beside a backward CTA contends as two backwards
#    do, the totals for d = 0 to 900 us differ only by what the overlap fills in the tails
#    (a few percent); a clearly lower total around d = 200 to 400 (B's forward beside A's
#    backward) would say mixed pairs share an SM better.
# 2. What the chunk-64 forward's pair contends for: ncu of its c01 launch under v231 (two CTAs an
#    SM) and v236 (one), as run 151 did for the backward.
# Carry ["scratch", ".deps"].
set -uo pipefail
source methods/results/prologue.sh
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 200 python3 methods/results/run152/coresidency.py methods/versions/v234/solver.py $OUT/coresidency.json \
  2>&1 | tee $OUT/coresidency.log
echo "coresidency rc=$? $(( $(date +%s)-t0 ))s"
mkdir -p /tmp/prof
for v in v231 v236; do
  s=methods/versions/$v/solver.py
  timeout 60 python3 methods/results/run92/ncu_fwd.py c01 $s > /dev/null 2>&1
  timeout 120 ncu --set full -k regex:"^m3_cp_forward64\$" --launch-skip 1 --launch-count 1 \
    -o /tmp/prof/f_$v python3 methods/results/run92/ncu_fwd.py c01 $s > /tmp/prof/f_$v.log 2>&1
  echo "ncu forward64 $v rc=$? $(( $(date +%s)-t0 ))s"
  ncu -i /tmp/prof/f_$v.ncu-rep --page details > /tmp/prof/f_${v}_details.txt 2>&1
  ncu -i /tmp/prof/f_$v.ncu-rep --page raw --csv > /tmp/prof/f_${v}_raw.csv 2>&1
  grep -E "^    Duration|Executed Instructions  |Issue Slots Busy|Warp Cycles Per Issued|Mem Busy" /tmp/prof/f_${v}_details.txt | head -6
done
(cd /tmp/prof && tar czf $OUT/profiles.tgz f_*_details.txt f_*_raw.csv f_*.log)
