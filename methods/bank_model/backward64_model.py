"""A float64 model of the chain-free backward that the design note proposes, checked against the
reference's autograd VJP.

Why: the backward on wgmma cannot hold its tiles and a state chain at once (design note, "The
backward on wgmma"). The proposal moves the chain out: the forward job computes V_j = (e dy)^T qr
of each chunk beside U; the state gradient crosses chunks by an elementwise recurrence
G_{j-1} = alpha_j G_j + V_j (G_j: the gradient of the state leaving chunk j); every chunk's
gradients are then independent work, and only vectors of scalars (reverse cumsums, one-token
shifts) cross chunks afterwards. This model executes exactly that split, chunk by chunk in the
kernels' terms (chunk-local decays, each chunk's entering state S_j and leaving gradient G_j), in
float64 (numerics are the GPU tests' business), so that the decomposition and its carries are
proven before a kernel is written:
  pass 1 (the forward's share): S_j, V_j, dy, dz;
  pass 2 (elementwise, reverse): G_j for every chunk;
  pass 3 (independent per chunk): the chunk's own gradient pieces, and what it hands on: its dc
    and dphi totals, the dc of the previous chunk's last token, the one-token shift terms;
  pass 4 (carries): the reverse cumsums' offsets and the shifts applied per token.
Run: python3 methods/bank_model/backward64_model.py [--lens 150,33,64,1,0,97] [--heads 2]
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
from mamba3_jit.reference import RESULT_NAMES, _rotate, case_args, make_case, reference_fwd_vjp  # noqa: E402

C = 32
PI = math.pi


def sequence_head(inp, s, h):
    """The per-token forward quantities of one sequence and head (VJP.md's table), float64."""
    st, en = inp["cu"][s], inp["cu"][s + 1]
    t = torch.arange(st, en)
    f = {}
    f["adt"], f["dt"] = inp["adt"][h, t], inp["dt"][h, t]
    f["ang"] = inp["angles"][t, h]
    f["th"] = PI * torch.tanh(f["ang"])
    f["phi"] = torch.cumsum(f["th"] * f["dt"][:, None], 0)  # the mod 2pi has zero derivative
    f["p"] = torch.sigmoid(inp["trap"][h, t])
    L = len(t)
    f["gam"] = torch.zeros(L, dtype=torch.float64)
    f["gam"][:-1] = f["dt"][1:] * (1 - f["p"][1:])
    f["sc"] = f["dt"] * f["p"] + f["gam"]
    f["qh"], f["kh"] = inp["q"][t] + inp["q_bias"][h], inp["k"][t] + inp["k_bias"][h]
    f["qkraw"] = (f["qh"] * f["kh"]).sum(-1)
    f["qk"] = f["qkraw"] * f["gam"]
    f["qr"], f["kr"] = _rotate(f["qh"], f["phi"]), _rotate(f["kh"], f["phi"])
    f["ks"] = f["sc"][:, None] * f["kr"]
    f["v"], f["z"], f["dout"] = inp["v"][t, h], inp["z"][t, h], inp["dout"][t, h]
    f["d"] = inp["d"][h]
    return f, t


def chunk_decays(adt):
    """Chunk-local cumsum cl, e[t] = exp(cl[t]), w[s] = exp(cl[last] - cl[s]), alpha, W."""
    cl = torch.cumsum(adt, 0)
    n = len(cl)
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    W = torch.exp((cl[:, None] - cl[None, :]).masked_fill(~causal, float("-inf")))
    return cl, torch.exp(cl), torch.exp(cl[-1] - cl), torch.exp(cl[-1]), W


def reverse_cumsum_by_chunks(x, chunks):
    """X_t = sum over t' >= t of x_t' (along dim 0), as chunks compute it: a suffix sum inside the
    chunk plus the totals of the chunks after it."""
    totals = [x[a0:b0].sum(0) for a0, b0 in chunks]
    out = torch.empty_like(x)
    for j, (a0, b0) in enumerate(chunks):
        later = sum(totals[j + 1:], torch.zeros_like(totals[j]))
        out[a0:b0] = torch.flip(torch.cumsum(torch.flip(x[a0:b0], [0]), 0), [0]) + later
    return out


def backward_model(case, extras=None):
    """The results, float64; `extras`, when given, also receives every token's per-head dq and dk
    rows ("dqh", "dkh", [T][H][N]: what the backward hands the head sums)."""
    a = [x.double() if x.is_floating_point() else x for x in case_args(case)]
    q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z, cu, dout, dFA, dFS, dFK, dFV = a
    T, H, P, N, A = v.shape[1], v.shape[2], v.shape[3], q.shape[3], angles.shape[3]
    inp = {"q": q[0, :, 0], "k": k[0, :, 0], "v": v[0], "adt": adt[0], "dt": dt[0], "trap": trap[0],
           "q_bias": q_bias, "k_bias": k_bias, "angles": angles[0], "d": d, "z": z[0], "dout": dout[0],
           "cu": cu.tolist()}
    g = {n: torch.zeros(T, H, w, dtype=torch.float64) for n, w in (("dqh", N), ("dkh", N), ("dv", P), ("dz", P),
                                                                     ("dangles", A))}
    for n in ("dadt", "ddt", "dtrap"):
        g[n] = torch.zeros(H, T, dtype=torch.float64)
    g["dd"] = torch.zeros(H, dtype=torch.float64)
    for s in range(len(inp["cu"]) - 1):
        L = inp["cu"][s + 1] - inp["cu"][s]
        if L == 0:
            continue
        for h in range(H):
            f, t = sequence_head(inp, s, h)
            chunks = [(j * C, min(L, (j + 1) * C)) for j in range((L + C - 1) // C)]
            dec = [chunk_decays(f["adt"][a0:b0]) for a0, b0 in chunks]

            # Pass 1, the forward's share: S_j entering each chunk, dy, dz, V_j.
            S = [torch.zeros(P, N, dtype=torch.float64)]
            for (a0, b0), (cl, e, w, alpha, W) in zip(chunks, dec):
                S.append(alpha * S[-1] + (f["v"][a0:b0] * w[:, None]).T @ f["ks"][a0:b0])
            sg = torch.sigmoid(f["z"])
            gz = f["z"] * sg
            y = torch.zeros(L, P, dtype=torch.float64)
            for j, ((a0, b0), (cl, e, w, alpha, W)) in enumerate(zip(chunks, dec)):
                M = W * (f["qr"][a0:b0] @ f["ks"][a0:b0].T)
                y[a0:b0] = (M @ f["v"][a0:b0] + e[:, None] * (f["qr"][a0:b0] @ S[j].T)
                            + (f["d"] - f["qk"][a0:b0])[:, None] * f["v"][a0:b0])
            dy = f["dout"] * gz
            g["dz"][t, h] = f["dout"] * y * sg * (1 + f["z"] * (1 - sg))
            V = [(e[:, None] * dy[a0:b0]).T @ f["qr"][a0:b0] for (a0, b0), (cl, e, w, alpha, W) in zip(chunks, dec)]

            # Pass 2: the state gradient leaving every chunk, an elementwise recurrence.
            G = [None] * len(chunks)
            G[-1] = dFS[s, h]
            for j in range(len(chunks) - 1, 0, -1):
                G[j - 1] = dec[j][3] * G[j] + V[j]

            # Pass 3: every chunk alone.
            dc = torch.zeros(L, dtype=torch.float64)
            dphi = torch.zeros(L, A, dtype=torch.float64)
            dqr = torch.zeros(L, N, dtype=torch.float64)
            dks = torch.zeros(L, N, dtype=torch.float64)
            dv = torch.zeros(L, P, dtype=torch.float64)
            dc_to_prev = [0.0] * len(chunks)  # lands on the previous chunk's last token
            for j, ((a0, b0), (cl, e, w, alpha, W)) in enumerate(zip(chunks, dec)):
                qr, ks, vv, dyj = f["qr"][a0:b0], f["ks"][a0:b0], f["v"][a0:b0], dy[a0:b0]
                M = W * (qr @ ks.T)
                dM = (dyj @ vv.T) * (W > 0)
                Gm = dM * M
                dMW = dM * W
                inter = e[:, None] * (dyj @ S[j])               # e[t] S_j^T dy[t]
                dqr[a0:b0] = dMW @ ks + inter
                dks[a0:b0] = dMW.T @ qr + w[:, None] * (vv @ G[j])
                dv[a0:b0] = M.T @ dyj + (f["d"] - f["qk"][a0:b0])[:, None] * dyj + w[:, None] * (ks @ G[j].T)
                local = Gm.sum(1) - Gm.sum(0)
                x = w * (vv * (ks @ G[j].T)).sum(1)
                local[-1] += x.sum()
                local -= x
                da = alpha * (G[j] * S[j]).sum()
                local[-1] += da
                u = (qr * inter).sum(1)
                local += u
                dc_to_prev[j] = -(da + u.sum()) if j > 0 else 0.0
                dc[a0:b0] = local
            if L - 1 >= 0:
                dv[L - 1] += dFV[s, h]
            # Pass 4: the carries. dc of the previous chunk's last token; then each chunk's reverse
            # cumsum within itself plus the totals of the chunks after it (what a look-back reads).
            for j in range(1, len(chunks)):
                dc[chunks[j][0] - 1] += dc_to_prev[j]
            g["dadt"][h, t] = reverse_cumsum_by_chunks(dc, chunks)

            dd_t = (dy * f["v"]).sum(1)
            g["dd"][h] += dd_t.sum()
            dqk = -dd_t
            dsc = (dks * f["kr"]).sum(1)
            dkr = f["sc"][:, None] * dks
            dkr[L - 1] += dFK[s, h]
            qr, kr = f["qr"], f["kr"]
            dphi = (qr[:, 0:2 * A:2] * dqr[:, 1:2 * A:2] - qr[:, 1:2 * A:2] * dqr[:, 0:2 * A:2]
                    + kr[:, 0:2 * A:2] * dkr[:, 1:2 * A:2] - kr[:, 1:2 * A:2] * dkr[:, 0:2 * A:2])
            g["dqh"][t, h] = _rotate(dqr, -f["phi"]) + (dqk * f["gam"])[:, None] * f["kh"]
            g["dkh"][t, h] = _rotate(dkr, -f["phi"]) + (dqk * f["gam"])[:, None] * f["qh"]
            g["dv"][t, h] = dv
            dgam = dqk * f["qkraw"] + dsc
            ddt = dsc * f["p"]
            dp = dsc * f["dt"]
            # The one-token shift: inside a chunk, then from each chunk's last token to the next
            # chunk's first (the one term that crosses chunks forward).
            for a0, b0 in chunks:
                ddt[a0 + 1:b0] += dgam[a0:b0 - 1] * (1 - f["p"][a0 + 1:b0])
                dp[a0 + 1:b0] += -dgam[a0:b0 - 1] * f["dt"][a0 + 1:b0]
            for (_, b0), (a1, _) in zip(chunks[:-1], chunks[1:]):
                ddt[a1] += dgam[b0 - 1] * (1 - f["p"][a1])
                dp[a1] += -dgam[b0 - 1] * f["dt"][a1]
            dphi[L - 1] += dFA[s, h]
            Phi = reverse_cumsum_by_chunks(dphi, chunks)
            ddt += (Phi * f["th"]).sum(1)
            g["ddt"][h, t] = ddt
            g["dtrap"][h, t] = dp * f["p"] * (1 - f["p"])
            g["dangles"][t, h] = Phi * f["dt"][:, None] * PI * (1 - torch.tanh(f["ang"]) ** 2)
    if extras is not None:
        extras["dqh"], extras["dkh"] = g["dqh"], g["dkh"]
    return {
        "dq": g["dqh"].sum(1)[None, :, None], "dk": g["dkh"].sum(1)[None, :, None], "dv": g["dv"][None],
        "dadt": g["dadt"][None], "ddt": g["ddt"][None], "dtrap": g["dtrap"][None],
        "dq_bias": g["dqh"].sum(0), "dk_bias": g["dkh"].sum(0), "dangles": g["dangles"][None], "dd": g["dd"],
        "dz": g["dz"][None],
    }


def rel(a, b):
    return float(torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b).clamp_min(1e-300))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lens", default="150,33,64,1,0,97")
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=5)
    args = ap.parse_args()
    case = make_case([int(x) for x in args.lens.split(",")], seed=args.seed, H=args.heads)
    got = backward_model(case)
    truth = dict(zip(RESULT_NAMES, reference_fwd_vjp(*case_args(case))))
    worst = 0.0
    for name, value in got.items():
        err = rel(value, truth[name].double())
        worst = max(worst, err)
        print(f"{name:8s} rel-L2 {err:.2e}")
    ok = worst < 1e-9
    print("model:", "ok" if ok else "MISMATCH", f"(worst {worst:.2e})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
