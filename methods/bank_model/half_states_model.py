"""A thread-by-thread model of v252's half states (M3_CP_HALF_STATES): the chunk-64 forward's store of
a state in half with a power of two a 16 x 64 block (m3_forward64.cuh, store_state_rows_half), and
the backward's copy of it into its swizzled fp32 tile (m3_chunk_scan.cuh, backward_prepare's cp.async
placement and widen_half_state). It checks that
- the eight columns a lane stores are the fp32 staged store's eight, in the same order;
- the backward's fp32 tile, read through M3_SS, is the state rounded to half in its block's scale;
- every thread's cp.async slots lie in the fp32 places that thread alone writes afterwards, so the
  widening needs no barrier;
- each quarter-warp's 16-byte accesses (the cp.async slots, the widening's loads and stores) meet
  all 32 banks once: one wavefront each.
Run: python3 methods/bank_model/half_states_model.py
"""
from __future__ import annotations

import numpy as np

P, N, NT = 64, 128, 256


def ss(r: int, c: int) -> int:
    """M3_SS: the swizzled fp32 tile's word of row r, column c."""
    return r * N + ((((c >> 2) ^ ((r & 3) << 1)) << 2)) + (c & 3)


def half_state_slot(tid: int) -> int:
    return 4 * (((tid >> 2) & 1) ^ 1)


def block_scale(block: np.ndarray) -> float:
    m = float(np.abs(block).max())
    if m == 0.0 or not np.isfinite(m):
        return 1.0
    e = int(np.floor(np.log2(np.float32(m))))
    return 2.0 ** max(min(14 - e, 126), -126)


def forward_store(state: np.ndarray):
    """The slot as store_state_rows_half leaves it: halves row-major, then the inverse scales at
    [4 wg + wq] (wg the column half, wq the 16-row block)."""
    halves = np.zeros((P, N), np.float16)
    inverse = np.zeros(8, np.float32)
    for wg in range(2):
        for wq in range(4):
            rows, cols = slice(16 * wq, 16 * wq + 16), slice(64 * wg, 64 * wg + 64)
            s = block_scale(state[rows, cols])
            halves[rows, cols] = (state[rows, cols].astype(np.float32) * np.float32(s)).astype(np.float16)
            inverse[4 * wg + wq] = 1.0 / s
    return halves, inverse


def lane_columns_match_fp32_store() -> bool:
    """One lane's 16 bytes: the fp32 staged store writes (x.x, x.z, y.x, y.z) then (x.y, x.w, y.y,
    y.w) as columns 0..7; the half store packs the pairs (x.x, x.z), (y.x, y.z), (x.y, x.w),
    (y.y, y.w), low half first."""
    x, y = list(range(4)), list(range(4, 8))
    fp32 = [x[0], x[2], y[0], y[2], x[1], x[3], y[1], y[3]]
    words = [(x[0], x[2]), (y[0], y[2]), (x[1], x[3]), (y[1], y[3])]
    half = [v for lo_hi in words for v in lo_hi]
    return fp32 == half


def backward_copy(halves: np.ndarray, inverse: np.ndarray):
    """The fp32 tile (flat, M3_SS order) after the copy and the widening; with the per-thread slots
    written by the copy and by the widening, and the instructions' word addresses by warp."""
    tile = np.full(P * N + 512, np.nan, np.float64)  # t1 and t2 (34,816 bytes)
    staged, copy_slots, widen_slots = {}, {}, {}
    accesses = {"copy": [], "load": [], "store": []}
    for tid in range(NT):
        r0, c, hs = tid // (N // 8), 8 * (tid % (N // 8)), half_state_slot(tid)
        slots = []
        for q in range(4):
            r = r0 + 16 * q
            at = ss(r, c + hs)
            staged[at] = halves[r, c:c + 8].copy()
            slots.append(at)
            accesses["copy"].append((tid, q, at))
        at = ss(r0, c + 4 - hs)
        b = c // 64
        staged[at] = inverse[4 * b:4 * b + 4].copy()
        slots.append(at)
        accesses["copy"].append((tid, 4, at))
        copy_slots[tid] = slots
    for tid in range(NT):
        r0, c, hs = tid // (N // 8), 8 * (tid % (N // 8)), half_state_slot(tid)
        inv = staged[ss(r0, c + 4 - hs)]
        accesses["load"].append((tid, 4, ss(r0, c + 4 - hs)))
        mine = []
        for q in range(4):
            r = r0 + 16 * q
            h = staged[ss(r, c + hs)].astype(np.float64)
            accesses["load"].append((tid, q, ss(r, c + hs)))
            lo, hi = h[:4] * inv[q], h[4:] * inv[q]
            first, second = ss(r, c + hs), ss(r, c + 4 - hs)
            tile[first:first + 4] = hi if hs else lo
            tile[second:second + 4] = lo if hs else hi
            accesses["store"].append((tid, 2 * q, first))
            accesses["store"].append((tid, 2 * q + 1, second))
            mine += [first, second]
        widen_slots[tid] = mine
    return tile, copy_slots, widen_slots, accesses


def wavefronts(accesses) -> tuple[int, int]:
    """16-byte accesses: (wavefronts, minimum) summed over instructions, a quarter-warp of eight
    threads one wavefront when their 32 words meet 32 distinct banks."""
    by_instr: dict[tuple[int, int], list[int]] = {}
    for tid, k, at in accesses:
        by_instr.setdefault((tid // 32, k), []).append(at)
    total = minimum = 0
    for (_, _), addrs in by_instr.items():
        for qw in range(0, len(addrs), 8):
            banks = {}
            for at in addrs[qw:qw + 8]:
                for w in range(4):
                    banks.setdefault((at + w) % 32, set()).add(at + w)
            total += max(len(v) for v in banks.values())
            minimum += 1
    return total, minimum


def check(seed: int = 3, scale: float = 1.0) -> dict:
    rng = np.random.default_rng(seed)
    state = rng.standard_normal((P, N)) * np.exp(rng.uniform(-4, 4, (P, 1))) * scale
    halves, inverse = forward_store(state)
    tile, copy_slots, widen_slots, accesses = backward_copy(halves, inverse)
    got = np.array([[tile[ss(r, c)] for c in range(N)] for r in range(P)])
    want = np.zeros_like(state)
    for wg in range(2):
        for wq in range(4):
            rows, cols = slice(16 * wq, 16 * wq + 16), slice(64 * wg, 64 * wg + 64)
            want[rows, cols] = halves[rows, cols].astype(np.float64) * inverse[4 * wg + wq]
    owners = {}
    for tid, slots in widen_slots.items():
        for at in slots:
            owners.setdefault(at, set()).add(tid)
    private = all(owners.get(at) == {tid} for tid, slots in copy_slots.items() for at in slots)
    return {
        "columns": lane_columns_match_fp32_store(),
        "exact": bool(np.array_equal(got, want)),
        "rel_err": float(np.linalg.norm(got - state) / np.linalg.norm(state)),
        "every_word_once": len(owners) == P * N // 4 and all(len(v) == 1 for v in owners.values()),
        "private_slots": private,
        "wavefronts": {k: wavefronts(v) for k, v in accesses.items()},
    }


def main() -> int:
    ok = True
    for scale in (1.0, 2.0 ** 20, 2.0 ** -30):
        res = check(scale=scale)
        print(f"scale {scale:g}: {res}")
        ok &= res["columns"] and res["exact"] and res["every_word_once"] and res["private_slots"]
        ok &= res["rel_err"] < 1e-3 and all(w == m for w, m in res["wavefronts"].values())
    print("model:", "ok" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
