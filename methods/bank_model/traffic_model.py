"""HBM bytes of one call, stream by stream, for the visible cases: the compulsory traffic (each input
read once, each result written once, as tools/bench.py counts it), what today's kernels read again
(the backward re-reads the forward's inputs, the angle kernel the angles), and the two workspace
streams that leave the chip: the entering states (written by the forward, read back by the
backward) and the per-head dq/dk rows (written by the backward, read back by the reduce). The
state-gradient and chain hand-offs stay in L2 (discarded or consumed at once) and are not counted.

Designs: v248 (fp32 states at every 32-token chunk, fp32 partials), v253 (half states), v255 (half
states and partials), and `next`: the design note's next backward (half states only at 64-token
job boundaries, the heads of a CTA summed on chip before the partials leave, K heads a CTA).
Prints MB per stream and the bandwidth floor of the whole at the H100's 3.35 TB/s.

Run: python3 methods/bank_model/traffic_model.py [--heads-per-cta K]
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

H, N, P, A = 32, 128, 64, 32
HBM_TBPS = 3.35
CASES = Path(__file__).resolve().parents[3] / "shared" / "cases" / "visible_cases.json"


def streams(seq_lens, design: str, heads_per_cta: int = 8) -> dict:
    """MB per stream of one call for `design`."""
    T, S = sum(seq_lens), len(seq_lens)
    live = [L for L in seq_lens if L > 0]
    bf, f32, half = 2, 4, 2
    inputs = (2 * T * N * bf + 3 * T * H * P * bf + T * H * A * bf + 2 * H * T * f32 + H * T * bf + 2 * H * N * f32
              + H * f32 + (S + 1) * 4 + S * H * (A * bf + P * N * f32 + N * f32 + P * bf))
    forward = T * H * P * bf + S * H * (A * bf + P * N * f32 + N * f32 + P * bf)  # output, final states
    # A gradient for each input but cu_seqlens, dout and the four final-state gradients, in its dtype.
    gradients = inputs - (S + 1) * 4 - T * H * P * bf - S * H * (A * bf + P * N * f32 + N * f32 + P * bf)
    results = forward + gradients
    again = 3 * T * H * P * bf + 2 * T * H * A * bf  # the backward's v, z, dout, angles; the angle kernel's angles
    entering32 = sum(math.ceil(L / 32) - 1 for L in live) * H * P * N
    entering64 = sum(math.ceil(L / 64) - 1 for L in live) * H * P * N
    rows = T * H * N * 2  # dq and dk per head
    if design == "v248":
        states, partials = 2 * entering32 * f32, 2 * rows * f32
    elif design == "v253":
        states, partials = 2 * entering32 * half, 2 * rows * f32
    elif design == "v255":
        states, partials = 2 * entering32 * half, 2 * rows * half
    elif design == "next":
        states, partials = 2 * entering64 * half, 2 * math.ceil(H / heads_per_cta) * T * N * 2 * half
    else:
        raise ValueError(design)
    mb = {"compulsory": (inputs + results) / 1e6, "read again": again / 1e6, "states": states / 1e6,
          "partials": partials / 1e6}
    mb["total"] = sum(mb.values())
    mb["floor_us"] = mb["total"] / HBM_TBPS  # MB over TB/s: microseconds
    return mb


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heads-per-cta", type=int, default=8)
    args = ap.parse_args()
    cases = json.loads(CASES.read_text())["cases"]
    print(f"MB of HBM traffic a call; floor at {HBM_TBPS} TB/s ('next': {args.heads_per_cta} heads a CTA)")
    print(f"{'case':5s} {'design':6s} {'compulsory':>10s} {'again':>7s} {'states':>7s} {'partials':>8s} {'total':>7s} {'floor us':>8s}")
    for c in cases:
        for design in ("v248", "v253", "v255", "next"):
            m = streams(c["seq_lens"], design, args.heads_per_cta)
            print(f"{c['name']:5s} {design:6s} {m['compulsory']:10.1f} {m['read again']:7.1f} {m['states']:7.1f} "
                  f"{m['partials']:8.1f} {m['total']:7.1f} {m['floor_us']:8.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
