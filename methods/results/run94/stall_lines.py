"""Stall samples of one kernel by source line and reason, from an ncu source CSV.

    python3 stall_lines.py fwd64.csv [top]

The CSV is `ncu -i REPORT --page source --print-source cuda,sass --csv` of a lineinfo build: per
file, a row per CUDA line (the sums of its SASS rows, which follow it). Only the line rows are
summed. The source text is read from kernel_src/ (SRCDIR), the profiled commit's sources: for
run 94's fwd64_lines.txt and bwd64_lines.txt those of 2438dd3.
"""
import csv, collections, os, sys

rows = csv.reader(open(sys.argv[1]))
top = int(sys.argv[2]) if len(sys.argv) > 2 else 40
fname = None; hdr = None
lines = collections.defaultdict(collections.Counter)
for r in rows:
    if not r: continue
    if r[0] == "File Path": fname = os.path.basename(r[1]); continue
    if r[0] == "Line No": hdr = {h: i for i, h in enumerate(r)}; continue
    if r[0] in ("Function Name",) or r[0] == "": continue
    key = (fname, int(r[0]))
    for h, i in hdr.items():
        if h == "Warp Stall Sampling (All Samples)" or (h.startswith("stall_") and "Not Issued" not in h) \
           or h == "Instructions Executed":
            try: lines[key][h] += float(r[i].replace(",", ""))
            except ValueError: pass
tot = collections.Counter()
for c in lines.values(): tot.update(c)
S = tot["Warp Stall Sampling (All Samples)"]
print(f"samples {S:.0f}  instructions executed {tot['Instructions Executed']:.4g}")
reasons = sorted(((k, v) for k, v in tot.items() if k.startswith("stall_")), key=lambda x: -x[1])
print("by reason: " + ", ".join(f"{k[6:]} {100*v/S:.1f}%" for k, v in reasons if v > 0.005 * S))
srcs = {}
def text(f, n):
    if f not in srcs:
        try: srcs[f] = open(os.path.join(os.environ.get("SRCDIR", "kernel_src"), f)).read().splitlines()
        except OSError: srcs[f] = []
    L = srcs[f]; return L[n - 1].strip()[:70] if 0 < n <= len(L) else "?"
print(f"\ntop {top} lines (share of samples; the reasons above 10% of the line's)")
for k, c in sorted(lines.items(), key=lambda x: -x[1]["Warp Stall Sampling (All Samples)"])[:top]:
    s = c["Warp Stall Sampling (All Samples)"]
    rs = " ".join(f"{h[6:]}{100*v/s:.0f}" for h, v in sorted(c.items(), key=lambda x: -x[1])
                  if h.startswith("stall_") and v > 0.1 * s)
    print(f"{100*s/S:5.1f}%  {k[0]}:{k[1]:<4d} [{rs}]  {text(*k)}")
