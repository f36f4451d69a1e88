"""Shared-memory wavefronts of warp-wide accesses to 128-byte-swizzled fp32 tiles (m3_wgmma.cuh).

The rewrite's staging writes its operand tiles in wgmma's K-major 128-byte swizzle; this counts,
exactly and without a GPU, how many wavefronts (shared-memory cycles) a warp instruction takes for a
given lane mapping, so that the staging's mappings are chosen conflict-free before any kernel runs.

Model (Hopper shared memory: 32 banks of 4 bytes, 128 bytes a wavefront): a warp's 4-byte accesses
take as many wavefronts as the largest number of distinct 4-byte words any one bank must serve; 8-byte
accesses are served a half-warp at a time and 16-byte accesses a quarter-warp at a time, each part
counted the same way. Run: python3 methods/bank_model/sw128_banks.py
"""
from __future__ import annotations



def sw128_index(rows: int, r: int, k: int) -> int:
    """m3wg::sw128_index: the float index of (r, k) in a K-major tile of `rows` rows."""
    return (k >> 5) * rows * 32 + r * 32 + ((((k >> 2) & 7) ^ (r & 7)) << 2) + (k & 3)


def permuted(n: int) -> int:
    """The row position of state column n in KS^T (design note: 8b + t -> 8b + 2t, 8b + t + 4 -> 8b + 2t + 1)."""
    q = n & 7
    return (n & ~7) | (2 * q if q < 4 else 2 * (q - 4) + 1)


def wavefronts(word_addresses: list[int], width_words: int) -> int:
    """Wavefronts of one warp instruction; word_addresses[lane] is the lane's first 4-byte word."""
    group = {1: 32, 2: 16, 4: 8}[width_words]
    total = 0
    for g0 in range(0, 32, group):
        per_bank: dict[int, set[int]] = {}
        for lane in range(g0, g0 + group):
            for w in range(width_words):
                word = word_addresses[lane] + w
                per_bank.setdefault(word % 32, set()).add(word)
        total += max(len(s) for s in per_bank.values())
    return total


def tile_store_cost(rows: int, cols: int, lane_items, width_words: int, place) -> tuple[int, int]:
    """Total wavefronts and instructions to write a rows x cols tile: `lane_items(instr, lane)` gives a
    lane's (row, col) for an instruction, `place(row, col)` its float index."""
    per_instr = rows * cols // (32 * width_words)
    total = 0
    for i in range(per_instr):
        total += wavefronts([place(*lane_items(i, lane)) for lane in range(32)], width_words)
    return total, per_instr


def qk_octet_store_cost(rows: int, swapped: bool) -> int:
    """Wavefronts of stage_qk's stores of one rows x 128 tile: thread tid holds token 16 ps + tid // 16
    and octet o = tid % 16; each of its two 16-byte stores writes one half of the octet. With
    `swapped` the lanes whose o has bit 2 set write their high half first (M3_CP_F64_SWAPPED_QK)."""
    total = 0
    for ps in range(rows // 16):
        for warp in range(8):
            for store in range(2):
                addresses = []
                for lane in range(32):
                    tid = 32 * warp + lane
                    t, o = 16 * ps + tid // 16, tid % 16
                    half = store ^ ((o >> 2) & 1) if swapped else store
                    addresses.append(sw128_index(rows, t, 8 * o + 4 * half))
                total += wavefronts(addresses, 4)
    return total


def main() -> None:
    C, N = 64, 128
    print("QR / KS (64 tokens x 128 columns), 16-byte stores:")
    row_major = {
        "a warp over 4 tokens x 8 quads": lambda i, l: (4 * (i // 4) + l // 8, 32 * (i % 4) + 4 * (l % 8)),
        "a warp over 1 token x 32 quads": lambda i, l: (i, 4 * l),
    }
    for name, items in row_major.items():
        cost, n = tile_store_cost(C, N, items, 4, lambda r, k: sw128_index(C, r, k))
        print(f"  {name:44s} {cost:5d} wavefronts in {n} instructions ({cost / n:.1f} each; 4 is the floor)")

    print("KS^T (128 state columns, rows permuted, x 64 tokens), 4-byte stores of KS's values:")
    kst = lambda r, c: sw128_index(N, permuted(r), c)  # (state column n, token t)
    mappings = {
        # the lane that rotated 4 consecutive n of one token stores them one by one (e = i % 4)
        "rotation lanes, 4 tokens x 8 quads": lambda i, l: (32 * ((i // 4) % 4) + 4 * (l % 8) + i % 4, 4 * (i // 16) + l // 8),
        "rotation lanes, 1 token x 32 quads": lambda i, l: (4 * l + i % 4, i // 4),
        # token-major lanes: 8 consecutive n x 4 consecutive tokens
        "8 columns x 4 tokens": lambda i, l: (8 * (i % 16) + l % 8, 4 * (i // 16) + l // 8),
        "8 columns x 4 tokens, token fastest": lambda i, l: (8 * (i % 16) + l // 4, 4 * (i // 16) + l % 4),
    }
    for name, items in mappings.items():
        cost, n = tile_store_cost(N, C, items, 1, kst)
        print(f"  {name:44s} {cost:5d} wavefronts in {n} instructions ({cost / n:.1f} each; 1 is the floor)")

    print("QR / KS as the chunk-64 forward stages them (16 lanes a token, lane o's octet 8 o .. 8 o + 7 as")
    print("two 16-byte stores; the kernel's stage_qk, 4 passes of 16 tokens), per tile:")
    for name, swapped in (("low half first (v119 to v148)", False), ("bit 2 of o: high half first (v156)", True)):
        print(f"  {name:44s} {qk_octet_store_cost(C, swapped):5d} wavefronts")

    # Every mapping must write each element exactly once.
    for name, items in mappings.items():
        assert len({items(i, l) for i in range(N * C // 32) for l in range(32)}) == N * C, name
    for name, items in row_major.items():
        assert len({(r, k + e) for i in range(C * N // 128) for l in range(32) for r, k in [items(i, l)]
                    for e in range(4)}) == C * N, name


if __name__ == "__main__":
    main()
