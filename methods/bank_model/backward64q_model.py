"""A CPU model of v121's q-side backward job (kernel_src/m3_backward64q.cuh), index for index.

Why: as for the forward (forward64_model.py, whose staging and wgmma operand model this reuses),
the kernel cannot run here, and its risks are index schemes: the dy and v tiles and the dM W tiles
read through wgmma descriptors at sub-tile offsets, the register operands taken straight from the
forward's row-major states and from the KS tile with the rows ordered so that each thread holds a
rotary pair, the accumulator's token columns, and the ws_dqh and bias-partial slots. The model
executes the job's phases thread by thread with the kernel's index expressions (each block names
the kernel function it mirrors), on the states that the forward's model hands on, and compares
every token's per-head dq and every chunk's dq_bias partial with the float64 decomposition of
backward64_model.py. It checks the kernel's scheme, not the compiled kernel: the GPU tests remain
the proof.

Run: python3 methods/bank_model/backward64q_model.py [--heads H] [--lens L1,L2,...]
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import backward64_model as b64  # noqa: E402
import forward64_model as f64  # noqa: E402
from forward64_model import (A, C, JOB, N, P, PHI_STRIDE, a_from_registers, f32, kstep, read_operand,  # noqa: E402
                             rel, sigmoid, stage_job, wgmma)
from sw128_banks import sw128_index  # noqa: E402

K_QR, K_KS, K_DY, K_VT, K_PHI = 0, 32768, 65536, 81920, 98304  # byte offsets (m3b64q enum)
# The register operand's words (a0, a1, a2, a3) as the kernel passes them to the rs product, by
# position in (A(r, k), A(r + 8, k), A(r, k + 4), A(r + 8, k + 4)); a test swaps two to see the model fail.
FRAG_ORDER = (0, 1, 2, 3)


def thread(x):
    """(warp wq, g, i) of thread x of a warpgroup, lane = 4 g + i."""
    wq, lane = x // 32, x % 32
    return wq, lane // 4, lane % 4


def own_half_rows(wg):
    """The entries of a warpgroup's m64n32 accumulator over half wg's columns whose rows lie in the
    same half: (thread, register index of the column pair, row, its first column)."""
    for x in range(128):
        wq, g, i = thread(x)
        for jb in range(4):
            for hh in range(2):
                r, c = 16 * wq + g + 8 * hh, 32 * wg + 8 * jb + 2 * i
                if (r >> 5) == wg:
                    yield x, 4 * jb + 2 * hh, r, c


def quad_sums(rows, partials, wg, half, length, first_token, h, chunk_row):
    """The bias partials of a half, as each quad's lane i == 0 writes them: the quad's tokens'
    rows[(token, head, n0)] pairs summed (float64 here), once per (chunk, head, n0)."""
    for x in range(0, 128, 4):
        wq, g, _ = thread(x)
        n0 = row_of(wg, wq, g)
        b = np.zeros(2, np.float64)
        for i in range(4):
            for jb in range(4):
                for e in range(2):
                    t = 32 * half + 8 * jb + 2 * i + e
                    if t < length:
                        b += rows[(first_token + t, h, n0)]
        key = (chunk_row, h, n0)
        assert key not in partials, f"partial {key} written twice"
        partials[key] = b.astype(f32)


def row_of(wg, wq, g):
    """The first of the two state columns n0, n0 + 1 that thread (wq, g) of warpgroup wg holds as
    accumulator rows 16 wq + g and + 8 (dqr_half)."""
    return 64 * wg + 16 * wq + 2 * g


def stage_dy_v(inp, smem, first_token, length, h):
    """m3b64q::stage_dy_v: dy = dout z sigmoid(z) and v as fp32 swizzled tiles at K_DY and K_VT;
    returns dy . v per token."""
    dyv = np.zeros(JOB, f32)
    for t in range(JOB):
        dy = np.zeros(P, f32)
        vv = np.zeros(P, f32)
        if t < length:
            tg = first_token + t
            vv = inp.v[tg, h].astype(f32)
            zz = inp.z[tg, h].astype(f32)
            dy = (inp.dout[tg, h] * zz * sigmoid(zz)).astype(f32)
        dyv[t] = f32(np.dot(dy.astype(np.float64), vv.astype(np.float64)))
        for pc in range(0, P, 4):
            smem[K_DY // 4 + sw128_index(JOB, t, pc): K_DY // 4 + sw128_index(JOB, t, pc) + 4] = dy[pc:pc + 4]
            smem[K_VT // 4 + sw128_index(JOB, t, pc): K_VT // 4 + sw128_index(JOB, t, pc) + 4] = vv[pc:pc + 4]
    return dyv


def run_job(inp, carries, ws_states, ws_dqh, partials, seq, rnd, h, chunk_base, terms=None):
    """One job; with `terms` (the whole backward, v125) also u[(token, head)] and the q half of
    dphi[(token, head, pair)] as the kernel's kTerms path computes them."""
    H = inp.H
    start, slen = inp.cu[seq], inp.cu[seq + 1] - inp.cu[seq]
    a = rnd * JOB
    length = min(JOB, slen - a)
    slot0 = chunk_base + 2 * rnd
    capacity = inp.T // C + inp.S

    def in_range(chunk, what, spare=0):
        assert 0 <= chunk < capacity + spare, f"{what}: chunk {chunk} outside the workspace's {capacity + spare}"

    smem = np.zeros(K_PHI // 4 + JOB * PHI_STRIDE, f32)
    vec, _, _, _ = stage_job(inp, carries, seq, rnd, h, chunk_base, smem, K_PHI, in_range)

    dyv = stage_dy_v(inp, smem, start + a, length, h)

    # dM of half wg's keys, then dM W over v's tile (after both warpgroups' products)
    dm = [[np.zeros(16, f32) for _ in range(128)] for _ in range(2)]
    for wg in range(2):
        for k in range(P // 8):
            wgmma(dm[wg], 32, read_operand(smem, kstep(K_DY, JOB, k), 64),
                  read_operand(smem, kstep(K_VT + 4096 * wg, JOB, k), 32))
    cl = vec["cl"]
    for wg in range(2):
        for x, k, t, sc in own_half_rows(wg):
            for e in range(2):
                sk = sc + e
                w = np.exp(cl[t] - cl[sk], dtype=f32) * dm[wg][x][k + e] if (sk <= t and t < length) else f32(0)
                smem[K_VT // 4 + 1024 * wg + sw128_index(32, t - 32 * wg, sc - 32 * wg) + e] = w

    for h2 in range(2):
        if 32 * h2 >= length:
            break
        key = (slot0 + h2, h)
        if not (h2 == 0 and rnd == 0):
            in_range(slot0 + h2, "ws_states read")
            assert key in ws_states, f"job ({seq}, {rnd}, {h}) reads a state nobody wrote: {key}"
        st = None if (h2 == 0 and rnd == 0) else ws_states[key]
        for wg in range(2):
            # dqr_half: the inter part, A = S^T from the row-major state
            acc = [np.zeros(16, f32) for _ in range(128)]
            for k in range(8):
                frags = []
                for x in range(128):
                    wq, lane = x // 32, x % 32
                    g, i = lane // 4, lane % 4
                    n0 = row_of(wg, wq, g)
                    if st is None:
                        frags.append((0, 0, 0, 0))
                    else:
                        w = (st[8 * k + i, n0], st[8 * k + i, n0 + 1], st[8 * k + i + 4, n0], st[8 * k + i + 4, n0 + 1])
                        frags.append(tuple(w[j] for j in FRAG_ORDER))
                wgmma(acc, 32, a_from_registers(frags), read_operand(smem, kstep(K_DY + 4096 * h2, JOB, k), 32))
            for x in range(128):
                i = x % 4
                for jb in range(4):
                    for e in range(2):
                        et = vec["e"][32 * h2 + 8 * jb + 2 * i + e]
                        acc[x][4 * jb + e] *= et
                        acc[x][4 * jb + 2 + e] *= et
            if terms is not None:  # u: qr . (the inter part), this thread's pair
                for x in range(128):
                    wq, lane = x // 32, x % 32
                    g, i = lane // 4, lane % 4
                    n0 = row_of(wg, wq, g)
                    for jb in range(4):
                        for e in range(2):
                            t = 32 * h2 + 8 * jb + 2 * i + e
                            q = K_QR // 4 + sw128_index(JOB, t, n0)
                            key = (start + a + t, h)
                            terms["u"][key] = terms["u"].get(key, 0.0) + float(smem[q] * acc[x][4 * jb + e] + smem[q + 1] * acc[x][4 * jb + 2 + e])
            # the intra part, A = KS^T from the KS tile
            for k in range(4):
                frags = []
                for x in range(128):
                    wq, lane = x // 32, x % 32
                    g, i = lane // 4, lane % 4
                    n0, s0 = row_of(wg, wq, g), 32 * h2 + 8 * k + i
                    lo = K_KS // 4 + sw128_index(JOB, s0, n0)
                    hi = K_KS // 4 + sw128_index(JOB, s0 + 4, n0)
                    w = (smem[lo], smem[lo + 1], smem[hi], smem[hi + 1])
                    frags.append(tuple(w[j] for j in FRAG_ORDER))
                wgmma(acc, 32, a_from_registers(frags), read_operand(smem, kstep(K_VT + 4096 * h2, 32, k), 32))
            # dqh_epilogue
            row = slot0 + h2
            in_range(row, "ws_partial row")
            for x in range(128):
                wq, lane = x // 32, x % 32
                g, i = lane // 4, lane % 4
                n0 = row_of(wg, wq, g)
                pair = n0 >> 1
                kb = inp.k_bias[h, n0:n0 + 2]
                for jb in range(4):
                    for e in range(2):
                        t = 32 * h2 + 8 * jb + 2 * i + e
                        if t >= length:
                            continue
                        d0, d1 = acc[x][4 * jb + e], acc[x][4 * jb + 2 + e]
                        u0, u1 = d0, d1
                        if pair < A:
                            ph = smem[K_PHI // 4 + t * PHI_STRIDE + pair]
                            sn, cs = f32(math.sin(ph)), f32(math.cos(ph))
                            u0, u1 = d0 * cs + d1 * sn, -d0 * sn + d1 * cs
                            if terms is not None:
                                q = K_QR // 4 + sw128_index(JOB, t, n0)
                                terms["dphi"][(start + a + t, h, pair)] = float(smem[q] * d1 - smem[q + 1] * d0)
                        tg = start + a + t
                        k0, k1 = inp.k[tg, n0] + kb[0], inp.k[tg, n0 + 1] + kb[1]
                        gt = -dyv[t] * vec["gam"][t]
                        key = (tg, h, n0)
                        assert key not in ws_dqh, f"ws_dqh {key} written twice"
                        ws_dqh[key] = (f32(gt * k0 + u0), f32(gt * k1 + u1))
            quad_sums(ws_dqh, partials, wg, h2, length, start + a, h, row)


def model_backward64q(case):
    """ws_dqh as {(token, head, n0): (dqh[n0], dqh[n0 + 1])} and the dq_bias partials as
    {(chunk, head, n0): 2 floats}, every job of the job table run once."""
    _, ws_states, chunk_base = f64.model_forward(case)
    inp = f64.Inputs(case)
    carries = f64.angle_carries(inp)
    ws_dqh, partials = {}, {}
    for seq, rnd in f64.schedule(inp.cu, JOB):
        for h in range(inp.H):
            run_job(inp, carries, ws_states, ws_dqh, partials, seq, rnd, h, chunk_base[seq])
    return ws_dqh, partials, chunk_base


def compare(case):
    """rel-L2 of ws_dqh and of the partials against the float64 decomposition; raises if a slot the
    backward's consumers read was never written."""
    ws_dqh, partials, chunk_base = model_backward64q(case)
    extras = {}
    b64.backward_model(case, extras)
    want = extras["dqh"].numpy()  # [T][H][N]
    T, H = want.shape[0], want.shape[1]
    got = np.zeros_like(want)
    for (t, h, n0), (x0, x1) in ws_dqh.items():
        got[t, h, n0], got[t, h, n0 + 1] = x0, x1
    assert len(ws_dqh) == T * H * N // 2, f"ws_dqh: {len(ws_dqh)} pairs written, {T * H * N // 2} expected"
    cu = case["cu_seqlens"].tolist()
    want_p, got_p = [], []
    for s in range(len(cu) - 1):
        for j in range((cu[s + 1] - cu[s] + C - 1) // C):
            t0, t1 = cu[s] + j * C, min(cu[s + 1], cu[s] + (j + 1) * C)
            for h in range(H):
                want_p.append(want[t0:t1, h].sum(0))
                got_p.append(np.concatenate([partials[(chunk_base[s] + j, h, n0)] for n0 in range(0, N, 2)]))
    assert len(partials) == len(want_p) * N // 2, "a partial row was written for a chunk that has no tokens"
    return rel(got, want), rel(np.array(got_p), np.array(want_p))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lens", default="150,33,64,1,0,97")
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    case = f64.make_case([int(x) for x in args.lens.split(",")], seed=args.seed, H=args.heads)
    e_dqh, e_part = compare(case)
    print(f"ws_dqh          rel-L2 {e_dqh:.2e}")
    print(f"dq_bias partial rel-L2 {e_part:.2e}")
    ok = max(e_dqh, e_part) < 5e-3
    print("model:", "ok" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
