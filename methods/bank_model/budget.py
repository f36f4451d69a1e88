"""The rewrite's L1 wavefront budget per job, as the design note counts it (chunks of 64 on wgmma).

Counted, not measured: one wavefront per 128 bytes a warpgroup product reads from shared memory (run
87: 515 for a 64 x 64 x 128 product with both fp32 operands there, 261 with A in registers), one per
128 bytes of conflict-free stores (the bank model beside this file checks the mappings), fp32 tiles.
Today's figures are run 86's (ncu, c01, v104: 4,768 jobs of 32 tokens). Run:
    python3 methods/bank_model/budget.py
"""
from __future__ import annotations

C, N, P = 64, 128, 64  # tokens a chunk, state columns, value columns
F = 4  # bytes of an fp32 operand


def wf(nbytes: float) -> float:
    return nbytes / 128


def tile(rows: int, cols: int) -> int:
    return rows * cols * F


FORWARD = {
    "scores qr ks^T (QR and KS read)": wf(tile(C, N) + tile(C, N)),
    "y_intra^T = v^T M^T (v^T in registers, M read)": wf(tile(C, C)),
    "y_inter^T = Z qr^T (Z in registers, QR read)": wf(tile(C, N)),
    "U = (w v)^T ks (in registers, KS^T read)": wf(tile(N, C)),
    "staging QR, KS, KS^T, M (stores)": wf(3 * tile(C, N) + tile(C, C)),
    "Z_j in, Z_j+1 out (workspace, 512 contiguous bytes a warp)": wf(2 * tile(P, N)),
    "epilogue (z, dout read transposed; output, dz by stmatrix)": 320,
    "q, k rows from L2 (bf16, 16-byte loads)": wf(2 * C * N * 2),
    "angles, decays, gates, scans": 200,
}
KST_SECOND_PASS = {"shuffles": 0, "read back from KS (2-way)": 512}

BACKWARD_PRODUCT_BYTES = {  # operands read once each (SS), transposed copies where tf32 needs them
    "scores": tile(C, N) * 2,
    "dM = dy v^T": tile(C, P) * 2,
    "dqr intra (G, KS^T)": tile(C, C) + tile(N, C),
    "dks intra (G^T, QR^T)": tile(C, C) + tile(N, C),
    "dv intra (M^T, dY^T)": tile(C, C) + tile(P, C),
    "dks state (V, dS^T)": tile(C, P) + tile(N, P),
    "dv state (KS, dS)": tile(C, N) + tile(P, N),
    "dqr inter (dY, S_j^T)": tile(C, P) + tile(N, P),
    "dS update ((e dY)^T, QR^T)": tile(P, C) + tile(N, C),
}
BACKWARD_TILE_WRITES = (4 * tile(C, N) + 7 * tile(C, C) + 3 * tile(P, N))  # qr, ks, their transposes; 16 KB tiles; states
BACKWARD_EPILOGUES = 1000

# v119 as built (kernel_src/m3_forward64.cuh), counted by hand from its code per job of 64 tokens:
# shared-memory wavefronts (the bank model's floor unless noted), then global ones at 128 bytes each.
V119_SHARED = {
    "QR, KS stores (16-byte, conflict-free)": wf(2 * tile(C, N)),
    "angle tile written, read by the staging": 128,
    "v tile (bf16) stores": wf(C * P * 2),
    "KS^T: read back from KS (2-way) and stored": 512 + wf(tile(N, C)),
    "U: KS^T read by the products": wf(tile(N, C)),
    "U: register operands (v bf16 and weights, scalar loads, 48 a thread)": 8 * 48,
    "scores: QR read by both warpgroups, KS once": wf(2 * tile(C, N) + tile(C, N)),
    "M: stores (2-way) and the decays' loads": 128 + 128,
    "y inter: QR read (each warpgroup its 64 columns)": wf(tile(C, N)),
    "y: decay loads, intra operands (16 a thread), M's diagonal blocks": 128 + 8 * 16 + wf(2 * tile(32, 32)),
    "y tiles: accumulator stores, epilogue reads; v reads": wf(2 * tile(C, P)) * 2 + wf(C * P * 2),
}
V119_GLOBAL = {
    "chain: Z_j in, Z_end out (fragment order)": wf(2 * tile(P, N)),
    "row-major states for the backward (Z_mid, Z_end)": wf(2 * tile(P, N)),
    "Z_j read again for y": wf(tile(P, N)),
    "q, k rows; v; z, dout; output, dz": wf(2 * C * N * 2 + C * P * 2 * 5),
}

# The chain-free backward the design note proposes, split over two CTAs per 64-token job, and the
# forward's V_j: counted by hand from the design (no code yet), the same conventions.
SPLIT_DQR_SIDE = {
    "staging QR, KS (stores); KS^T read back and stored": wf(2 * tile(C, N)) + 768,
    "v (fp32) and dy tiles, angle tile": wf(2 * tile(C, P)) + 128,
    "scores (QR by both warpgroups, KS once)": wf(3 * tile(C, N)),
    "dM = dy v^T (dy operands by scalar loads, v read)": 256 + wf(tile(C, P)) / 2,
    "dM * W tile (stores, two-way) and dc's sums": 256 + 64,
    "dqr^T inter (dy read) and intra (KS^T, dM * W read)": wf(tile(C, P)) + wf(tile(N, C)) + 128,
    "qr in the accumulator's layout (u, the rotation), angles for the inverse rotation": 512 + 256,
    "dqh out through shared memory (transposed to rows of tokens)": 256,
}
SPLIT_DQR_GLOBAL = {"S_h^T of both halves in": wf(2 * tile(P, N)), "q, k, v, z, dout rows; dqh out": 512}
SPLIT_DKS_DV_SIDE = {
    "staging QR, KS; QR^T read back and stored": wf(2 * tile(C, N)) + 768,
    "v, dy, dy^T tiles (dy^T by a transposing pass)": wf(3 * tile(C, P)) + 256,
    "transposed scores S^T = KS QR^T": wf(3 * tile(C, N)),
    "dM^T = v dy^T, (dM * W)^T tile": 384 + 256,
    "dks^T intra (QR^T, (dM * W)^T read) and state (v read)": wf(tile(N, C)) + 128 + wf(tile(C, P)),
    "dv intra (dy^T read) and state (KS read; dS by bulk copy)": wf(tile(P, C)) + wf(tile(C, N)),
    "epilogues: dsc, dkr, inverse rotation, dkh out transposed, dv out": 1000,
}
SPLIT_DKS_DV_GLOBAL = {"dS^T in (registers), dS by bulk copy (no LSU)": wf(tile(P, N)), "rows in, dkh and dv out": 640}
FORWARD_VJ = {"QR^T built after U (read back, stored)": 768, "dy tile and its operands": 128 + 256,
              "the product's B reads (QR^T)": wf(tile(N, C)), "V_j out (global)": wf(tile(P, N))}

# v121's q side as built (kernel_src/m3_backward64q.cuh, dq only: no scores, no dc or dphi terms yet),
# counted by hand from its code per job of 64 tokens, the same conventions.
V121Q_SHARED = {
    "angle tile written, read by the staging": 128,
    "QR, KS stores (16-byte, conflict-free)": wf(2 * tile(C, N)),
    "dy, v tiles (fp32, 16-byte stores)": wf(2 * tile(C, P)),
    "dM = dy v^T: dy read by both warpgroups, v once": wf(2 * tile(C, P) + tile(C, P)),
    "dM W: stores (8-byte, two-way) and the decays' loads": 2 * wf(tile(C, C) / 2) + 64,
    "dqr^T inter: dy read (each warpgroup both halves)": wf(2 * tile(C, P)),
    "dqr^T intra: dM W read; KS^T operands from KS (8-byte, two-way)": wf(2 * tile(C, C) / 2) + 2 * wf(tile(C, N)),
    "epilogue: e, angle, dy . v and gamma loads": 192,
}
V121Q_GLOBAL = {
    "S_h of both halves (row-major, 8-byte loads in full sectors)": wf(2 * tile(P, N)),
    "dqh out (8-byte stores, full sectors)": wf(tile(C, N)),
    "q, k, v, z, dout rows (bf16); k pairs again in the epilogue": wf(2 * C * N * 2 + 3 * C * P * 2) + wf(C * N * 2),
}

# v123's k/v side as built (kernel_src/m3_backward64kv.cuh: dk and dv with the chain, no dc or dphi
# terms and no tail yet), counted by hand from its code per job of 64 tokens, the same conventions;
# two-way accesses by the bank model (methods/bank_model/sw128_banks.py) counted twice.
V123KV_SHARED = {
    "angle tile written, read by the staging": 128,
    "QR, KS stores (16-byte, conflict-free)": wf(2 * tile(C, N)),
    "dy, v tiles (fp32, 16-byte stores)": wf(2 * tile(C, P)),
    "e dy^T: dy read, the permuted tile written (both conflict-free)": wf(2 * tile(C, P)),
    "S^T = KS QR^T: KS read by both warpgroups, QR once": wf(2 * tile(C, N) + tile(C, N)),
    "dM^T = v dy^T: v read by both warpgroups, dy once": wf(2 * tile(C, P) + tile(C, P)),
    "M^T, (dM W)^T: stores (8-byte, two-way) and the decays' loads": 2 * wf(2 * tile(C, C) / 2) + 64,
    "V^T of both halves: QR^T operands from QR (two-way), e dy^T read": 2 * wf(tile(C, N)) + wf(2 * tile(P, C)),
    "G tiles [p][n] from the registers (8-byte, two-way)": 2 * wf(2 * tile(P, N)),
    "dks^T: v read; QR^T operands (two-way); (dM W)^T read": wf(2 * tile(C, P)) + 2 * wf(tile(C, N)) + wf(2 * tile(C, C) / 2),
    "dk epilogue: sc, w, angle, dy . v and gamma loads": 192,
    "dv^T: G tiles and KS read; dy^T operands (two-way); M^T read": wf(2 * tile(P, N) + tile(C, N)) + 256 + wf(tile(C, C) / 2),
    "dv epilogue: dy and skip loads": 256,
}
V123KV_GLOBAL = {
    "chain: the successor's G in, the hand-off out (accumulator layout)": wf(2 * tile(P, N)),
    "dkh out (8-byte stores, full sectors)": wf(tile(C, N)),
    "dv out (2-byte stores, half-filled sectors)": 2 * wf(C * P * 2),
    "q, k, v, z, dout rows (bf16); q pairs again in the epilogue": wf(2 * C * N * 2 + 3 * C * P * 2) + wf(C * N * 2),
}

# v125 (kernel_src/m3_backward64.cuh): the k/v side's job plus the q side's phases without their
# staging, plus the terms and v103's tail; the last two estimated from the code (not itemized to
# the instruction as the sides are), per job of 64 tokens.
V125_Q_PHASES = {
    "dqr^T inter and intra (the q side's, less its staging)": wf(2 * tile(C, P)) + wf(2 * tile(C, C) / 2) + 2 * wf(tile(C, N)),
    "dq epilogue loads; S_h of both halves in; dqh out; k pairs": 192 + wf(2 * tile(P, N)) + wf(tile(C, N)) + wf(C * N * 2),
}
V125_TERMS_AND_TAIL = {
    "u: qr pairs from the QR tile (two-way), twice with dphi's": 2 * 2 * wf(tile(C, N)) * 3 // 4,
    "dM W untransposed (4-byte stores), G's sums, partials": wf(2 * tile(C, C) / 2) * 2 + 128,
    "dsc's k pairs (global), x's v loads (4-byte)": wf(C * N * 2) + 128,
    "dphi tiles (two halves, written and added)": 256,
    "da: the forward's states again (global, L1 hits mostly)": wf(2 * tile(P, N)),
    "th staged from the angles; v103's tail on each half": wf(C * 32 * 2) + 64 + 2 * 300,
}

TODAY_PER_32 = {"forward": 8636, "backward": 20566}  # run 86: all LSU wavefronts per job of 32 tokens
SHARE_US = {"forward": 25, "backward": 60}  # of c01's 100 us at 300x
JOBS_32, SMS = 4768, 132


def main() -> None:
    fwd = sum(FORWARD.values())
    print("forward, wavefronts a job of 64 tokens:")
    for k, v in FORWARD.items():
        print(f"  {k:62s} {v:6.0f}")
    for how, extra in KST_SECOND_PASS.items():
        print(f"  total with KS^T's token-major pass by {how:26s} {fwd + extra:6.0f}")
    bwd_products = wf(sum(BACKWARD_PRODUCT_BYTES.values()))
    bwd = bwd_products + wf(BACKWARD_TILE_WRITES) + BACKWARD_EPILOGUES
    print(f"backward: products {bwd_products:.0f} ({sum(BACKWARD_PRODUCT_BYTES.values()) / 1024:.0f} KB), tile writes "
          f"{wf(BACKWARD_TILE_WRITES):.0f} ({BACKWARD_TILE_WRITES / 1024:.0f} KB), epilogues {BACKWARD_EPILOGUES}: {bwd:.0f}")
    for name, per64 in (("forward", fwd), ("forward, KS^T read back", fwd + 512), ("backward", bwd)):
        key = name.split(",")[0]
        per32 = per64 / 2
        # an assumed SM clock of 1.75 to 1.98 GHz (not measured: ncu ran at 1.38 GHz under clock control)
        budget = [SHARE_US[key] * 1e-6 * SMS / JOBS_32 * ghz * 1e9 for ghz in (1.75, 1.98)]
        print(f"{name}: {per32:.0f} per 32 tokens against {TODAY_PER_32[key]} today "
              f"({TODAY_PER_32[key] / per32:.1f}x fewer); budget at 300x {budget[0]:.0f} to {budget[1]:.0f}")
    shared, glob = sum(V119_SHARED.values()), sum(V119_GLOBAL.values())
    print("v119 as built, wavefronts a job of 64 tokens (counted from the code, not measured):")
    for k, v in list(V119_SHARED.items()) + list(V119_GLOBAL.items()):
        print(f"  {k:72s} {v:6.0f}")
    print(f"  shared {shared:.0f}, global {glob:.0f}: {(shared + glob) / 2:.0f} per 32 tokens against "
          f"{TODAY_PER_32['forward']} today ({TODAY_PER_32['forward'] / ((shared + glob) / 2):.1f}x fewer)")

    q_shared, q_glob = sum(V121Q_SHARED.values()), sum(V121Q_GLOBAL.values())
    print("v121's q side as built (dq only), wavefronts a job of 64 tokens (counted from the code, not measured):")
    for k, v in list(V121Q_SHARED.items()) + list(V121Q_GLOBAL.items()):
        print(f"  {k:72s} {v:6.0f}")
    print(f"  shared {q_shared:.0f}, global {q_glob:.0f}: {(q_shared + q_glob) / 2:.0f} per 32 tokens")

    kv_shared, kv_glob = sum(V123KV_SHARED.values()), sum(V123KV_GLOBAL.values())
    print("v123's k/v side as built (dk, dv, the chain), wavefronts a job of 64 tokens (counted from the code):")
    for k, v in list(V123KV_SHARED.items()) + list(V123KV_GLOBAL.items()):
        print(f"  {k:72s} {v:6.0f}")
    print(f"  shared {kv_shared:.0f}, global {kv_glob:.0f}: {(kv_shared + kv_glob) / 2:.0f} per 32 tokens; with the q side "
          f"{(q_shared + q_glob + kv_shared + kv_glob) / 2:.0f} per 32 tokens against the backward's {TODAY_PER_32['backward']} "
          f"today (before the tail's terms, which v103's backward still computes in v123)")

    v125 = kv_shared + kv_glob + sum(V125_Q_PHASES.values()) + sum(V125_TERMS_AND_TAIL.values())
    print("v125, the whole backward in one kernel, wavefronts a job of 64 tokens (the k/v side's job plus):")
    for k, v in list(V125_Q_PHASES.items()) + list(V125_TERMS_AND_TAIL.items()):
        print(f"  {k:72s} {v:6.0f}")
    print(f"  in all about {v125:.0f}: {v125 / 2:.0f} per 32 tokens against the backward's {TODAY_PER_32['backward']} "
          f"today ({TODAY_PER_32['backward'] / (v125 / 2):.1f}x fewer; the terms and the tail estimated)")

    dqr = sum(SPLIT_DQR_SIDE.values()) + sum(SPLIT_DQR_GLOBAL.values())
    dks = sum(SPLIT_DKS_DV_SIDE.values()) + sum(SPLIT_DKS_DV_GLOBAL.values())
    vj = sum(FORWARD_VJ.values())
    print("chain-free backward, split over two CTAs, wavefronts a job of 64 tokens (counted from the design):")
    for k, v in list(SPLIT_DQR_SIDE.items()) + list(SPLIT_DQR_GLOBAL.items()):
        print(f"  dqr side: {k:62s} {v:6.0f}")
    for k, v in list(SPLIT_DKS_DV_SIDE.items()) + list(SPLIT_DKS_DV_GLOBAL.items()):
        print(f"  dks/dv side: {k:59s} {v:6.0f}")
    print(f"  dqr side {dqr:.0f}, dks/dv side {dks:.0f}; the forward's V_j {vj:.0f}")
    total32 = (shared + glob + vj + dqr + dks) / 2
    today32 = TODAY_PER_32["forward"] + TODAY_PER_32["backward"]
    print(f"forward (v119 + V_j) and backward per 32 tokens: {total32:.0f} against {today32} today "
          f"({today32 / total32:.1f}x fewer)")


if __name__ == "__main__":
    main()
