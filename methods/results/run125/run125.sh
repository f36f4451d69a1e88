#!/usr/bin/env bash
# Run 125 (twenty-fourth session, experiment): the bare backward job of run 124 ("skelnoprep":
# products, epilogue, tail, state traffic and backward_prepare off) taken apart: without its flag
# waits (NO_WAIT, run 84's), without backward_intra's remains (NO_INTRA), and without both and the
# bias partials (NO_BIAS): what is left is the ticket, the flags raised, the reduce's head count.
# exp125.diff = exp124.diff plus those three macros, applied here only. Results wrong: timing only.
# Carry ["scratch", ".deps"].
set -uo pipefail
[ -d /tmp/deps ] || for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared MAMBA3_JIT_CACHE_DIR=/tmp/jc
t0=$(date +%s)
mkdir -p /tmp/r
patch -p1 < methods/results/run125/exp125.diff > /tmp/patch.log 2>&1; echo "patch rc=$?"
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
run() {  # name, options
  MAMBA3_JIT_EXP_OPTIONS="$2" timeout 240 python3 tools/bench.py --no-baseline --pin-cpu 3 \
    --json /tmp/r/bench_$1.json > /tmp/r/bench_$1.log 2>&1
  echo "$1 rc=$? $(( $(date +%s)-t0 ))s"
}
run bare "-DM3_EXP_NO_PRODUCTS=1 -DM3_EXP_NO_EPILOGUE=1 -DM3_EXP_NO_TAIL=1 -DM3_EXP_NO_STATE_IO=1 -DM3_EXP_NO_PREPARE=1"
run nowait "-DM3_EXP_NO_PRODUCTS=1 -DM3_EXP_NO_EPILOGUE=1 -DM3_EXP_NO_TAIL=1 -DM3_EXP_NO_STATE_IO=1 -DM3_EXP_NO_PREPARE=1 -DM3_EXP_NO_WAIT=1"
run nointra "-DM3_EXP_NO_PRODUCTS=1 -DM3_EXP_NO_EPILOGUE=1 -DM3_EXP_NO_TAIL=1 -DM3_EXP_NO_STATE_IO=1 -DM3_EXP_NO_PREPARE=1 -DM3_EXP_NO_INTRA=1"
run empty "-DM3_EXP_NO_PRODUCTS=1 -DM3_EXP_NO_EPILOGUE=1 -DM3_EXP_NO_TAIL=1 -DM3_EXP_NO_STATE_IO=1 -DM3_EXP_NO_PREPARE=1 -DM3_EXP_NO_WAIT=1 -DM3_EXP_NO_INTRA=1 -DM3_EXP_NO_BIAS=1"
tar czf $OUT/run125.tgz -C /tmp/r .
python3 - /tmp/r <<'PY' | tee $OUT/summary.txt
import json, sys
names = ["bare", "nowait", "nointra", "empty"]
runs = {n: json.load(open(f"{sys.argv[1]}/bench_{n}.json")) for n in names}
print("m3_cp_backward (us) per case, latency (us) in brackets")
print("case  T    " + "".join(f"{n:>18}" for n in names))
for i, case in enumerate(runs["bare"]["cases"]):
    row = f"{case['name']} {case['T']:5d}"
    for n in names:
        c = runs[n]["cases"][i]
        k = c["kernels"].get("m3_cp_backward", {}).get("us_per_iter", float("nan"))
        row += f"  {k:7.1f} [{c['latency_ms'] * 1e3:6.1f}]"
    print(row)
PY
