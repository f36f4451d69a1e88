"""A CPU model of v123's k/v-side backward job (kernel_src/m3_backward64kv.cuh), index for index.

Why: as for the forward and the q side (forward64_model.py, backward64q_model.py, whose staging
and wgmma operand model this reuses): the risks are index schemes. Here: the tickets drawn after
the forward's, the jobs of a sequence in reverse; e dy^T's permuted rows, which must leave each
k-step's (i, i + 4) pair of value columns in one thread's accumulator so that G^T is the next
products' register operand as it stands; the chain's hand-off in the accumulator's layout through
ws_dstates and the even-chunk forward flags; the transposed scores' tiles; the G tiles; the dk,
bias-partial and dv slots. The model executes the job's phases thread by thread with the kernel's
index expressions on a flat shared-memory array and compares every token's per-head dk, every
chunk's dk_bias partial and dv with the float64 decomposition (backward64_model.py). It checks the
scheme, not the compiled kernel: the GPU tests remain the proof.

Run: python3 methods/bank_model/backward64kv_model.py [--heads H] [--lens L1,L2,...]
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
from backward64q_model import K_DY, K_VT, own_half_rows, quad_sums, row_of, stage_dy_v, thread  # noqa: E402
from forward64_model import (A, C, JOB, N, P, PHI_STRIDE, a_from_registers, f32, kstep, read_operand,  # noqa: E402
                             rel, stage_job, wgmma)
from sw128_banks import permuted as permuted_p, sw128_index  # noqa: E402

K_QR, K_KS, K_DYTE, K_MT, K_DMWT, K_G, K_PHI = 0, 32768, 98304, 114688, 122880, 131072, 196608  # m3b64kv enum
# G^T's words as the kernel passes them to the rs products: (d[4 k], d[4 k + 2], d[4 k + 1], d[4 k + 3]).
G_ORDER = (0, 2, 1, 3)


def p_at(jb, i, e):
    return 8 * jb + i + 4 * e


def transposed_fragments(smem, t0, wg):
    """A = QR^T of rows n (pair order) and tokens t0 + 8 k + i (+ 4), for each thread of warpgroup wg."""
    frags = []
    for k in range(4):
        fk = []
        for x in range(128):
            wq, lane = x // 32, x % 32
            g, i = lane // 4, lane % 4
            n0, t = row_of(wg, wq, g), t0 + 8 * k + i
            lo, hi = K_QR // 4 + sw128_index(JOB, t, n0), K_QR // 4 + sw128_index(JOB, t + 4, n0)
            fk.append((smem[lo], smem[lo + 1], smem[hi], smem[hi + 1]))
        frags.append(fk)
    return frags


def g_words(wg):
    """G^T in the chain's registers (rows n0, n0 + 1 in the pair order, value columns permuted):
    (thread, register of row n0, value column p, n0); row n0 + 1 is the register two on."""
    for x in range(128):
        wq, g, i = thread(x)
        n0 = row_of(wg, wq, g)
        for jb in range(8):
            for e in range(2):
                yield x, 4 * jb + e, p_at(jb, i, e), n0


def g_frags(gregs, k):
    return [tuple(gregs[x][4 * k + j] for j in G_ORDER) for x in range(128)]


def run_job(inp, carries, hand_offs, flags, out, seq, rnd, h, chunk_base, terms=None, ws_states=None):
    """One job; with `terms` (the whole backward, v125) also G's row and column sums, dsc, x, the k
    half of dphi (added to the q half's) and da per chunk, as the kernel's kTerms path computes
    them (da from the forward's states in `ws_states`)."""
    H = inp.H
    start, slen = inp.cu[seq], inp.cu[seq + 1] - inp.cu[seq]
    jobs = (slen + JOB - 1) // JOB
    a = rnd * JOB
    length = min(JOB, slen - a)
    last_job = rnd == jobs - 1
    slot0 = chunk_base + 2 * rnd
    capacity = inp.T // C + inp.S

    def in_range(chunk, what, spare=0):
        assert 0 <= chunk < capacity + spare, f"{what}: chunk {chunk} outside the workspace's {capacity + spare}"

    smem = np.zeros((K_PHI + JOB * PHI_STRIDE * 4) // 4, f32)
    vec, alpha, _, _ = stage_job(inp, carries, seq, rnd, h, chunk_base, smem, K_PHI, in_range)
    dyv = stage_dy_v(inp, smem, start + a, length, h)
    # stage_dyte
    for b in range(P * JOB // 32):
        for lane in range(32):
            p, t = 4 * (b >> 3) + (lane >> 3), 8 * (b & 7) + (lane & 7)
            smem[K_DYTE // 4 + sw128_index(P, permuted_p(p), t)] = vec["e"][t] * smem[K_DY // 4 + sw128_index(JOB, t, p)]

    # S^T and dM^T, M^T and (dM W)^T of half wg
    cl = vec["cl"]
    for wg in range(2):
        st = [np.zeros(16, f32) for _ in range(128)]
        dm = [np.zeros(16, f32) for _ in range(128)]
        for k in range(N // 8):
            wgmma(st, 32, read_operand(smem, kstep(K_KS, JOB, k), 64), read_operand(smem, kstep(K_QR + 4096 * wg, JOB, k), 32))
        for k in range(P // 8):
            wgmma(dm, 32, read_operand(smem, kstep(K_VT, JOB, k), 64), read_operand(smem, kstep(K_DY + 4096 * wg, JOB, k), 32))
        for x, k, sk, tc in own_half_rows(wg):
            at = sw128_index(32, sk - 32 * wg, tc - 32 * wg)
            for e in range(2):
                t = tc + e
                w = np.exp(cl[t] - cl[sk], dtype=f32) if (sk <= t < length) else f32(0)
                smem[K_MT // 4 + 1024 * wg + at + e] = w * st[x][k + e]
                smem[K_DMWT // 4 + 1024 * wg + at + e] = w * dm[x][k + e]
                if terms is not None and sk <= t < length:  # G = dM * M
                    gm = float(dm[x][k + e] * (w * st[x][k + e]))
                    for name, tok in (("colg", sk), ("rowg", t)):
                        key = (start + a + tok, h)
                        terms[name][key] = terms[name].get(key, 0.0) + gm

    # V_h^T, the chain and the hand-off
    second = length > C
    gl, g0 = [], []
    handed = np.zeros(P * N, f32)
    for wg in range(2):
        v = []
        for hf in range(2):
            acc = [np.zeros(32, f32) for _ in range(128)]
            fr = transposed_fragments(smem, 32 * hf, wg)
            for k in range(4):
                wgmma(acc, 64, a_from_registers(fr[k]), read_operand(smem, kstep(K_DYTE, P, 4 * hf + k), 64))
            v.append(acc)
        glw = [np.zeros(32, f32) for _ in range(128)]
        if not last_job:
            key = (slot0 + 2, h)
            in_range(slot0 + 2, "forward flag / ws_dstates read", spare=1)
            assert key in flags and key in hand_offs, f"job ({seq}, {rnd}, {h}) waits on a hand-off nobody made"
            zin = hand_offs[key]
            for x in range(128):
                wq, lane = x // 32, x % 32
                for jb in range(8):
                    glw[x][4 * jb:4 * jb + 4] = zin[(((4 * wg + wq) * 8 + jb) * 32 + lane) * 4:][:4]
        else:
            dfs = out["dfs"][seq, h]
            for x, r, p, n0 in g_words(wg):
                glw[x][r], glw[x][r + 2] = dfs[p, n0], dfs[p, n0 + 1]
        g0w = []
        for x in range(128):
            gz = (alpha[1] * glw[x] + v[1][x]).astype(f32) if second else glw[x].copy()
            g0w.append(gz)
            hand = (alpha[0] * gz + v[0][x]).astype(f32)
            wq, lane = x // 32, x % 32
            for jb in range(8):
                handed[(((4 * wg + wq) * 8 + jb) * 32 + lane) * 4:][:4] = hand[4 * jb:4 * jb + 4]
        gl.append(glw)
        g0.append(g0w)
    if terms is not None:  # da of each half: alpha_h <G_h, S_h>
        for hf, gsrc in ((0, g0), (1, gl)):
            if hf == 1 and not second:
                continue
            if hf == 0 and rnd == 0:
                terms["da"][(chunk_base + 2 * rnd, h)] = 0.0
                continue
            st_h = ws_states[(slot0 + hf, h)]
            tot = 0.0
            for wg in range(2):
                for x, r, p, n0 in g_words(wg):
                    tot += float(gsrc[wg][x][r]) * st_h[p, n0] + float(gsrc[wg][x][r + 2]) * st_h[p, n0 + 1]
            terms["da"][(chunk_base + 2 * rnd + hf, h)] = float(alpha[hf]) * tot
    if rnd > 0:
        in_range(slot0, "forward flag / ws_dstates write", spare=1)
        assert (slot0, h) not in flags, f"flag {(slot0, h)} raised twice"
        hand_offs[(slot0, h)] = handed
        flags.add((slot0, h))

    # G tiles
    for hf, gsrc in ((0, g0), (1, gl)):
        if hf == 1 and not second:
            continue
        for wg in range(2):
            for x, r, p, n0 in g_words(wg):
                at = K_G // 4 + 8192 * hf + sw128_index(P, p, n0)
                smem[at], smem[at + 1] = gsrc[wg][x][r], gsrc[wg][x][r + 2]

    # dk_half
    for hf, gsrc in ((0, g0), (1, gl)):
        if hf == 1 and not second:
            continue
        row = slot0 + hf
        in_range(row, "ws_partial row")
        for wg in range(2):
            acc = [np.zeros(16, f32) for _ in range(128)]
            for k in range(P // 8):
                wgmma(acc, 32, a_from_registers(g_frags(gsrc[wg], k)), read_operand(smem, kstep(K_VT + 4096 * hf, JOB, k), 32))
            for x in range(128):
                i = x % 4
                for jb in range(4):
                    for e in range(2):
                        w = vec["wb"][32 * hf + 8 * jb + 2 * i + e]
                        acc[x][4 * jb + e] *= w
                        acc[x][4 * jb + 2 + e] *= w
            fr = transposed_fragments(smem, 32 * hf, wg)
            for k in range(4):
                wgmma(acc, 32, a_from_registers(fr[k]), read_operand(smem, kstep(K_DMWT + 4096 * hf, 32, k), 32))
            for x in range(128):
                wq, lane = x // 32, x % 32
                g, i = lane // 4, lane % 4
                n0 = row_of(wg, wq, g)
                pair = n0 >> 1
                for jb in range(4):
                    for e in range(2):
                        t = 32 * hf + 8 * jb + 2 * i + e
                        if t >= length:
                            continue
                        sc = vec["sc"][t]
                        d0, d1 = sc * acc[x][4 * jb + e], sc * acc[x][4 * jb + 2 + e]
                        if last_job and t == length - 1:
                            d0, d1 = d0 + out["dfk"][seq, h, n0], d1 + out["dfk"][seq, h, n0 + 1]
                        u0, u1 = d0, d1
                        tg = start + a + t
                        kr0, kr1 = inp.k[tg, n0] + inp.k_bias[h, n0], inp.k[tg, n0 + 1] + inp.k_bias[h, n0 + 1]
                        if pair < A:
                            ph = smem[K_PHI // 4 + t * PHI_STRIDE + pair]
                            sn, cs = f32(math.sin(ph)), f32(math.cos(ph))
                            u0, u1 = d0 * cs + d1 * sn, -d0 * sn + d1 * cs
                            kr0, kr1 = kr0 * cs - kr1 * sn, kr0 * sn + kr1 * cs
                            if terms is not None:
                                key = (tg, h, pair)
                                terms["dphi"][key] = terms["dphi"].get(key, 0.0) + float(kr0 * d1 - kr1 * d0)
                        if terms is not None:
                            key = (tg, h)
                            terms["dsc"][key] = terms["dsc"].get(key, 0.0) + float(acc[x][4 * jb + e] * kr0 + acc[x][4 * jb + 2 + e] * kr1)
                        q0, q1 = inp.q[tg, n0] + inp.q_bias[h, n0], inp.q[tg, n0 + 1] + inp.q_bias[h, n0 + 1]
                        gt = -dyv[t] * vec["gam"][t]
                        key = (tg, h, n0)
                        assert key not in out["dkh"], f"ws_dkh {key} written twice"
                        out["dkh"][key] = (f32(gt * q0 + u0), f32(gt * q1 + u1))
            quad_sums(out["dkh"], out["partials"], wg, hf, length, start + a, h, row)

    # dv_half: warpgroup wg, half wg
    for wg in range(2):
        hf = wg
        acc = [np.zeros(16, f32) for _ in range(128)]
        for k in range(N // 8):
            wgmma(acc, 32, read_operand(smem, kstep(K_G + 32768 * hf, P, k), 64), read_operand(smem, kstep(K_KS + 4096 * hf, JOB, k), 32))
        for x in range(128):
            i = x % 4
            for jb in range(4):
                for e in range(2):
                    w = vec["wb"][32 * hf + 8 * jb + 2 * i + e]
                    acc[x][4 * jb + e] *= w
                    acc[x][4 * jb + 2 + e] *= w
                    t = 32 * hf + 8 * jb + 2 * i + e
                    if terms is not None and t < length:  # x: v . (the state part of dv)
                        p0 = 16 * (x // 32) + (x % 32) // 4
                        key = (start + a + t, h)
                        terms["xs"][key] = terms["xs"].get(key, 0.0) + float(
                            smem[K_VT // 4 + sw128_index(JOB, t, p0)] * acc[x][4 * jb + e]
                            + smem[K_VT // 4 + sw128_index(JOB, t, p0 + 8)] * acc[x][4 * jb + 2 + e])
        for k in range(4):
            frags = []
            for x in range(128):
                wq, lane = x // 32, x % 32
                g, i = lane // 4, lane % 4
                p0, t = 16 * wq + g, 32 * hf + 8 * k + i
                dy = lambda tt, pp: smem[K_DY // 4 + sw128_index(JOB, tt, pp)]  # noqa: E731
                frags.append((dy(t, p0), dy(t, p0 + 8), dy(t + 4, p0), dy(t + 4, p0 + 8)))
            wgmma(acc, 32, a_from_registers(frags), read_operand(smem, kstep(K_MT + 4096 * hf, 32, k), 32))
        for x in range(128):
            wq, lane = x // 32, x % 32
            g, i = lane // 4, lane % 4
            for jb in range(4):
                for e in range(4):
                    pr, t = 16 * wq + g + 8 * (e >> 1), 32 * hf + 8 * jb + 2 * i + (e & 1)
                    if t >= length:
                        continue
                    dv = acc[x][4 * jb + e] + vec["skip"][t] * smem[K_DY // 4 + sw128_index(JOB, t, pr)]
                    if last_job and t == length - 1:
                        dv += out["dfv"][seq, h, pr]
                    key = (start + a + t, h, pr)
                    assert key not in out["dv"], f"dv {key} written twice"
                    out["dv"][key] = f32(dv)


def model_backward64kv(case):
    """ws_dkh {(token, head, n0): 2 floats}, the dk_bias partials {(chunk, head, n0): 2 floats} and
    dv {(token, head, p): float}, the jobs run in ticket order (each sequence's in reverse)."""
    _, _, chunk_base = f64.model_forward(case)
    inp = f64.Inputs(case)
    carries = f64.angle_carries(inp)
    out = {"dkh": {}, "partials": {}, "dv": {},
           "dfs": case["dfinal_ssm"].float().numpy(), "dfk": case["dfinal_k"].float().numpy(),
           "dfv": case["dfinal_v"].float().numpy()}
    hand_offs, flags = {}, set()
    for seq, k in f64.schedule(inp.cu, JOB):
        jobs = (inp.cu[seq + 1] - inp.cu[seq] + JOB - 1) // JOB
        for h in range(inp.H):
            run_job(inp, carries, hand_offs, flags, out, seq, jobs - 1 - k, h, chunk_base[seq])
    return out, chunk_base


def compare(case):
    """rel-L2 of ws_dkh, the partials and dv against the float64 decomposition."""
    out, chunk_base = model_backward64kv(case)
    extras = {}
    truth = b64.backward_model(case, extras)
    want = extras["dkh"].numpy()
    T, H = want.shape[0], want.shape[1]
    got = np.zeros_like(want)
    for (t, h, n0), (x0, x1) in out["dkh"].items():
        got[t, h, n0], got[t, h, n0 + 1] = x0, x1
    assert len(out["dkh"]) == T * H * N // 2, "ws_dkh: a pair missing"
    cu = case["cu_seqlens"].tolist()
    want_p, got_p = [], []
    for s in range(len(cu) - 1):
        for j in range((cu[s + 1] - cu[s] + C - 1) // C):
            t0, t1 = cu[s] + j * C, min(cu[s + 1], cu[s] + (j + 1) * C)
            for h in range(H):
                want_p.append(want[t0:t1, h].sum(0))
                got_p.append(np.concatenate([out["partials"][(chunk_base[s] + j, h, n0)] for n0 in range(0, N, 2)]))
    assert len(out["partials"]) == len(want_p) * N // 2, "a partial row was written for a chunk that has no tokens"
    want_dv = truth["dv"][0].numpy()
    got_dv = np.zeros_like(want_dv)
    for (t, h, pr), x in out["dv"].items():
        got_dv[t, h, pr] = x
    assert len(out["dv"]) == T * H * P, "dv: a value missing"
    return rel(got, want), rel(np.array(got_p), np.array(want_p)), rel(got_dv, want_dv)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lens", default="150,33,64,1,0,97")
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    case = f64.make_case([int(x) for x in args.lens.split(",")], seed=args.seed, H=args.heads)
    e_dkh, e_part, e_dv = compare(case)
    print(f"ws_dkh          rel-L2 {e_dkh:.2e}")
    print(f"dk_bias partial rel-L2 {e_part:.2e}")
    print(f"dv              rel-L2 {e_dv:.2e}")
    ok = max(e_dkh, e_part, e_dv) < 5e-3
    print("model:", "ok" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
