#!/usr/bin/env bash
# Run 70: source-level ncu of v95's backward kernel on c01 (lineinfo build), for a phase profile.
set -uo pipefail
for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_LINEINFO=1 MAMBA3_JIT_CACHE_DIR=/tmp/jc
t0=$(date +%s)
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
python3 scratch/ncu_fwd.py c01 methods/versions/v96/solver.py; echo "jit $(( $(date +%s)-t0 ))s"
timeout 300 ncu --set full --import-source yes -k regex:m3_cp_backward --launch-skip 1 --launch-count 1 \
  -o /tmp/bwd_c01 python3 scratch/ncu_fwd.py c01 methods/versions/v96/solver.py > $OUT/ncu.log 2>&1; echo "ncu rc=$? $(( $(date +%s)-t0 ))s"; tail -3 $OUT/ncu.log
ncu -i /tmp/bwd_c01.ncu-rep --page source --print-source cuda,sass --csv > $OUT/bwd_c01.csv 2>&1
ncu -i /tmp/bwd_c01.ncu-rep --page details > $OUT/bwd_c01_details.txt 2>&1
f=$(grep -l 'v95,C=32,S<=8' <cache>/*.json | head -1); cp ${f%.json}.cubin $OUT/bwd.cubin; cp $f $OUT/bwd_manifest.json
ls -la $OUT; grep -E "Duration|Executed Instructions  |Issue Slots Busy|Achieved Occupancy|Registers Per" $OUT/bwd_c01_details.txt | head
