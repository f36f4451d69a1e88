"""Prints a multi-solver tools/bench.py JSON as one row per case (latency, the forward and the
backward kernel per solver) and each solver's latency geomean; with --ratios, also each named
kernel's time per case over the first solver's, and their geomean (runs 159 and 161 printed these
with the same arithmetic inline). A KERNEL may name alternatives, "m3_cp_forward64|m3_cp_forward":
the first a case ran (the chunk-64 forward, or the chunk-32 one below its waves threshold).
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


def kernel_time(case, solver, kernel):
    """us_per_iter of the first of the |-separated kernels the case's solver ran, else None."""
    ran = case["solvers"][solver]["kernels"]
    return next((ran[k]["us_per_iter"] for k in kernel.split("|") if k in ran), None)


for kernel in ratio_kernels:
    missing = sorted({c["name"] for c in d["cases"] for n in names if kernel_time(c, n, kernel) is None})
    if missing:
        seen = sorted({k for c in d["cases"] for n in names for k in c["solvers"][n]["kernels"]})
        sys.exit(f"bench_table.py: --ratios {kernel}: no such kernel in cases {', '.join(missing)}; "
                 f"the JSON's kernels are: {', '.join(seen)}")
for n in names[1:]:
    for kernel in ratio_kernels:
        r = [kernel_time(c, n, kernel) / kernel_time(c, base, kernel) for c in d["cases"]]
        print(n, "/", base, kernel, "ratio geomean", round(geomean(r), 4), [round(x, 3) for x in r])
