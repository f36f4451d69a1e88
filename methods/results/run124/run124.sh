#!/usr/bin/env bash
# Run 124 (twenty-fourth session, experiment): the skeleton of run 123 taken apart. On one machine:
# the default as it is; the default without the angles (NO_ANGLES: no tanh, no angle scans, every
# rotation by zero); the skeleton (products, epilogue, tail and state traffic off, as run 123's
# "nonestate"); the skeleton without backward_prepare (NO_PREPARE: no scalars, angles, staging or
# mixing matrix). exp124.diff = exp123.diff plus those two macros, applied here only. Results wrong
# in the ablated runs: timing only. Carry ["scratch", ".deps"].
set -uo pipefail
[ -d /tmp/deps ] || for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared MAMBA3_JIT_CACHE_DIR=/tmp/jc
t0=$(date +%s)
mkdir -p /tmp/r
patch -p1 < methods/results/run124/exp124.diff > /tmp/patch.log 2>&1; echo "patch rc=$?"
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
run() {  # name, options
  MAMBA3_JIT_EXP_OPTIONS="$2" timeout 240 python3 tools/bench.py --no-baseline --pin-cpu 3 \
    --json /tmp/r/bench_$1.json > /tmp/r/bench_$1.log 2>&1
  echo "$1 rc=$? $(( $(date +%s)-t0 ))s"
}
run full ""
run noang "-DM3_EXP_NO_ANGLES=1"
run skel "-DM3_EXP_NO_PRODUCTS=1 -DM3_EXP_NO_EPILOGUE=1 -DM3_EXP_NO_TAIL=1 -DM3_EXP_NO_STATE_IO=1"
run skelnoprep "-DM3_EXP_NO_PRODUCTS=1 -DM3_EXP_NO_EPILOGUE=1 -DM3_EXP_NO_TAIL=1 -DM3_EXP_NO_STATE_IO=1 -DM3_EXP_NO_PREPARE=1"
tar czf $OUT/run124.tgz -C /tmp/r .
python3 - /tmp/r <<'PY' | tee $OUT/summary.txt
import json, sys
names = ["full", "noang", "skel", "skelnoprep"]
runs = {n: json.load(open(f"{sys.argv[1]}/bench_{n}.json")) for n in names}
print("m3_cp_backward (us) per case, latency (us) in brackets")
print("case  T    " + "".join(f"{n:>18}" for n in names))
for i, case in enumerate(runs["full"]["cases"]):
    row = f"{case['name']} {case['T']:5d}"
    for n in names:
        c = runs[n]["cases"][i]
        k = c["kernels"].get("m3_cp_backward", {}).get("us_per_iter", float("nan"))
        row += f"  {k:7.1f} [{c['latency_ms'] * 1e3:6.1f}]"
    print(row)
PY
