#!/usr/bin/env bash
# Run 155 (thirty-fifth session, experiment): what the backward's tail chain costs today. The
# design note's last section shows the angle and decay sums that the tail record carries are
# functions of the state-gradient hand-off, so that only the trapezoid's one-token shift would stay
# late; run 84 bounded every flag wait together at 1 to 3%. Here the tail record alone is taken
# out of the default's backward: no wait for the successor's record and no record written
# (M3_EXP_NO_TAIL_CHAIN, exp155.diff, in this copy of the tree only, never committed; the carries
# read as zeros, so the results are wrong: timing only). ptxas: the backward 6,008 instructions
# against 6,088, the same 128 registers, 24-byte stack and 11 spill instructions; the base's SASS is
# the committed tree's. Alternating processes, base and notail twice each, pinned, no baseline.
# Prediction: the backward 0.5 to 2% shorter (the tail's wait, two L2 round trips and a barrier
# of each job's 3.7 us fixed part), the latency geomean 0.3 to 1.5%.
# Written in the thirty-fifth session and not run there (the device budget ran out in failed
# starts). To run it: warm scratch/jc from a build of the patched tree, with and without
# MAMBA3_JIT_EXP_OPTIONS="-DM3_EXP_NO_TAIL_CHAIN=1" (`mamba3-jit-warmup --config default`), then
# this script, which applies the diff to the device's copy itself.
# Carry ["scratch", ".deps"].
set -uo pipefail
source methods/results/prologue.sh
patch -p1 < methods/results/run155/exp155.diff > /tmp/patch.log 2>&1; echo "patch rc=$?"
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
mkdir -p /tmp/r
for round in 1 2; do
  for name in base notail; do
    opts=""; [ $name = notail ] && opts="-DM3_EXP_NO_TAIL_CHAIN=1"
    if [ -n "$opts" ]; then export MAMBA3_JIT_EXP_OPTIONS="$opts"; else unset MAMBA3_JIT_EXP_OPTIONS; fi
    timeout 150 python3 tools/bench.py --no-baseline --pin-cpu 3 --reps 2 --json /tmp/r/${name}$round.json \
      > /tmp/r/${name}$round.log 2>&1
    echo "$name$round rc=$? $(( $(date +%s)-t0 ))s"
  done
done
unset MAMBA3_JIT_EXP_OPTIONS
cp /tmp/r/*.json $OUT/
# The first run's summary read a multi-solver JSON ('solvers'); tools/bench.py with one solver
# writes the case's figures directly. summary.txt was made afterwards from the same JSON files by
# this corrected block.
python3 - /tmp/r <<'PY' | tee $OUT/summary.txt
import json, sys, math
d = sys.argv[1]
runs = {n: json.load(open(f"{d}/{n}.json")) for n in ("base1", "notail1", "base2", "notail2")}
print("m3_cp_backward (us) per case, latency (us) in brackets")
print("case  T    " + "".join(f"{n:>18}" for n in runs))
geo = {n: [] for n in runs}; bgeo = {n: [] for n in runs}
for i, case in enumerate(runs["base1"]["cases"]):
    row = f"{case['name']} {case['T']:5d}"
    for n, r in runs.items():
        c = r["cases"][i]
        c = next(iter(c["solvers"].values())) if "solvers" in c else c
        k = c["kernels"].get("m3_cp_backward", {}).get("us_per_iter", float("nan"))
        geo[n].append(c["latency_ms"] * 1e3); bgeo[n].append(k)
        row += f"  {k:7.1f} [{c['latency_ms'] * 1e3:6.1f}]"
    print(row)
g = lambda v: math.exp(sum(map(math.log, v)) / len(v))
print("latency geomean " + ", ".join(f"{n} {g(v):.1f}" for n, v in geo.items()))
print("backward geomean " + ", ".join(f"{n} {g(v):.1f}" for n, v in bgeo.items()))
PY
