"""A CPU model of v125's whole chunk-64 backward (kernel_src/m3_backward64.cuh): its two sides'
index schemes (backward64q_model.py, backward64kv_model.py) with the per-token terms the kernel's
kTerms path adds (u, dsc, x, G's row and column sums, both halves of dphi, da per chunk), combined
by the mathematics of v103's tail (backward_token_scalars_parallel, which the kernel calls as it
is: reverse cumsums with the carries between chunks, the one-token shift, dangles), and compared
with the float64 truth on every gradient.

Why: the terms are where the whole backward departs from its sides' test beds (v121, v123): each
is a reduction over an accumulator's rows or columns in another thread mapping, and a slip in one
shows only in dadt, ddt, dtrap or dangles. The tail itself is v103's code, checked on the device
since run 40; its mathematics here is backward64_model.py's pass 4, in float64.

Run: python3 methods/bank_model/backward64_full_model.py [--heads H] [--lens L1,L2,...]
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import backward64kv_model as kvm  # noqa: E402
import backward64q_model as qm  # noqa: E402
import forward64_model as f64  # noqa: E402
from forward64_model import C, JOB, N, P, rel  # noqa: E402
from mamba3_jit.reference import RESULT_NAMES, case_args, reference_fwd_vjp  # noqa: E402

PI = math.pi


def model_backward64(case):
    """Every gradient the whole backward produces, from the modelled jobs and the tail's mathematics."""
    _, ws_states, chunk_base = f64.model_forward(case)
    inp = f64.Inputs(case)
    carries = f64.angle_carries(inp)
    T, H, S = inp.T, inp.H, inp.S
    terms = {n: {} for n in ("u", "dphi", "colg", "rowg", "dsc", "xs", "da")}
    ws_dqh, q_partials = {}, {}
    out = {"dkh": {}, "partials": {}, "dv": {}, "dfs": case["dfinal_ssm"].float().numpy(),
           "dfk": case["dfinal_k"].float().numpy(), "dfv": case["dfinal_v"].float().numpy()}
    hand_offs, flags = {}, set()
    for seq, k in f64.schedule(inp.cu, JOB):  # the backward's tickets: each sequence's jobs reversed
        jobs = (inp.cu[seq + 1] - inp.cu[seq] + JOB - 1) // JOB
        for h in range(H):
            rnd = jobs - 1 - k
            qm.run_job(inp, carries, ws_states, ws_dqh, q_partials, seq, rnd, h, chunk_base[seq], terms)
            kvm.run_job(inp, carries, hand_offs, flags, out, seq, rnd, h, chunk_base[seq], terms, ws_states)

    dfa = case["dfinal_angle"].double().numpy()
    g = {n: np.zeros((H, T)) for n in ("dadt", "ddt", "dtrap")}
    dangles = np.zeros((T, H, inp.angles.shape[2]))
    dd = np.zeros(H)
    A = inp.angles.shape[2]
    for s in range(S):
        st, L = inp.cu[s], inp.cu[s + 1] - inp.cu[s]
        if L == 0:
            continue
        chunks = [(j * C, min(L, (j + 1) * C)) for j in range((L + C - 1) // C)]
        for h in range(H):
            tt = range(st, st + L)
            dt = inp.dt[h, st:st + L].astype(np.float64)
            pg = 1 / (1 + np.exp(-inp.trap[h, st:st + L].astype(np.float64)))
            ang = inp.angles[st:st + L, h].astype(np.float64)
            th = PI * np.tanh(ang)
            zz = inp.z[st:st + L, h].astype(np.float64)
            dy = inp.dout[st:st + L, h] * zz / (1 + np.exp(-zz))
            dyv = (dy * inp.v[st:st + L, h]).sum(1)
            qh = inp.q[st:st + L] + inp.q_bias[h]
            kh = inp.k[st:st + L] + inp.k_bias[h]
            qkraw = (qh.astype(np.float64) * kh).sum(1)
            vecs = {n: np.array([terms[n].get((t, h), 0.0) for t in tt]) for n in ("u", "colg", "rowg", "dsc", "xs")}
            dphi = np.array([[terms["dphi"].get((t, h, m), 0.0) for m in range(A)] for t in tt])
            # dc as v103's tail forms it, chunk by chunk, then the reverse cumsum over the sequence
            dc = vecs["rowg"] - vecs["colg"] + vecs["u"] - vecs["xs"]
            for j, (a0, b0) in enumerate(chunks):
                da = terms["da"][(chunk_base[s] + j, h)]
                dc[b0 - 1] += vecs["xs"][a0:b0].sum() + da
                if j > 0:
                    dc[a0 - 1] += -(da + vecs["u"][a0:b0].sum())
            g["dadt"][h, st:st + L] = np.cumsum(dc[::-1])[::-1]
            dphi[L - 1] += dfa[s, h]
            Phi = np.cumsum(dphi[::-1], 0)[::-1]
            dangles[st:st + L, h] = Phi * dt[:, None] * PI * (1 - np.tanh(ang) ** 2)
            dgam = -dyv * qkraw + vecs["dsc"]
            ddt = vecs["dsc"] * pg + (Phi * th).sum(1)
            dp = vecs["dsc"] * dt
            ddt[1:] += dgam[:-1] * (1 - pg[1:])
            dp[1:] -= dgam[:-1] * dt[1:]
            g["ddt"][h, st:st + L] = ddt
            g["dtrap"][h, st:st + L] = dp * pg * (1 - pg)
            dd[h] += dyv.sum()
    dqh = np.zeros((T, H, N))
    dkh = np.zeros((T, H, N))
    for (t, h, n0), (x0, x1) in ws_dqh.items():
        dqh[t, h, n0], dqh[t, h, n0 + 1] = x0, x1
    for (t, h, n0), (x0, x1) in out["dkh"].items():
        dkh[t, h, n0], dkh[t, h, n0 + 1] = x0, x1
    dv = np.zeros((T, H, P))
    for (t, h, pr), x in out["dv"].items():
        dv[t, h, pr] = x
    return {"dq": dqh.sum(1), "dk": dkh.sum(1), "dv": dv, "dadt": g["dadt"], "ddt": g["ddt"], "dtrap": g["dtrap"],
            "dq_bias": dqh.sum(0), "dk_bias": dkh.sum(0), "dangles": dangles, "dd": dd}


def compare(case):
    """rel-L2 against the float64 truth, per gradient."""
    got = model_backward64(case)
    truth = dict(zip(RESULT_NAMES, reference_fwd_vjp(*case_args(case))))
    errs = {}
    for name, value in got.items():
        want = truth[name].double()
        want = want.reshape(value.shape) if want.numel() == value.size else want
        errs[name] = rel(value, want.numpy())
    return errs


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lens", default="150,33,64,1,0,97")
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    case = f64.make_case([int(x) for x in args.lens.split(",")], seed=args.seed, H=args.heads)
    errs = compare(case)
    for name, e in errs.items():
        print(f"{name:8s} rel-L2 {e:.2e}")
    worst = max(errs.values())
    print("model:", "ok" if worst < 5e-3 else "MISMATCH", f"(worst {worst:.2e})")
    return 0 if worst < 5e-3 else 1


if __name__ == "__main__":
    torch.set_grad_enabled(True)
    sys.exit(main())
