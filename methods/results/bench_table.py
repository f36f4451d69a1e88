"""Prints a multi-solver tools/bench.py JSON as one row per case (latency, the forward and the
backward kernel per solver) and each solver's latency geomean.
    python3 methods/results/bench_table.py BENCH.json
"""
import json, math, sys
d = json.load(open(sys.argv[1]))
names = d["solvers"]
geo = {n: [] for n in names}
for c in d["cases"]:
    row = [f"{c['name']} T={c['T']:5d}"]
    for n in names:
        s = c["solvers"][n]
        k = s["kernels"]
        geo[n].append(s["latency_ms"])
        f = k.get("m3_cp_forward64", k.get("m3_cp_forward", {})).get("us_per_iter", float("nan"))
        b = k.get("m3_cp_backward", {}).get("us_per_iter", float("nan"))
        row.append(f"{n}: lat {s['latency_ms'] * 1e3:6.1f} fwd {f:6.1f} bwd {b:6.1f}")
    print("  ".join(row))
for n in names:
    print(n, "latency geomean", round(1e3 * math.exp(sum(map(math.log, geo[n])) / len(geo[n])), 1), "us")
