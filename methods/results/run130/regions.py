#!/usr/bin/env python3
"""Run 130's line profiles grouped by code region, and the lines that execute the most
instructions (tools/ncu_lines.py ranks them by stall samples).

    python3 methods/results/run130/regions.py methods/results/run130/backward_c01.csv.gz [--top 30]

The regions are line ranges of kernel_src/ as it stood at run 130 (commit d1a63d0), and the
lines' text is read from that commit (git show), since later edits moved the lines.
"""
import argparse
import collections
import gzip
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "tools"))
import ncu_lines  # noqa: E402

REGIONS = [("m3_chunk_scan.cuh", 700, 1116, "staging (load_chunk, early loads)"),
           ("m3_chunk_scan.cuh", 1117, 1160, "mixing matrix"),
           ("m3_chunk_scan.cuh", 1298, 1507, "per-token tail"),
           ("m3_chunk_scan.cuh", 1508, 1609, "backward_prepare"),
           ("m3_chunk_scan.cuh", 1610, 1914, "backward_intra"),
           ("m3_chunk_scan.cuh", 1915, 1922, "state-gradient product"),
           ("m3_chunk_scan.cuh", 1923, 2109, "epilogue"),
           ("m3_chunk_scan.cuh", 2244, 2285, "bias partials"),
           ("m3_chunk_scan.cuh", 1, 699, "tile helpers (layouts, loads)"),
           ("m3_chunk_parallel.cuh", 1, 1140, "tickets, flags"),
           ("m3_chunk_parallel.cuh", 1141, 1600, "backward body (update, tail I/O)"),
           ("m3_common.cuh", 1, 100000, "shared helpers (mma, sums, sincos, bf16)"),
           ("m3_forward64.cuh", 1, 100000, "chunk-64 forward"),
           ("m3_wgmma.cuh", 1, 100000, "wgmma helpers")]
RUN_COMMIT = "d1a63d0"  # the tree run 130 profiled


def source_line(cache, fname, line):
    if fname not in cache:
        try:
            cache[fname] = subprocess.run(["git", "show", f"{RUN_COMMIT}:kernel_src/{fname}"], capture_output=True,
                                          text=True, check=True).stdout.splitlines()
        except (OSError, subprocess.CalledProcessError):
            cache[fname] = []
    body = cache[fname]
    return body[line - 1].strip()[:72] if 0 < line <= len(body) else "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv_gz")
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    with tempfile.NamedTemporaryFile(suffix=".csv", delete=False) as tmp, gzip.open(args.csv_gz, "rb") as f:
        shutil.copyfileobj(f, tmp)
    per_line, _ = ncu_lines.read_lines(tmp.name)
    os.unlink(tmp.name)
    E, S = ncu_lines.EXECUTED, ncu_lines.SAMPLES
    total_e = sum(c[E] for c in per_line.values()) or 1.0
    total_s = sum(c[S] for c in per_line.values()) or 1.0
    regions_e, regions_s = collections.Counter(), collections.Counter()
    for (fname, line), c in per_line.items():
        name = next((r[3] for r in REGIONS if r[0] == fname and r[1] <= line <= r[2]), "other: " + str(fname))
        regions_e[name] += c[E]
        regions_s[name] += c[S]
    print(f"instructions {total_e:.4g}, stall samples {total_s:.0f}")
    print("by region (% of instructions, % of samples)")
    for name, e in regions_e.most_common():
        print(f"  {100 * e / total_e:5.1f}% {100 * regions_s[name] / total_s:5.1f}%  {name}")
    cache = {}
    print(f"top {args.top} lines by executed instructions")
    for (fname, line), c in sorted(per_line.items(), key=lambda kv: -kv[1][E])[: args.top]:
        print(f"  {100 * c[E] / total_e:5.1f}% {100 * c[S] / total_s:5.1f}%  {fname}:{line}  {source_line(cache, fname, line)}")


if __name__ == "__main__":
    main()
