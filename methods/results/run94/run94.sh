#!/usr/bin/env bash
# Run 94 (seventeenth session): where the chunk-64 kernels' warps wait. Source-level ncu (lineinfo
# build, --set full) of v119's forward (m3_cp_forward64, through v120) and v125's whole backward
# (m3_cp_backward64, through v126) on c01, the second call's launch of each; the stall reasons
# (raw metrics) and the per-instruction samples (source page; summed by line in fwd64_lines.txt and bwd64_lines.txt
# by stall_lines.py, the CSVs themselves, 11 MB, not kept).
# Run from the repository root with carry ["scratch", ".deps"] and scratch/shared holding
# SPEC.md, VJP.md and cases.
set -uo pipefail
for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared MAMBA3_JIT_LINEINFO=1 MAMBA3_JIT_CACHE_DIR=/tmp/jc
t0=$(date +%s)
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
for v in v120 v126; do
  timeout 90 python3 methods/results/run92/ncu_fwd.py c01 methods/versions/$v/solver.py; echo "jit $v rc=$? $(( $(date +%s)-t0 ))s"
done
prof() {  # name solver kernel-regex
  timeout 200 ncu --set full --import-source yes -k regex:"$3" --launch-skip 1 --launch-count 1 \
    -o /tmp/$1 python3 methods/results/run92/ncu_fwd.py c01 methods/versions/$2/solver.py > $OUT/ncu_$1.log 2>&1
  echo "ncu $1 rc=$? $(( $(date +%s)-t0 ))s"; tail -2 $OUT/ncu_$1.log
  ncu -i /tmp/$1.ncu-rep --page source --print-source cuda,sass --csv > $OUT/$1.csv 2>&1
  ncu -i /tmp/$1.ncu-rep --page details > $OUT/$1_details.txt 2>&1
  ncu -i /tmp/$1.ncu-rep --page raw --csv > $OUT/$1_raw.csv 2>&1
  grep -E "Duration|Executed Instructions  |Issue Slots Busy|Achieved Occupancy|Registers Per|Warp Cycles Per Issued" $OUT/$1_details.txt | head
}
prof fwd64 v120 '^m3_cp_forward64$'
prof bwd64 v126 '^m3_cp_backward64$'
mkdir -p $OUT/cache
for f in /tmp/jc/*.json; do
  if grep -qE 'v119|v125' $f; then cp $f ${f%.json}.cubin $OUT/cache/ 2>/dev/null; fi
done
ls -la $OUT $OUT/cache | head -40
