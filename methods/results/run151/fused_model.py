"""What a kernel that runs forward and backward jobs side by side could gain (a model, no kernel).

sharing_model.py's SMs (two slots, a job 1.48 times faster alone), with one ticket order for both
kinds: chunk-64 forward jobs and chunk-32 backward jobs, a backward chain (sequence, head) starting
only after that chain's last forward job is done. `groups` staggers the heads: the forward jobs of
head group g + 1 come before the backward jobs of group g, so that the two kinds share SMs; with
one group every forward job comes first. `mix` is how fast each job of a mixed pair runs against a
same-kind pair (1: no better; 1.48, the backward's lone speed, at most). Against the two kernels
one after the other (sharing_model.makespan of each).

    python3 methods/results/run151/fused_model.py [--interleaved]

In the thirty-fourth session (its output in the design note's section "A job alone on its SM"):
at most 3.4% off the two kernels and up to 2.4% slower on some cases, even with mixed pairs as
fast as lone jobs; with --interleaved (one forward ticket, then two backward ones) at most 6.2% off
on c01, while c00 and c06 lost up to 22% and 20% (the chains stretched).
"""
import json
import math
import sys
from pathlib import Path

from sharing_model import HEADS, KINDS, chain_wait, makespan, simulate

FWD, BWD = KINDS[1][2:6], KINDS[0][2:6]  # paired, lone, pre, upd


def aligned_pairs(lens, chunk):
    chunks = [math.ceil(n / chunk) for n in lens]
    most = max(chunks)
    return sorted(((r + most - c, s), s, r) for s, c in enumerate(chunks) for r in range(c)), chunks


def fused_order(lens, groups, interleaved=False):
    fp, fc = aligned_pairs(lens, 64)
    bp, _ = aligned_pairs(lens, 32)
    hs = HEADS // groups
    f = [[("f", s, h, r) for _, s, r in fp for h in range(g * hs, (g + 1) * hs)] for g in range(groups)]
    b = [[("b", s, h, r) for _, s, r in bp for h in range(g * hs, (g + 1) * hs)] for g in range(groups)]
    order = list(f[0])
    for g in range(1, groups):
        if not interleaved:
            order += f[g] + b[g - 1]
            continue
        # One forward ticket, then two backward ones (the backward has twice the jobs).
        for i, job in enumerate(f[g]):
            order += [job] + b[g - 1][2 * i:2 * i + 2]
        order += b[g - 1][2 * len(f[g]):]
    return order + b[groups - 1], fc


def fused_makespan(lens, groups, mix, interleaved=False):
    order, last_fwd = fused_order(lens, groups, interleaved)

    def wait(job, par):
        # A backward chain's first job waits, from its start, for its chain's last forward job.
        kind, s, h, r = job
        return (0.0, ("done", s, h)) if kind == "b" and r == 0 else chain_wait(job, par)

    def on_done(job, handed):
        kind, s, h, r = job
        if kind == "f" and r == last_fwd[s] - 1:
            handed.add(("done", s, h))

    return simulate(order, {"f": FWD, "b": BWD}, 2, wait, mix, on_done)


def main():
    root = Path(__file__).resolve().parents[3]
    cases = json.loads((root / "python" / "mamba3_jit" / "data" / "visible_cases.json").read_text())["cases"]
    interleaved = "--interleaved" in sys.argv
    plans = [(g, m) for g in (2, 4) for m in (1.0, 1.48)] if interleaved else \
            [(g, m) for g in (1, 2) for m in (1.0, 1.25, 1.48)]
    for c in cases:
        lens = c["seq_lens"]
        apart = makespan(lens, 64, *FWD, 2) + makespan(lens, 32, *BWD, 2)
        row = [f"{c['name']} two kernels {apart:6.1f} us; one:"]
        for groups, mix in plans:
            x = fused_makespan(lens, groups, mix, interleaved)
            row.append(f"g{groups} mix {mix}: {100 * (x / apart - 1):+.1f}%")
        print("  ".join(row), flush=True)


if __name__ == "__main__":
    main()
