#!/usr/bin/env bash
# The ablation runs (122 to 125): the default built with an experiment-only diff applied (to this
# copy of the tree only; the diffs are never committed to the sources), then one bench process per
# configuration, each with its own MAMBA3_JIT_EXP_OPTIONS (the macros the diff defines, added to
# every chunk-parallel kernel of a call): per-kernel profile, every visible case, no baseline, the
# timing process pinned. Results are wrong in the ablated builds: timing only. The JSON and logs
# travel in one archive (only a few files come back from a device run); summary.txt has each
# configuration's time of one kernel (ABLATE_KERNEL, m3_cp_backward unless set) and latency per case.
# Usage: [ABLATE_KERNEL=NAME] bash methods/results/run122/ablate.sh DIFF ARCHIVE NAME=OPTIONS [NAME=OPTIONS ...]
set -uo pipefail
diff=$1 archive=$2
shift 2
source methods/results/prologue.sh
mkdir -p /tmp/r
patch -p1 < "$diff" > /tmp/patch.log 2>&1; echo "patch rc=$?"
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
names=()
for spec in "$@"; do
  name=${spec%%=*}
  names+=("$name")
  MAMBA3_JIT_EXP_OPTIONS="${spec#*=}" timeout 240 python3 tools/bench.py --no-baseline --pin-cpu 3 \
    --json /tmp/r/bench_$name.json > /tmp/r/bench_$name.log 2>&1
  echo "$name rc=$? $(( $(date +%s)-t0 ))s"
done
tar czf "$OUT/$archive" -C /tmp/r .
python3 - /tmp/r "${ABLATE_KERNEL:-m3_cp_backward}" "${names[@]}" <<'PY' | tee $OUT/summary.txt
import json, sys
kernel, names = sys.argv[2], sys.argv[3:]
runs = {n: json.load(open(f"{sys.argv[1]}/bench_{n}.json")) for n in names}
print(f"{kernel} (us) per case, latency (us) in brackets")
print("case  T    " + "".join(f"{n:>18}" for n in names))
for i, case in enumerate(runs[names[0]]["cases"]):
    row = f"{case['name']} {case['T']:5d}"
    for n in names:
        c = runs[n]["cases"][i]
        k = c["kernels"].get(kernel, {}).get("us_per_iter", float("nan"))
        row += f"  {k:7.1f} [{c['latency_ms'] * 1e3:6.1f}]"
    print(row)
PY
