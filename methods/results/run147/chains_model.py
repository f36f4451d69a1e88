"""A model of the chunk-parallel kernels' chains on the device's slots, to compare ticket orders.

Every (sequence, head, chunk) job takes a slot (264 on an H100 at two CTAs an SM) in ticket order
as slots free, hands its carry on `pre + upd` after it starts or `upd` after its chain predecessor
handed on (whichever is later), and holds its slot for `job` microseconds (longer if its hand-off
came late). Round order (every sequence's round r before any round r + 1, m3_schedule) against
aligned ends (m3_schedule_aligned: every chain's last round aligned with the longest's). The job
times are run 146's per-wave times (the backward about 29.5 us a wave, the chunk-64 forward about
19.5); pre and upd are guesses (the backward's update comes after its staging and mixing matrix,
the forward's chain after its state products). In run 146 the round-order model was within 5% of
the measured kernels (c01's backward 534 against 529.8 us, c07's 354 against 355.2).

    python3 methods/results/run147/chains_model.py
"""
import heapq
import json
import math
from pathlib import Path

SLOTS, HEADS = 264, 32


def makespan(lens, chunk, job, pre, upd, aligned):
    chunks = [math.ceil(n / chunk) for n in lens]
    most = max(chunks)
    pairs = sorted(((r + (most - c) if aligned else r, s), s, r) for s, c in enumerate(chunks) for r in range(c))
    handed = {}
    free = [0.0] * SLOTS
    finish = 0.0
    for _, s, r in pairs:
        for h in range(HEADS):
            start = heapq.heappop(free)
            ready = start + pre if r == 0 else max(start + pre, handed[(s, h, r - 1)])
            handed[(s, h, r)] = ready + upd
            end = max(start + job, ready + upd + (job - pre - upd))
            heapq.heappush(free, end)
            finish = max(finish, end)
    return finish


def main():
    root = Path(__file__).resolve().parents[3]
    cases = json.loads((root / "python" / "mamba3_jit" / "data" / "visible_cases.json").read_text())["cases"]
    for c in cases:
        lens = c["seq_lens"]
        b = [makespan(lens, 32, 29.5, 6.0, 3.0, a) for a in (False, True)]
        f = [makespan(lens, 64, 19.5, 8.0, 2.0, a) for a in (False, True)]
        print(f"{c['name']} {lens}: backward {b[0]:6.1f} -> {b[1]:6.1f} us ({100 * (b[1] / b[0] - 1):+.1f}%), "
              f"chunk-64 forward {f[0]:6.1f} -> {f[1]:6.1f} us ({100 * (f[1] / f[0] - 1):+.1f}%)")


if __name__ == "__main__":
    main()
