#!/usr/bin/env bash
# Run 123 (twenty-fourth session, experiment): run 122's ablations whose results did not come back
# (NO_PRODUCTS, NO_TAIL), and the skeleton of run 122's "none" without its state traffic
# (NO_STATE_IO: the entering state's copy, the successor's gradient loads and the new gradient's
# stores skipped; the flags still raised). exp123.diff = exp122.diff plus NO_STATE_IO, applied
# here only. Results wrong in the ablated runs: timing only. Carry ["scratch", ".deps"].
# First attempt: exp123.diff lacked NO_STATE_IO's default, so every build without it failed in
# NVRTC (only "nonestate" ran; its JSON is kept as bench_nonestate_first.json); fixed and run again.
set -uo pipefail
[ -d /tmp/deps ] || for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared MAMBA3_JIT_CACHE_DIR=/tmp/jc
t0=$(date +%s)
mkdir -p /tmp/r
patch -p1 < methods/results/run123/exp123.diff > /tmp/patch.log 2>&1; echo "patch rc=$?"
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
run() {  # name, options
  MAMBA3_JIT_EXP_OPTIONS="$2" timeout 240 python3 tools/bench.py --no-baseline --pin-cpu 3 \
    --json /tmp/r/bench_$1.json > /tmp/r/bench_$1.log 2>&1
  echo "$1 rc=$? $(( $(date +%s)-t0 ))s"
}
run full ""
run noprod "-DM3_EXP_NO_PRODUCTS=1"
run notail "-DM3_EXP_NO_TAIL=1"
run nonestate "-DM3_EXP_NO_PRODUCTS=1 -DM3_EXP_NO_EPILOGUE=1 -DM3_EXP_NO_TAIL=1 -DM3_EXP_NO_STATE_IO=1"
tar czf $OUT/run123.tgz -C /tmp/r .
python3 - /tmp/r <<'PY' | tee $OUT/summary.txt
import json, sys
names = ["full", "noprod", "notail", "nonestate"]
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
