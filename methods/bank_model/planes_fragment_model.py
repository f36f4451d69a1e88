"""A lane-by-lane model of kernel_src/m3_planes.cuh: its ldmatrix addresses, the fragments the PTX
ISA says ldmatrix (plain and .trans) and mma.m16n8k16 exchange, and the shared-memory bank groups
each 8-lane phase touches. It checks, without a GPU, that PlaneTile's four operand orientations
give A B and that the padded planes are conflict-free.

The per-lane address expressions are read from m3_planes.cuh itself (load_a and load_b_pair: the
row and column arguments of their plane_address calls, C++ integer expressions that Python
evaluates alike), so the model checks the header's text, not a copy of it.

    python3 methods/bank_model/planes_fragment_model.py
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np


def plane_ld(cols: int) -> int:
    """PlaneShape::kLd: rows COLS + 8 bf16 elements apart."""
    return cols + 8


HEADER = Path(__file__).resolve().parents[2] / "kernel_src" / "m3_planes.cuh"


def _call_arguments(text: str, start: int) -> list[str]:
    """The top-level comma-separated arguments of the call whose '(' is at text[start]."""
    depth, args, cur = 0, [], ""
    for ch in text[start:]:
        if ch == "(":
            depth += 1
            if depth == 1:
                continue
        elif ch == ")":
            depth -= 1
            if depth == 0:
                args.append(cur.strip())
                return args
        if ch == "," and depth == 1:
            args.append(cur.strip())
            cur = ""
        else:
            cur += ch
    raise ValueError("unbalanced call")


def header_addresses(text: str | None = None) -> dict:
    """{(function, trans): (row expression, column expression)} from the plane_address calls of
    load_a and load_b_pair: the first in each body is the kTrans branch, the second the plain one."""
    text = HEADER.read_text() if text is None else text
    out = {}
    for fn in ("load_a", "load_b_pair"):
        body = text[text.index(f"M3_DEV void {fn}("):]
        body = body[:body.index("\n}\n")]
        calls = [m.end() - 1 for m in re.finditer(r"plane_address\(", body)]
        if len(calls) != 2:
            raise ValueError(f"{fn}: expected two plane_address calls, found {len(calls)}")
        for trans, at in zip((True, False), calls):
            _, _, row, col = _call_arguments(body, at)
            out[(fn, trans)] = (row, col)
    return out


_ADDRESSES = header_addresses()


def _evaluate(fn: str, trans: bool, **names) -> tuple[int, int]:
    row, col = _ADDRESSES[(fn, trans)]
    return eval(row, {}, names), eval(col, {}, names)  # noqa: S307 (the project's own header)


# --- m3_planes.cuh's per-lane addresses (row, col) of the 16-byte row an ldmatrix.x4 lane names ---
def load_a_address(trans: bool, m: int, k: int, lane: int) -> tuple[int, int]:
    return _evaluate("load_a", trans, m=m, k=k, lane=lane)


def load_b_pair_address(trans: bool, n: int, k: int, lane: int) -> tuple[int, int]:
    return _evaluate("load_b_pair", trans, n=n, k=k, lane=lane)


# --- the hardware, as the PTX ISA specifies it ---
def ldmatrix_x4(plane: np.ndarray, addresses: list[tuple[int, int]], trans: bool) -> np.ndarray:
    """regs[lane][i] = the two elements lane receives of matrix i (lanes 8 i .. 8 i + 7 name its
    rows). Plain: row lane / 4, columns 2 (lane % 4) and + 1. Trans: rows 2 (lane % 4) and + 1 of
    column lane / 4."""
    regs = np.zeros((32, 4, 2), dtype=plane.dtype)
    for i in range(4):
        block = np.stack([plane[r, c:c + 8] for r, c in addresses[8 * i:8 * i + 8]])  # 8 x 8
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            regs[lane, i] = block[g, 2 * t:2 * t + 2] if not trans else block[2 * t:2 * t + 2, g]
    return regs


def mma_m16n8k16(d: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """d[lane] (4 floats) += A B for the fragments a[lane] (4 pairs) and b[lane] (2 pairs):
    A rows g and g + 8, k pairs 2 t and 2 t + 8; B columns g, k pairs 2 t and 2 t + 8; D rows g and
    g + 8, columns 2 t and 2 t + 1."""
    A = np.zeros((16, 16))
    B = np.zeros((16, 8))
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        A[g, 2 * t:2 * t + 2] = a[lane, 0]
        A[g + 8, 2 * t:2 * t + 2] = a[lane, 1]
        A[g, 2 * t + 8:2 * t + 10] = a[lane, 2]
        A[g + 8, 2 * t + 8:2 * t + 10] = a[lane, 3]
        B[2 * t:2 * t + 2, g] = b[lane, 0]
        B[2 * t + 8:2 * t + 10, g] = b[lane, 1]
    D = A @ B
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        d[lane] += [D[g, 2 * t], D[g, 2 * t + 1], D[g + 8, 2 * t], D[g + 8, 2 * t + 1]]


def bank_wavefronts(ld: int, addresses: list[tuple[int, int]]) -> int:
    """Shared-memory wavefronts of one ldmatrix.x4: per matrix, its 8 rows of 16 bytes fall on
    16-byte groups (address / 16) mod 8; rows sharing a group serialise."""
    total = 0
    for i in range(4):
        groups = [((r * ld + c) * 2 // 16) % 8 for r, c in addresses[8 * i:8 * i + 8]]
        total += max(groups.count(x) for x in set(groups))
    return total


def plane_tile_product(a: np.ndarray, b: np.ndarray, a_trans: bool, b_trans: bool) -> tuple[np.ndarray, int, int]:
    """PlaneTile<M, N, K, a_trans, b_trans, kPlain>::mac over 8 warps laid out 2 x 4, for A (M x K)
    and B (K x N) given mathematically; the planes hold them as stored. Returns D, the ldmatrix
    wavefronts and the conflict-free minimum."""
    M, K = a.shape
    N = b.shape[1]
    a_stored = a.T if a_trans else a
    b_stored = b if b_trans else b.T
    lda, ldb = plane_ld(a_stored.shape[1]), plane_ld(b_stored.shape[1])
    a_plane = np.zeros((a_stored.shape[0], lda))
    a_plane[:, :a_stored.shape[1]] = a_stored
    b_plane = np.zeros((b_stored.shape[0], ldb))
    b_plane[:, :b_stored.shape[1]] = b_stored
    WM, WN = M // 2, N // 4
    MT, NTL = WM // 16, WN // 8
    D = np.zeros((M, N))
    wavefronts = minimum = 0
    for warp in range(8):
        m0, n0 = (warp >> 2) * WM, (warp & 3) * WN
        acc = np.zeros((MT, NTL, 32, 4))
        for k in range(0, K, 16):
            af = []
            for i in range(MT):
                adr = [load_a_address(a_trans, m0 + 16 * i, k, lane) for lane in range(32)]
                af.append(ldmatrix_x4(a_plane, adr, a_trans))
                wavefronts += bank_wavefronts(lda, adr)
                minimum += 4
            bf = []
            for j in range(NTL // 2):
                adr = [load_b_pair_address(b_trans, n0 + 16 * j, k, lane) for lane in range(32)]
                bf.append(ldmatrix_x4(b_plane, adr, b_trans))
                wavefronts += bank_wavefronts(ldb, adr)
                minimum += 4
            for i in range(MT):
                for j in range(NTL):
                    o = (j & 1) << 1
                    mma_m16n8k16(acc[i, j], af[i], bf[j >> 1][:, o:o + 2])
        for i in range(MT):
            for j in range(NTL):
                for lane in range(32):
                    g, t = lane >> 2, lane & 3
                    for h in range(2):
                        r, c = m0 + 16 * i + g + 8 * h, n0 + 8 * j + 2 * t
                        D[r, c:c + 2] = acc[i, j, lane, 2 * h:2 * h + 2]
    return D, wavefronts, minimum


def check(M: int = 64, N: int = 128, K: int = 32, seed: int = 1) -> dict:
    """Max error of every orientation against A @ B, and its wavefronts against the minimum."""
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((M, K)), rng.standard_normal((K, N))
    out = {}
    for a_trans in (False, True):
        for b_trans in (False, True):
            d, wf, minimum = plane_tile_product(a, b, a_trans, b_trans)
            out[(a_trans, b_trans)] = (float(np.abs(d - a @ b).max()), wf, minimum)
    return out


if __name__ == "__main__":
    for shape in ((64, 128, 32), (32, 128, 64), (32, 64, 128)):
        for (at, bt), (err, wf, minimum) in check(*shape).items():
            print(f"M, N, K = {shape}, a{'t' if at else ''} b{'t' if bt else ''}: "
                  f"max error {err:.1e}, wavefronts {wf} (minimum {minimum})")


# The product core's operands (kernel_src/m3_planes_core.cuh): (name, M, N, K, planes of A, of B).
CORE_PRODUCTS = [("scores", 32, 32, 128, 2, 2), ("dM", 32, 32, 64, 2, 1),
                 ("dqr intra", 32, 128, 32, 2, 2), ("dqr inter", 32, 128, 64, 2, 2), ("U", 64, 128, 32, 2, 2),
                 ("dks intra", 32, 128, 32, 2, 2), ("dks state", 32, 128, 64, 1, 2),
                 ("dv intra", 32, 64, 32, 1, 1), ("dv state", 32, 64, 128, 2, 1)]


def _core_wavefronts(warp_tile_of) -> int:
    """Shared wavefronts of the core's operand reads a job, each product cut into warp tiles of
    warp_tile_of(m, n) = (rows, columns), each warp loading its own A and B fragments by
    ldmatrix.x4 (4 conflict-free wavefronts each; per 16-deep step, rows/16 A blocks and
    columns/16 B pairs a plane)."""
    total = 0
    for _, m, n, k, pa, pb in CORE_PRODUCTS:
        wm, wn = warp_tile_of(m, n)
        total += (m // wm) * (n // wn) * (k // 16) * (wm // 16 * pa + wn // 16 * pb) * 4
    return total


def core_operand_wavefronts(warp_tile: tuple[int, int] | None) -> int:
    """The core's operand wavefronts a job with every product in warp tiles of warp_tile; None:
    each operand plane read once, 128 bytes a wavefront, as a warpgroup product from shared memory
    would."""
    if warp_tile is None:
        return sum((m * k * pa + k * n * pb) * 2 // 128 for _, m, n, k, pa, pb in CORE_PRODUCTS)
    return _core_wavefronts(lambda m, n: (min(warp_tile[0], m), min(warp_tile[1], n)))


def core_as_built_wavefronts() -> int:
    """As m3_planes_core.cuh cuts them: 16 x 16 warp tiles for the two 32 x 32 products (four
    warps each), the 2 x 4 layout of eight warps for the rest."""
    return _core_wavefronts(lambda m, n: (16, 16) if m == n == 32 else (m // 2, n // 4))
