"""Wavefronts of the 32-token kernels' shared accesses to the q/k and v/dy tiles: padded rows
(row r at r * (W + 4), v103 to v135); M3_CP_ROWS8=1 (v138: row r at r * (W + 8), 4 more where bit 2
of r is set); M3_CP_ROWS8=2 for the q/k tiles (v140: 8 more, and odd rows' columns at c ^ 4).

Each access pattern is one warp instruction as the kernels issue it (lane = 4 g + t, warp tile
origin m0 = n0 = 0; the origins shift every lane alike and so do not change the counts). The model
is sw128_banks.wavefronts: 32 banks of 4 bytes; 8-byte accesses a half-warp and 16-byte accesses
a quarter-warp at a time. The last column applies the ratio to run 100's measured wavefronts per
job of the lines that issue the pattern (ncu, v135's m3_cp_backward on c01,
methods/results/run100/bwd103_lines.txt); the lines not listed keep their counts.

    python3 methods/bank_model/rows8_banks.py
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sw128_banks import wavefronts  # noqa: E402


def padded(width: int):
    return lambda r, c: r * (width + 4) + c


def rows8(width: int):
    return lambda r, c: r * (width + 8) + ((r >> 2) & 1) * 4 + c


def rows8_flip(width: int):
    return lambda r, c: r * (width + 8) + ((r >> 2) & 1) * 8 + (c ^ ((r & 1) * 4))


def fits(place, rows: int, width: int) -> bool:
    """Every element of the tile at its own float, inside rows * (width + 8) floats."""
    at = {place(r, c) for r in range(rows) for c in range(width)}
    return len(at) == rows * width and max(at) < rows * (width + 8) and min(at) >= 0


def lanes():
    return [(lane >> 2, lane & 3) for lane in range(32)]


def along_k(place, k0: int = 0, j: int = 0):
    """A tf32 operand read element by element along k: lane (g, t) at (k0 + t, 8 j + g)."""
    return wavefronts([place(k0 + t, 8 * j + g) for g, t in lanes()], 1)


def ldmatrix(place, k0: int = 0):
    """One 8 x 8 block phase per quarter-warp: lane l points at row l % 8 (+ 8 for lanes 8-15),
    16 bytes at column k0 (+ 4 for lanes 16-31)."""
    return wavefronts([place((l & 7) + (l & 8), k0 + ((l >> 4) << 2)) for l in range(32)], 4)


def accumulator_scalar(place, j: int = 0):
    """Row sums and epilogues reading the element at an accumulator's place: (g, 8 j + 2 t)."""
    return wavefronts([place(g, 8 * j + 2 * t) for g, t in lanes()], 1)


def accumulator_pairs(place, j: int = 0):
    """8-byte stores at an accumulator's places (g, 8 j + 2 t) and the next column (v148's t1, t2)."""
    return wavefronts([place(g, 8 * j + 2 * t) for g, t in lanes()], 2)


def row_pair_stores(place, half: int):
    """The q/k staging (row_paired_octet): lane bits 0-1 and 3-4 the octet, bit 2 the row of two."""
    addrs = []
    for l in range(32):
        o = (l & 3) | ((l >> 3) << 2)
        r = (l >> 2) & 1
        addrs.append(place(r, 8 * o + 4 * half))
    return wavefronts(addrs, 4)


def octet_rows(place, half_first: bool, width: int):
    """One row's octets per quarter-warp (the epilogue's loads, the v/dy staging), halves swizzled
    by bit 2 of the octet (M3_CP_SWIZZLED_HALVES)."""
    octets = width // 8
    total = 0
    for first in (True, False):
        addrs = []
        for l in range(32):
            r, o = l // octets, l % octets
            h = (o >> 2) & 1
            half = h if first else 1 - h
            addrs.append(place(r, 8 * o + 4 * half))
        total += wavefronts(addrs, 4)
    return total


# (pattern, tile width, measured wavefronts per job in run 100, lines)
PATTERNS = [
    ("B along k, sc kr (dqr intra)", lambda pl: along_k(pl), 128, 572, "1669"),
    ("A along k, e dy^T (state update)", lambda pl: along_k(pl), 64, 572, "1739"),
    ("B along k, qr (state update)", lambda pl: along_k(pl), 128, 509, "1740"),
    ("B along k, qr (dks intra)", lambda pl: along_k(pl), 128, 509, "1718"),
    ("B along k, dy (dv intra)", lambda pl: along_k(pl), 64, 254, "1558"),
    ("accumulator places, dy v (row sums)", lambda pl: accumulator_scalar(pl), 64, 509, "1577"),
    ("accumulator places, qr (u)", lambda pl: accumulator_scalar(pl), 128, 366, "1678"),
    ("accumulator places, v (x row sums)", lambda pl: accumulator_scalar(pl), 64, 159, "1576"),
    ("accumulator places, dy (dv)", lambda pl: accumulator_scalar(pl), 64, 250, "1566"),
]


def main() -> None:
    layouts = {"padded": padded, "rows8": rows8, "flip": rows8_flip}
    print(f"{'pattern':40s} {'padded':>6s} {'rows8':>6s} {'flip':>6s}   per job (run 100): padded -> rows8 / flip")
    before = a8 = af = 0.0
    for name, f, width, measured, line in PATTERNS:
        w = {k: f(v(width)) for k, v in layouts.items()}
        flip = w["flip"] if width == 128 else w["rows8"]  # v140 flips the q/k tiles alone
        before += measured
        a8 += measured * w["rows8"] / w["padded"]
        af += measured * flip / w["padded"]
        print(f"{name:40s} {w['padded']:6d} {w['rows8']:6d} {flip:6d}   {measured:5d} -> "
              f"{measured * w['rows8'] / w['padded']:5.0f} / {measured * flip / w['padded']:5.0f}  (line {line})")
    print("per instruction, not in run 100's lines above:")
    rows = [("ldmatrix blocks, q/k tile", lambda pl: ldmatrix(pl), 128),
            ("ldmatrix blocks, v/dy tile", lambda pl: ldmatrix(pl), 64)]
    for name, f, width in rows:
        fl = f(rows8_flip(width)) if width == 128 else f(rows8(width))
        print(f"{name:40s} {f(padded(width)):6d} {f(rows8(width)):6d} {fl:6d}")
    for half in (0, 1):
        print(f"{'q/k staging, row pairs, half ' + str(half):40s} {row_pair_stores(padded(128), half):6d} "
              f"{row_pair_stores(rows8(128), half):6d} {row_pair_stores(rows8_flip(128), half):6d}")
    # v148 (M3_CP_ROWS8_MXT): the m and x tiles (C x C, C = 32) read transposed along k by the dv and
    # dks intra products, and t1 and t2 stored at the accumulators' places: scalar 4-byte stores as
    # v142 does them, 8-byte pairs in v148. Run 102's v142 lines: 254 wavefronts a job on each of the
    # four (half of them excess).
    print(f"{'m, x read along k (v148)':40s} {along_k(padded(32)):6d} {along_k(rows8(32)):6d}")
    scalar = accumulator_scalar(padded(128)) * 2  # a column pair: two scalar stores
    print(f"{'t1, t2 stores at a column pair (v148)':40s} {scalar:6d} {accumulator_pairs(rows8(128)):6d}")
    for name, w in [("epilogue q/k octet loads (two)", 128), ("v/dy staging stores (two)", 64)]:
        fl = octet_rows(rows8_flip(w), True, w) if w == 128 else octet_rows(rows8(w), True, w)
        print(f"{name:40s} {octet_rows(padded(w), True, w):6d} {octet_rows(rows8(w), True, w):6d} {fl:6d}")
    # The q/k staging: 32 rows x 16 octets x 2 halves x (q, k) = 64 warp instructions a job.
    st = {k: 32 * sum(row_pair_stores(v(128), h) for h in (0, 1)) for k, v in layouts.items()}
    print(f"q/k staging stores per job: {st['padded']} / {st['rows8']} / {st['flip']}")
    print(f"\nlisted lines and the staging: padded {before + st['padded']:.0f}, rows8 {a8 + st['rows8']:.0f}, "
          f"flip {af + st['flip']:.0f} wavefronts per job (run 100: 13,845 shared wavefronts a job in all)")
    for name, v, width in [("rows8 q/k", rows8, 128), ("rows8 v/dy", rows8, 64), ("flip q/k", rows8_flip, 128)]:
        assert fits(v(width), 32, width), name
    print("each layout holds every element of a 32-row tile once, within rows * (width + 8) floats")


if __name__ == "__main__":
    main()
