"""Prints a multi-solver tools/bench.py JSON as one row per case (latency, the forward and the
backward kernel per solver) and each solver's latency geomean; with --ratios, also each named
kernel's time per case over the first solver's, and their geomean (runs 159 and 161 printed these
with the same arithmetic inline).
    python3 methods/results/bench_table.py BENCH.json [--ratios KERNEL ...]
"""
import json, math, sys


def geomean(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs))


d = json.load(open(sys.argv[1]))
ratio_kernels = sys.argv[sys.argv.index("--ratios") + 1:] if "--ratios" in sys.argv else []
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
    print(n, "latency geomean", round(1e3 * geomean(geo[n]), 1), "us")
base = names[0]
for n in names[1:]:
    for kernel in ratio_kernels:
        r = [c["solvers"][n]["kernels"][kernel]["us_per_iter"] / c["solvers"][base]["kernels"][kernel]["us_per_iter"]
             for c in d["cases"]]
        print(n, "/", base, kernel, "ratio geomean", round(geomean(r), 4), [round(x, 3) for x in r])
