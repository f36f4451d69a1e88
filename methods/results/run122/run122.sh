#!/usr/bin/env bash
# Run 122 (twenty-fourth session, experiment): where the backward's time goes, by ablation. The
# default (v167 over v166's kernels) as it is, and with parts of m3_cp_backward removed at compile
# time (exp122.diff, applied here only; MAMBA3_JIT_EXP_OPTIONS adds the macro to every chunk-
# parallel kernel of the call): NO_PRODUCTS (every tile product returns at once), NO_EPILOGUE
# (backward_token_epilogue skipped), NO_TAIL (backward_token_scalars_parallel skipped), all three.
# Results wrong in the ablated runs: timing only. Per-kernel profile of every visible case, no
# baseline, the timing process pinned. Carry ["scratch", ".deps"].
# As first run, the summary below read a multi-solver key (KeyError) and only 8 of the 13 files
# under $OUT came back (noprod's and notail's were lost; run 123 ran them again). Fixed here: the
# JSON files travel in one archive, the summary reads the single-solver layout.
set -uo pipefail
[ -d /tmp/deps ] || for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared MAMBA3_JIT_CACHE_DIR=/tmp/jc
mkdir -p /tmp/r
t0=$(date +%s)
patch -p1 < methods/results/run122/exp122.diff > /tmp/patch.log 2>&1; echo "patch rc=$?"
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
run() {  # name, options
  MAMBA3_JIT_EXP_OPTIONS="$2" timeout 240 python3 tools/bench.py --no-baseline --pin-cpu 3 \
    --json /tmp/r/bench_$1.json > /tmp/r/bench_$1.log 2>&1
  echo "$1 rc=$? $(( $(date +%s)-t0 ))s"
}
run full ""
run noprod "-DM3_EXP_NO_PRODUCTS=1"
run noepi "-DM3_EXP_NO_EPILOGUE=1"
run notail "-DM3_EXP_NO_TAIL=1"
run none "-DM3_EXP_NO_PRODUCTS=1 -DM3_EXP_NO_EPILOGUE=1 -DM3_EXP_NO_TAIL=1"
run full2 ""
tar czf $OUT/run122.tgz -C /tmp/r .
python3 - /tmp/r <<'PY' | tee $OUT/summary.txt
import json, sys
names = ["full", "noprod", "noepi", "notail", "none", "full2"]
runs = {n: json.load(open(f"{sys.argv[1]}/bench_{n}.json")) for n in names}
print("backward kernel time (us) per case; latency (us) in brackets")
print("case  T     " + "".join(f"{n:>18}" for n in names))
for i, case in enumerate(runs["full"]["cases"]):
    row = f"{case['name']} {case['T']:5d} "
    for n in names:
        c = runs[n]["cases"][i]
        k = c["kernels"].get("m3_cp_backward", {}).get("us_per_iter", float("nan"))
        row += f"{k:9.1f} [{c['latency_ms'] * 1e3:6.1f}]"
    print(row)
PY
