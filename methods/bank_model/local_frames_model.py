"""A float64 model of the forward and backward in chunk-local rotary frames, checked against the
reference's autograd VJP.

Why: every call runs the angle kernel (m3_cp_angles) before the forward, 9 to 21 us on the visible
cases (run 151's timelines: 2.6% of c01's latency, 6.7% of c00's, about 4% of the latency
geomean), because each chunk's rotations need phi, the angle cumsum over the whole sequence
before it. But a chunk never needs that absolute angle:
  - rotations are of pairs, so R(phi_t) = R(Phi_j) R(lam_t), with Phi_j the angle entering chunk j
    and lam_t the cumsum inside the chunk (at most 32 terms);
  - the scores qr_t . ks_s of two tokens of one chunk see R(Phi_j) cancel;
  - the inter part qr_t . S[p] = (R(lam_t) qh_t) . (R(-Phi_j) S[p]): the entering state read in
    the chunk's own frame, S_loc_j = rows of S rotated by -Phi_j.
So the state can travel in local frames: a chunk works with its local angles only, and hands on
S_loc_{j+1} = R(-Lam_j) (alpha_j S_loc_j + U_loc_j), Lam_j its own angle total (lam at its last
token), a rotation of the state's first 2A columns fused into the store it already makes. Only
the final states need the absolute angle, the sum of the chunks' totals, which rides the chain.

The backward then needs no absolute angle either. The angle gradient a chunk's tokens receive from
later chunks (today's big_phi_carry, the reverse cumsum of dphi over the rest of the sequence) is,
in local frames, one vector of A numbers per chunk:
  carry_j = dLam_j (through the hand-off rotation) + dPhi (through the final states),
where the hand-off term is computed by the next chunk's job from what it holds anyway, its
entering state S = S_loc_{j+1} and that state's gradient G (its update's result):
  dLam_j[i] = sum_p G[p, 2i] S[p, 2i+1] - G[p, 2i+1] S[p, 2i].
Each token's angle gradient is then dx_s = (reverse cumsum inside the chunk of the per-token
dlam_t) + carry_j, with x_s = theta_s dt_s, exactly as today with another carry.

This model executes that form (chunk by chunk, all heads at once) in float64 and compares it with
the reference: the forward's five results and, by autograd through it, all sixteen. A second check
makes the hand-off angles and the final-state angle separate leaves and compares autograd's
gradients of them with the closed forms above, and assembles every token's angle gradient from
the per-token part and the carries. Initial states are not modelled (the stateless form).
Run: python3 methods/bank_model/local_frames_model.py [--lens 150,33,64,1,0,97] [--heads 2]
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
from mamba3_jit import reference as R  # noqa: E402

C = 32


def _per_head(x, H):
    """(L, G, N) -> (H, L, N), each query/key group expanded to its value heads."""
    L, G, N = x.shape
    return x.unsqueeze(2).expand(L, G, H // G, N).reshape(L, H, N).transpose(0, 1)


def _rotate_rows(state, angle):
    """Every row of state (H, P, N) rotated pairwise by angle (H, A)."""
    return R._rotate(state, angle.unsqueeze(1))


def _cross(g, s, A):
    """sum over rows p of g[p, 2i] s[p, 2i+1] - g[p, 2i+1] s[p, 2i], for i < A: (H, A)."""
    gp = g[..., : 2 * A].unflatten(-1, (A, 2))
    sp = s[..., : 2 * A].unflatten(-1, (A, 2))
    return (gp[..., 0] * sp[..., 1] - gp[..., 1] * sp[..., 0]).sum(-2)


class Taps:
    """Optional separate leaves for the angles in each of their roles, so that a check can read
    autograd's gradient of each role apart: a chunk's per-token rotations (lam), its hand-off
    rotation (Lam), and the absolute angles of the final states: the sequence's total (final_k,
    final_angle) and the angle entering its last chunk (final_ssm). Records the entering states."""

    def __init__(self):
        self.lam, self.hand, self.final, self.final_in, self.entering = [], [], [], [], []

    def leaf(self, store, x):
        y = x.detach().clone().requires_grad_(True)
        store.append(y)
        return y


def sequence_forward_local(q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z, init=None,
                           chunk=C, taps=None):
    """One non-empty sequence, all heads, in chunk-local frames; arguments and results as
    reference._sequence_forward's (output (L, H, P), angle (H, A), ssm (H, P, N), k (H, N),
    v (H, P))."""
    if init is not None:
        raise NotImplementedError("the model covers the stateless form only")
    L = q.shape[0]
    H, P, N, A = v.shape[1], v.shape[2], q.shape[2], angles.shape[2]
    x = math.pi * torch.tanh(angles.transpose(0, 1)) * dt.unsqueeze(-1)  # theta dt, (H, L, A)
    p = torch.sigmoid(trap)
    gamma = torch.cat((dt[:, 1:] * (1 - p[:, 1:]), dt.new_zeros(H, 1)), dim=1)
    scale = dt * p + gamma
    qh = _per_head(q, H) + q_bias.unsqueeze(1)
    kh = _per_head(k, H) + k_bias.unsqueeze(1)
    qk = (qh * kh).sum(-1) * gamma
    vh = v.transpose(0, 1)
    c = torch.cumsum(adt, dim=1)

    state = vh.new_zeros(H, P, N)          # S_loc_j: the entering state in chunk j's frame
    phi_in = vh.new_zeros(H, A)            # Phi_j, wrapped as the kernels would keep it
    ys = []
    for a in range(0, L, chunk):
        b = min(a + chunk, L)
        lam = torch.cumsum(x[:, a:b], dim=1)                          # (H, b - a, A)
        lam_tok = taps.leaf(taps.lam, lam) if taps else lam
        if taps:
            if not state.requires_grad:  # the first chunk's zero state
                state.requires_grad_(True)
            state.retain_grad()
            taps.entering.append(state)
        qr = R._rotate(qh[:, a:b], lam_tok)
        ks = scale[:, a:b].unsqueeze(-1) * R._rotate(kh[:, a:b], lam_tok)
        c_prev = c[:, a - 1] if a > 0 else c.new_zeros(H)
        cl = c[:, a:b] - c_prev.unsqueeze(-1)
        causal = torch.ones(b - a, b - a, dtype=torch.bool).tril()
        W = torch.exp((cl.unsqueeze(-1) - cl.unsqueeze(-2)).masked_fill(~causal, float("-inf")))
        y = (W * (qr @ ks.transpose(1, 2))) @ vh[:, a:b]
        y = y + torch.exp(cl).unsqueeze(-1) * (qr @ state.transpose(1, 2))
        ys.append(y)
        w_end = torch.exp(cl[:, -1:] - cl)
        leaving = torch.exp(cl[:, -1])[:, None, None] * state + (vh[:, a:b] * w_end.unsqueeze(-1)).transpose(1, 2) @ ks
        total = lam[:, -1]                                             # Lam_j
        if b < L:
            hand = taps.leaf(taps.hand, total) if taps else total
            state = _rotate_rows(leaving, -hand)
            phi_in = R._wrap_2pi(phi_in + total)
        else:
            # Back to the absolute frame: the leaving state by the angle entering the chunk, the
            # last token's k (and the final angle) by the whole sequence's.
            final_in = taps.leaf(taps.final_in, phi_in) if taps else phi_in
            final = taps.leaf(taps.final, phi_in + total) if taps else phi_in + total
            final_ssm = _rotate_rows(leaving, final_in)
            final_k = R._rotate(kh[:, -1], final)
            final_angle = R._wrap_2pi(final)
    y = torch.cat(ys, dim=1) + (d.unsqueeze(1) - qk).unsqueeze(-1) * vh
    zh = z.transpose(0, 1)
    output = (y * zh * torch.sigmoid(zh)).transpose(0, 1)
    return output, final_angle, final_ssm, final_k, v[-1]


def layer_forward_local(q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z, cu_seqlens, *,
                        initial_states=None, chunk=C):
    """reference.layer_forward in chunk-local frames (the same five results, differentiable)."""
    return R._per_sequence(lambda *xs: sequence_forward_local(*xs, chunk=chunk), q, k, v, adt, dt, trap,
                           q_bias, k_bias, angles, d, z, cu_seqlens, initial_states)


def rel(x, truth):
    return (float((x - truth).norm()) / max(float(truth.norm()), 1e-300))


def vjp_local(case, chunk=C):
    """The sixteen results of the forward in local frames and autograd's VJP through it."""
    return R._fwd_vjp(R.case_args(case), torch.float64, lambda *xs: layer_forward_local(*xs, chunk=chunk))


def carries_check(case, s=0, chunk=C):
    """For sequence s (all heads): the closed forms of the hand-off and final angle gradients
    against autograd's, and every token's angle gradient assembled from the per-token part and
    the carries against the reference's. Returns the worst relative error of each check."""
    args = dict(zip(R.ARG_NAMES, R._as_args(R.case_args(case))))
    cu = [int(t) for t in args["cu_seqlens"].tolist()]
    a0, b0 = cu[s], cu[s + 1]
    leaves = {n: args[n].detach().double().requires_grad_(True) for n in R.DIFF_ARG_NAMES}
    taps = Taps()
    out = sequence_forward_local(leaves["q"][0, a0:b0], leaves["k"][0, a0:b0], leaves["v"][0, a0:b0],
                                 leaves["adt"][0, :, a0:b0], leaves["dt"][0, :, a0:b0],
                                 leaves["trap"][0, :, a0:b0], leaves["q_bias"], leaves["k_bias"],
                                 leaves["angles"][0, a0:b0], leaves["d"], leaves["z"][0, a0:b0],
                                 chunk=chunk, taps=taps)
    cots = (args["dout"][0, a0:b0].double(), args["dfinal_angle"][s].double(),
            args["dfinal_ssm"][s].double(), args["dfinal_k"][s].double(), args["dfinal_v"][s].double())
    loss = sum((o * c).sum() for o, c in zip(out, cots))
    loss.backward()
    A = args["angles"].shape[3]
    errors = {}
    # The hand-off of chunk j is read by chunk j + 1 from its entering state and that state's gradient.
    hand = [_cross(taps.entering[j + 1].grad, taps.entering[j + 1].detach(), A) for j in range(len(taps.hand))]
    errors["hand-off dLam"] = max([rel(h, t.grad) for h, t in zip(hand, taps.hand)], default=0.0)
    # The final states' angles. d/da R(a) x = J R(a) x with J (x0, x1) = (-x1, x0), so each
    # rotation into the absolute frame gives -cross(cotangent, rotated result).
    final, final_in = taps.final[0], taps.final_in[0]
    d_final = cots[1] - _cross(cots[3].unsqueeze(1), out[3].detach().unsqueeze(1), A)
    d_final_in = -_cross(cots[2], out[2].detach(), A)
    errors["final dPhi"] = rel(d_final, final.grad)
    errors["final dPhi_in"] = rel(d_final_in, final_in.grad) if len(taps.lam) > 1 else 0.0
    # Each token's dx = revcumsum-in-chunk(dlam) + carry_j: every chunk's total is in the
    # sequence's angle, every chunk's but the last in the last chunk's entering angle and in a
    # hand-off.
    dx = []
    last = len(taps.lam) - 1
    for j, lam in enumerate(taps.lam):
        carry = d_final + (d_final_in + hand[j] if j < last else 0.0)
        dx.append(torch.flip(torch.cumsum(torch.flip(lam.grad, [1]), 1), [1]) + carry.unsqueeze(1))
    dx = torch.cat(dx, dim=1)                                          # (H, L, A), d loss / d(theta dt)
    dt_seq = args["dt"][0, :, a0:b0].double()
    ang = args["angles"][0, a0:b0].double().transpose(0, 1)
    dangles = dx * dt_seq.unsqueeze(-1) * math.pi * (1 - torch.tanh(ang) ** 2)
    truth = dict(zip(R.RESULT_NAMES, R.reference_fwd_vjp(*R.case_args(case))))
    errors["dangles assembled"] = rel(dangles.transpose(0, 1), truth["dangles"][0, a0:b0])
    return errors


def sequence_forward_absolute(x, c, qh, kh, vh, scale, chunk=C, entering=None):
    """One sequence and all heads in today's absolute frame, chunked, from the per-token angle
    increments x = theta dt (H, L, A) and decay cumsum c (H, L), both leaves of the caller's: y
    (H, L, P) before the gate and the skip terms, final_ssm (H, P, N), final_k (H, N) and the
    unwrapped final angle (H, A). `entering` collects the state entering each chunk."""
    H, L, A = x.shape
    phi = torch.cumsum(x, dim=1)
    qr, kr = R._rotate(qh, phi), R._rotate(kh, phi)
    ks = scale.unsqueeze(-1) * kr
    state = vh.new_zeros(H, vh.shape[-1], qh.shape[-1])
    ys = []
    for a in range(0, L, chunk):
        b = min(a + chunk, L)
        if entering is not None and a > 0:
            state.retain_grad()
            entering.append(state)
        c_prev = c[:, a - 1] if a > 0 else c.new_zeros(H)
        cl = c[:, a:b] - c_prev.unsqueeze(-1)
        causal = torch.ones(b - a, b - a, dtype=torch.bool).tril()
        W = torch.exp((cl.unsqueeze(-1) - cl.unsqueeze(-2)).masked_fill(~causal, float("-inf")))
        y = (W * (qr[:, a:b] @ ks[:, a:b].transpose(1, 2))) @ vh[:, a:b]
        ys.append(y + torch.exp(cl).unsqueeze(-1) * (qr[:, a:b] @ state.transpose(1, 2)))
        w_end = torch.exp(cl[:, -1:] - cl)
        state = torch.exp(cl[:, -1])[:, None, None] * state + \
            (vh[:, a:b] * w_end.unsqueeze(-1)).transpose(1, 2) @ ks[:, a:b]
    return torch.cat(ys, dim=1), state, kr[:, -1], phi[:, -1]


def early_carries_check(seed=5, L=150, H=2, chunk=C):
    """Today's backward hands two sums of per-token gradients from each chunk's job to the previous
    one through the tail records, late in the job: the angle's (big_phi_carry, the sum of dphi
    over all later tokens) and the decay's (dadt_run, the sum of dc over all later tokens, which
    is dadt at the next chunk's first token). Both are functions of what the next chunk's job
    holds at its state-gradient update, its entering state S and that state's gradient G:
      sum_{t > b_j} dphi_t = cross(G, S) + K,  K = dfinal_angle - cross(dfinal_k, final_k)
                                                   - cross(dfinal_ssm, final_ssm),
      sum_{t > b_j} dc_t   = sum(G * S),
    because turning every later token by one angle (or shifting every later c by one amount) is
    the same as turning (scaling) S, plus, for the angle, turning the final states. Checked here
    by autograd in float64 on random tensors (a synthetic loss with the operator's cotangent
    shapes). Returns the worst relative error of each identity over the chunk boundaries."""
    g = torch.Generator().manual_seed(seed)
    N, P, A = 16, 8, 4

    def rnd(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    x = (0.3 * rnd(H, L, A)).requires_grad_(True)
    c = torch.cumsum(-0.05 * torch.rand(H, L, generator=g, dtype=torch.float64), 1).requires_grad_(True)
    qh, kh, vh, scale = rnd(H, L, N), rnd(H, L, N), rnd(H, L, P), torch.rand(H, L, generator=g, dtype=torch.float64)
    dy, dssm, dk, dangle = rnd(H, L, P), rnd(H, P, N), rnd(H, N), rnd(H, A)
    entering = []
    y, ssm, k_last, phi_last = sequence_forward_absolute(x, c, qh, kh, vh, scale, chunk, entering)
    loss = (y * dy).sum() + (ssm * dssm).sum() + (k_last * dk).sum() + (phi_last * dangle).sum()
    loss.backward()
    K = dangle - _cross(dk.unsqueeze(1), k_last.detach().unsqueeze(1), A) - _cross(dssm, ssm.detach(), A)
    later_phi = x.grad                                  # phi = cumsum(x): d/dx_s = sum_{t >= s} dphi_t
    later_c = torch.flip(torch.cumsum(torch.flip(c.grad, [1]), 1), [1])
    angle_err = decay_err = 0.0
    for j, S in enumerate(entering):
        first = (j + 1) * chunk                                              # first token of chunk j + 1
        angle_err = max(angle_err, rel(_cross(S.grad, S.detach(), A) + K, later_phi[:, first]))
        decay_err = max(decay_err, rel((S.grad * S.detach()).sum((-1, -2)), later_c[:, first]))
    return {"angle carry": angle_err, "decay carry": decay_err}


def result_errors(case, chunk=C):
    """Each of the sixteen results of the local form against the reference's: rel-L2, the final
    angle compared on the circle as SPEC compares it."""
    got = vjp_local(case, chunk)
    truth = R.reference_fwd_vjp(*R.case_args(case))
    return {name: R.rel_l2(x, t, circular=name == "final_angle_state")[0]
            for name, x, t in zip(R.RESULT_NAMES, got, truth)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lens", default="150,33,64,1,0,97")
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=5)
    a = ap.parse_args()
    lens = [int(x) for x in a.lens.split(",")]
    case = R.make_case(lens, seed=a.seed, H=a.heads)
    errors = result_errors(case)
    for name, e in errors.items():
        print(f"{name:18s} rel-L2 against the reference {e:.2e}")
    for s, n in enumerate(lens):
        if n > 0:
            for what, e in carries_check(case, s).items():
                print(f"sequence {s} ({n} tokens): {what:18s} {e:.2e}")
    for what, e in early_carries_check().items():
        print(f"absolute frame, early {what}: {e:.2e}")
    print(f"worst result error {max(errors.values()):.2e}")


if __name__ == "__main__":
    main()
