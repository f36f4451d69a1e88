#!/usr/bin/env python3
"""One kernel's ncu source counters summed by CUDA source line: stall samples by reason,
executed instructions and the L1 wavefront counts (shared, shared excessive, ...).

    ncu -i REPORT --page source --print-source cuda,sass --csv > k.csv
    python3 tools/ncu_lines.py k.csv [--top 40] [--src kernel_src]

The report must come from a lineinfo build (MAMBA3_JIT_LINEINFO=1). In the CSV each file has a
row per CUDA line holding the sums of the SASS rows that follow it; only the line rows are read.
Two tables follow the totals: the lines with the most stall samples, and the lines with the most
excessive (bank-conflict) shared wavefronts, which say where the L1 data pipe's cycles go.
"""
import argparse
import collections
import csv
import os

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def wanted(column: str) -> bool:
    if column in (SAMPLES, EXECUTED):
        return True
    if column.startswith("stall_"):
        return "Not Issued" not in column
    return "Wavefronts" in column


def number(text: str):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def read_lines(path: str):
    """{(file, line): Counter of the wanted columns}, and the wanted columns seen."""
    per_line = collections.defaultdict(collections.Counter)
    columns = set()
    fname, header = None, None
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if not row:
                continue
            if row[0] == "File Path":
                fname = os.path.basename(row[1])
                continue
            if row[0] == "Line No":
                header = {h: i for i, h in enumerate(row) if wanted(h)}
                columns.update(header)
                continue
            if header is None or not row[0].strip().isdigit():
                continue
            counts = per_line[(fname, int(row[0]))]
            for h, i in header.items():
                if i < len(row):
                    v = number(row[i])
                    if v is not None:
                        counts[h] += v
    return per_line, columns


class Source:
    def __init__(self, root: str):
        self.root, self.files = root, {}

    def text(self, fname: str, line: int) -> str:
        if fname not in self.files:
            try:
                with open(os.path.join(self.root, fname)) as f:
                    self.files[fname] = f.read().splitlines()
            except OSError:
                self.files[fname] = []
        body = self.files[fname]
        return body[line - 1].strip()[:72] if 0 < line <= len(body) else "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--src", default=os.environ.get("SRCDIR", "kernel_src"),
                    help="where the profiled commit's kernel sources are")
    a = ap.parse_args()
    per_line, columns = read_lines(a.csv)
    total = collections.Counter()
    for c in per_line.values():
        total.update(c)
    src = Source(a.src)
    samples = total[SAMPLES] or 1.0
    print(f"samples {total[SAMPLES]:.0f}  instructions executed {total[EXECUTED]:.4g}")
    reasons = sorted(((k, v) for k, v in total.items() if k.startswith("stall_")), key=lambda x: -x[1])
    print("by reason: " + ", ".join(f"{k[6:]} {100 * v / samples:.1f}%" for k, v in reasons
                                   if v > 0.005 * samples))
    waves = sorted(c for c in columns if "Wavefronts" in c)
    for c in waves:
        print(f"{c}: {total[c]:.4g}")

    print(f"\ntop {a.top} lines by stall samples (reasons above 10% of the line's)")
    for key, c in sorted(per_line.items(), key=lambda x: -x[1][SAMPLES])[:a.top]:
        s = c[SAMPLES] or 1.0
        why = " ".join(f"{h[6:]}{100 * v / s:.0f}" for h, v in sorted(c.items(), key=lambda x: -x[1])
                       if h.startswith("stall_") and v > 0.1 * s)
        print(f"{100 * c[SAMPLES] / samples:5.1f}%  {key[0]}:{key[1]:<5d} [{why}]  {src.text(*key)}")

    excess = [c for c in waves if "Shared" in c and "Excessive" in c]
    shared = [c for c in waves if "Shared" in c and "Excessive" not in c and "Ideal" not in c]
    if excess:
        ex = excess[0]
        tot_ex = total[ex] or 1.0
        print(f"\ntop {a.top} lines by '{ex}' (share of its total; the line's {shared[0] if shared else ''})")
        for key, c in sorted(per_line.items(), key=lambda x: -x[1][ex])[:a.top]:
            if c[ex] <= 0:
                break
            sh = f"{c[shared[0]]:.3g}" if shared else ""
            print(f"{100 * c[ex] / tot_ex:5.1f}%  {c[ex]:10.3g} of {sh:>9}  {key[0]}:{key[1]:<5d}  {src.text(*key)}")


if __name__ == "__main__":
    main()
