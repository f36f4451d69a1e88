#!/usr/bin/env bash
# Run 86: ncu on c01 of v104's forward and backward and v116's forward (three CTAs per SM), for the
# throughput breakdowns: which unit is busy when 24 warps per SM do not beat 16.
set -uo pipefail
for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared
t0=$(date +%s)
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
for v in v104 v116; do python3 scratch/ncu_fwd.py c01 methods/versions/$v/solver.py; done; echo "jit $(( $(date +%s)-t0 ))s"
prof() {  # kernel regex, solver version, report name
  timeout 200 ncu --set full -k regex:$1 --launch-skip 1 --launch-count 1 -o /tmp/$3 \
    python3 scratch/ncu_fwd.py c01 methods/versions/$2/solver.py > $OUT/ncu_$3.log 2>&1
  echo "ncu $3 rc=$? $(( $(date +%s)-t0 ))s"
  ncu -i /tmp/$3.ncu-rep --page details --print-details all > $OUT/$3_details.txt 2>&1
  ncu -i /tmp/$3.ncu-rep --page raw --csv > $OUT/$3_raw.csv 2>&1
}
prof m3_cp_forward v104 fwd_v104
prof m3_cp_forward v116 fwd_v116
prof m3_cp_backward v104 bwd_v104
for r in fwd_v104 fwd_v116 bwd_v104; do
  echo "== $r"; grep -E "^ +(Duration|L1/TEX Cache Throughput|L2 Cache Throughput|DRAM Throughput|Compute \(SM\) Throughput|Issue Slots Busy|Achieved Active Warps Per SM|Warp Cycles Per Issued Instruction|Executed Instructions) " $OUT/${r}_details.txt
done
