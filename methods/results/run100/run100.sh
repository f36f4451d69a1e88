#!/usr/bin/env bash
# Run 100 (nineteenth session): where the default's backward (v103's m3_cp_backward, run by v137 on
# c01) waits and where its shared-memory bank conflicts are, by source line: ncu --set full with
# source correlation of a lineinfo build, the second call on c01. The last line-level profile of
# this kernel was run 70's (v95). Run from the repository root with carry ["scratch", ".deps"].
set -uo pipefail
for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared
t0=$(date +%s)
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
export MAMBA3_JIT_LINEINFO=1 MAMBA3_JIT_CACHE_DIR=/tmp/jc
timeout 90 python3 methods/results/run92/ncu_fwd.py c01 methods/versions/v137/solver.py; echo "jit $(( $(date +%s)-t0 ))s"
timeout 300 ncu --set full --import-source yes -k regex:'^m3_cp_backward$' --launch-skip 1 --launch-count 1 \
  -o /tmp/bwd103 python3 methods/results/run92/ncu_fwd.py c01 methods/versions/v137/solver.py > $OUT/ncu_bwd103.log 2>&1
echo "ncu rc=$? $(( $(date +%s)-t0 ))s"; tail -3 $OUT/ncu_bwd103.log
ncu -i /tmp/bwd103.ncu-rep --page source --print-source cuda,sass --csv > /tmp/bwd103.csv 2>&1
ncu -i /tmp/bwd103.ncu-rep --page details > $OUT/bwd103_details.txt 2>&1
gzip -c /tmp/bwd103.csv > $OUT/bwd103.csv.gz
python3 tools/ncu_lines.py /tmp/bwd103.csv --top 60 > $OUT/bwd103_lines.txt 2>&1; echo "lines rc=$?"
head -8 $OUT/bwd103_lines.txt
grep -E "Duration|Executed Instructions  |Issue Slots Busy|Achieved Occupancy|Registers Per|Warp Cycles Per Issued" $OUT/bwd103_details.txt | head
