"""Reference mathematics, input generator, eager baseline and error metrics for the Mamba-3 SISO
varlen joint-states full-VJP operator.

This module depends on torch and math only, so it can be imported (and tested) on machines that
have neither a GPU nor the compiled operator library.

- ``make_case``            the case generator (random draws in a fixed order).
- ``layer_forward``        the differentiable forward: masked quadratic form, one loop over sequences.
- ``layer_forward_chunked`` the same forward in chunked form, memory linear in the length.
- ``reference_fwd_vjp``    the truth: ``layer_forward`` in float64 plus its VJP by autograd
                           (``chunked=True``: ``layer_forward_chunked``, for long sequences).
- ``reference_fwd_vjp_with_states``  the same truth for a call that starts from initial states
                           (the state a previous call on the same sequences handed on), which
                           also returns the gradients of those four states.
- ``baseline_fwd_vjp``     the frozen eager fp32 baseline (same form in fp32, results cast).
- ``compare``              the pass/fail metrics for one result against the truth.
"""

from __future__ import annotations

import math

import torch

ARG_NAMES = (
    "q", "k", "v", "adt", "dt", "trap", "q_bias", "k_bias", "angles", "d", "z",
    "cu_seqlens", "dout", "dfinal_angle", "dfinal_ssm", "dfinal_k", "dfinal_v",
)
# The inputs that receive a gradient, in argument (and gradient) order.
DIFF_ARG_NAMES = ARG_NAMES[:11]
COTANGENT_NAMES = ARG_NAMES[12:]

FORWARD_NAMES = ("output", "final_angle_state", "final_ssm_state", "final_k_state", "final_v_state")
GRAD_NAMES = ("dq", "dk", "dv", "dadt", "ddt", "dtrap", "dq_bias", "dk_bias", "dangles", "dd", "dz")
RESULT_NAMES = FORWARD_NAMES + GRAD_NAMES

# Initial states: the final states of a previous call, in the same order and shapes
# ((S,H,A), (S,H,P,N), (S,H,N), (S,H,P)). See ``_entering_state`` for what they mean.
INITIAL_STATE_NAMES = ("initial_angle_state", "initial_ssm_state", "initial_k_state",
                       "initial_v_state")
INITIAL_GRAD_NAMES = tuple("d" + n for n in INITIAL_STATE_NAMES)
RESULT_WITH_STATES_NAMES = RESULT_NAMES + INITIAL_GRAD_NAMES

_BF16, _F32 = torch.bfloat16, torch.float32
ARG_DTYPES = {
    "q": _BF16, "k": _BF16, "v": _BF16, "adt": _F32, "dt": _F32, "trap": _BF16,
    "q_bias": _F32, "k_bias": _F32, "angles": _BF16, "d": _F32, "z": _BF16,
    "cu_seqlens": torch.int32, "dout": _BF16, "dfinal_angle": _BF16, "dfinal_ssm": _F32,
    "dfinal_k": _F32, "dfinal_v": _BF16,
}
RESULT_DTYPES = {
    "output": _BF16, "final_angle_state": _BF16, "final_ssm_state": _F32, "final_k_state": _F32,
    "final_v_state": _BF16,
    **{"d" + name: ARG_DTYPES[name] for name in DIFF_ARG_NAMES},
}

# Which dimension of each result indexes tokens (per-token tensors) or sequences (final states);
# None means the tensor is a sum over all sequences and only the overall error applies.
TOKEN_DIM = {"output": 1, "dq": 1, "dk": 1, "dv": 1, "dangles": 1, "dz": 1,
             "dadt": 2, "ddt": 2, "dtrap": 2}
SEQUENCE_DIM = {"final_angle_state": 0, "final_ssm_state": 0, "final_k_state": 0,
                "final_v_state": 0}
GLOBAL_RESULTS = ("dq_bias", "dk_bias", "dd")

FAMILY = {"H": 32, "G": 1, "N": 128, "P": 64, "A": 32}
TWO_PI = 2.0 * math.pi

REL_L2_TOL = 1e-2
SEQ_REL_L2_TOL = 2e-2


# ------------------------------------------------------------------------------------------------
# The generator
# ------------------------------------------------------------------------------------------------

def _rms(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6)


def make_case(seq_lens, seed, device="cpu", *, H=FAMILY["H"], N=FAMILY["N"], P=FAMILY["P"],
              A=FAMILY["A"]):
    """Draw the 17 arguments of one case, by name, on ``device``.

    The draws happen on the CPU in float32 in a fixed order, so a (seq_lens, seed) pair names the
    same random numbers everywhere; changing the order or a dtype changes every case. Only dt (and
    adt = a * dt) can differ by an ulp between machines, because torch.exp is not correctly
    rounded and its vector code differs between CPUs and builds.
    """
    seq_lens = [int(x) for x in seq_lens]
    if any(x < 0 for x in seq_lens):
        raise ValueError(f"negative sequence length in {seq_lens}")
    if 2 * A > N:
        raise ValueError(f"need 2A <= N, got A={A}, N={N}")
    G = FAMILY["G"]
    T, S = sum(seq_lens), len(seq_lens)
    g = torch.Generator().manual_seed(int(seed))

    def rand(*shape):
        return torch.rand(*shape, generator=g, dtype=torch.float32)

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float32)

    lo, hi = math.log(0.001), math.log(0.1)
    dt = torch.exp(rand(1, H, T) * (hi - lo) + lo)
    a = -(rand(1, H, T) * 15 + 1)
    q = _rms(randn(1, T, G, N)).to(_BF16)
    k = _rms(randn(1, T, G, N)).to(_BF16)
    v = randn(1, T, H, P).to(_BF16)
    adt = a * dt
    trap = (rand(1, H, T) * 4 - 2).to(_BF16)
    q_bias = 0.5 * randn(H, N)
    k_bias = 0.5 * randn(H, N)
    angles = randn(1, T, H, A).to(_BF16)
    d = randn(H)
    z = randn(1, T, H, P).to(_BF16)
    cu_seqlens = torch.tensor([0] + seq_lens, dtype=torch.int64).cumsum(0).to(torch.int32)
    dout = randn(1, T, H, P).to(_BF16)
    dfinal_angle = randn(S, H, A).to(_BF16)
    dfinal_ssm = randn(S, H, P, N)
    dfinal_k = randn(S, H, N)
    dfinal_v = randn(S, H, P).to(_BF16)

    case = dict(q=q, k=k, v=v, adt=adt, dt=dt, trap=trap, q_bias=q_bias, k_bias=k_bias,
                angles=angles, d=d, z=z, cu_seqlens=cu_seqlens, dout=dout,
                dfinal_angle=dfinal_angle, dfinal_ssm=dfinal_ssm, dfinal_k=dfinal_k,
                dfinal_v=dfinal_v)
    return {name: case[name].to(device) for name in ARG_NAMES}


def case_args(case) -> tuple:
    """The 17 arguments of a case dict in signature order."""
    return tuple(case[name] for name in ARG_NAMES)


def _as_args(args) -> tuple:
    if len(args) == 1 and isinstance(args[0], dict):
        return case_args(args[0])
    if len(args) != len(ARG_NAMES):
        raise TypeError(f"expected {len(ARG_NAMES)} arguments, got {len(args)}")
    return tuple(args)


def _boundaries(cu_seqlens: torch.Tensor, T: int) -> list:
    cu = [int(x) for x in cu_seqlens.tolist()]
    if cu_seqlens.dim() != 1 or len(cu) < 1 or cu[0] != 0 or cu[-1] != T:
        raise ValueError(f"cu_seqlens must be 1-D, start at 0 and end at T={T}; got {cu}")
    if any(b < a for a, b in zip(cu, cu[1:])):
        raise ValueError(f"cu_seqlens must not decrease; got {cu}")
    return cu


# ------------------------------------------------------------------------------------------------
# The forward (masked quadratic form)
# ------------------------------------------------------------------------------------------------

def _rotate(x: torch.Tensor, phi: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (2i, 2i+1), i < A, of the last dim of x by phi[..., i]; other entries pass."""
    A = phi.shape[-1]
    pairs = x[..., : 2 * A].unflatten(-1, (A, 2))
    x0, x1 = pairs[..., 0], pairs[..., 1]
    cos, sin = torch.cos(phi), torch.sin(phi)
    rotated = torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)
    return torch.cat((rotated, x[..., 2 * A:]), dim=-1)


def _wrap_2pi(x: torch.Tensor) -> torch.Tensor:
    return x - TWO_PI * torch.floor(x / TWO_PI)                          # floor has zero gradient


def _entering_state(init, dt, p):
    """The state entering a sequence that starts from ``init`` = (angle0, ssm0, k0, v0) of one
    sequence, shapes (H, A), (H, P, N), (H, N), (H, P); dt and p = sigmoid(trap) are (H, L).

    Derivation. The recurrence of SPEC section 2 at the first token, with the previous call's
    last token as token -1 (S_{-1} = ssm0, kr_{-1} = k0, already rotated, v_{-1} = v0), is

        S_0 = a_0 S_{-1} + b_0 v_{-1} kr_{-1}^T + g_0 v_0 kr_0^T
            = a_0 E + g_0 v_0 kr_0^T,     E = ssm0 + (1 - p_0) dt_0 v0 k0^T,

    since b_0 = (1 - p_0) dt_0 a_0. Every later step only decays E, so unrolling gives

        S_t = exp(c[t]) E + (the state of the same tokens started from zero),

    and with y_t = S_t qr_t + d v_t:

        y[t]            = (the stateless form) + exp(c[t]) E qr[t],
        final_ssm_state = (the stateless form) + exp(c[L-1]) E.

    The stateless form keeps its gamma and qk terms unchanged: gamma[t] carries the (1-p) term
    of token t into token t+1, and qk[t] removes the part of it that the quadratic form would
    otherwise let token t read. The previous call's last token had gamma = 0 there, so its
    (1-p) term was left pending in k0 and v0; here it is the b_0 part of E, which is in S_0
    before token 0 reads it, so no qk-like correction applies to it. The angles continue the previous cumsum:
    phi[t] = angle0 + sum_{s<=t} theta[s] dt[s], so k0 and every kr[t] are rotated consistently;
    only cos, sin and the wrapped final angle use phi, so angle0 matters modulo 2pi only.
    """
    _, ssm0, k0, v0 = init
    gamma_prev = dt[:, 0] * (1 - p[:, 0])                                # (H,)
    return ssm0 + gamma_prev[:, None, None] * (v0.unsqueeze(-1) * k0.unsqueeze(-2))


def _passed_states(init):
    """The final states of an empty sequence that starts from ``init``: nothing happens, so the
    states pass through, the (1-p) term of the last token still pending in the K and V states;
    the angle is wrapped like every final angle."""
    angle0, ssm0, k0, v0 = init
    return _wrap_2pi(angle0), ssm0, k0, v0


def _check_initial_states(initial_states, S, H, P, N, A):
    if initial_states is None:
        return None
    states = tuple(initial_states)
    shapes = ((S, H, A), (S, H, P, N), (S, H, N), (S, H, P))
    if len(states) != len(shapes):
        raise ValueError(f"initial_states must hold {len(shapes)} tensors "
                         f"{INITIAL_STATE_NAMES}, got {len(states)}")
    for name, x, shape in zip(INITIAL_STATE_NAMES, states, shapes):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a tensor, got {type(x).__name__}")
        if tuple(x.shape) != shape:
            raise ValueError(f"{name} must have shape {shape}, got {tuple(x.shape)}")
    return states


def _token_terms(q, k, v, dt, trap, q_bias, k_bias, angles, init):
    """The per-token quantities of SPEC section 2 for one sequence and all heads: the wrapped
    angle sums phi (H, L, A), p (H, L), the correction qk (H, L) and the rotated qr, kr and the
    scaled ks (H, L, N). ``init`` as in ``_sequence_forward``."""
    L, G, N = q.shape
    H = v.shape[1]

    def per_head(x):  # (L, G, N) -> (H, L, N); expand, so the backward sums over each group
        return x.unsqueeze(2).expand(L, G, H // G, N).reshape(L, H, N).transpose(0, 1)

    theta = math.pi * torch.tanh(angles.transpose(0, 1))                  # (H, L, A)
    phi = torch.cumsum(theta * dt.unsqueeze(-1), dim=1)
    if init is not None:
        phi = init[0].unsqueeze(1) + phi
    phi = phi - TWO_PI * torch.floor(phi / TWO_PI)                       # floor has zero gradient

    p = torch.sigmoid(trap)                                              # (H, L)
    gamma = torch.cat((dt[:, 1:] * (1 - p[:, 1:]), dt.new_zeros(H, 1)), dim=1)
    scale = dt * p + gamma

    qh = per_head(q) + q_bias.unsqueeze(1)                               # (H, L, N)
    kh = per_head(k) + k_bias.unsqueeze(1)
    qk = (qh * kh).sum(-1) * gamma                                       # (H, L)
    qr = _rotate(qh, phi)
    kr = _rotate(kh, phi)
    ks = scale.unsqueeze(-1) * kr
    return phi, p, qk, qr, kr, ks


def _sequence_forward(q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z, init=None):
    """One non-empty sequence, all heads at once.

    Shapes: q, k (L, G, N); v, z (L, H, P); adt, dt, trap (H, L); angles (L, H, A);
    q_bias, k_bias (H, N); d (H,). Returns output (L, H, P) and the four final states of the
    sequence: angle (H, A), ssm (H, P, N), k (H, N), v (H, P). ``init`` is None or this
    sequence's (angle0, ssm0, k0, v0); see ``_entering_state``. With None, the operations are
    exactly those of the stateless form, so the baseline built on it is unchanged.
    """
    L = q.shape[0]
    phi, p, qk, qr, kr, ks = _token_terms(q, k, v, dt, trap, q_bias, k_bias, angles, init)

    c = torch.cumsum(adt, dim=1)                                         # (H, L)
    causal = torch.ones(L, L, dtype=torch.bool, device=c.device).tril()
    # Mask before exp: above the diagonal c[t] - c[s] > 0 can overflow, and inf * 0 is NaN.
    W = torch.exp((c.unsqueeze(2) - c.unsqueeze(1)).masked_fill(~causal, float("-inf")))
    M = W * (qr @ ks.transpose(1, 2))                                    # (H, L, L)

    vh = v.transpose(0, 1)                                               # (H, L, P)
    y = M @ vh + (d.unsqueeze(1) - qk).unsqueeze(-1) * vh
    if init is not None:
        E = _entering_state(init, dt, p)                                 # (H, P, N)
        # E sits before token 0's decay a_0, so token t reads it through exp(c[t]).
        decay = torch.exp(c)                                             # (H, L)
        y = y + decay.unsqueeze(-1) * (qr @ E.transpose(1, 2))
    zh = z.transpose(0, 1)
    output = (y * zh * torch.sigmoid(zh)).transpose(0, 1)                # (L, H, P)

    w_last = W[:, -1, :]                                                 # exp(c[L-1] - c[s])
    final_ssm = (vh * w_last.unsqueeze(-1)).transpose(1, 2) @ ks         # (H, P, N)
    if init is not None:
        final_ssm = final_ssm + decay[:, -1, None, None] * E
    return output, phi[:, -1], final_ssm, kr[:, -1], v[-1]


def layer_forward(q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z, cu_seqlens, *,
                  initial_states=None):
    """The differentiable forward of SPEC section 2, in the dtype of the given inputs.

    Returns (output, final_angle_state, final_ssm_state, final_k_state, final_v_state).

    ``initial_states`` is None (every sequence starts from nothing, as in SPEC) or a tuple
    (angle0 (S,H,A), ssm0 (S,H,P,N), k0 (S,H,N), v0 (S,H,P)): row i is the state sequence i
    starts from, normally the final states of a previous call on the same sequences, angle0
    wrapped or not. The results are differentiable with respect to these tensors too. Passing a
    previous call's final states continues the recurrence exactly; ``_entering_state`` derives
    how.

    Empty sequences contribute no tokens. Their final states are all zero without initial
    states, and the initial states (angle wrapped into [0, 2pi)) with them.
    """
    return _per_sequence(_sequence_forward, q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z,
                         cu_seqlens, initial_states)


def _per_sequence(sequence_forward, q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z,
                  cu_seqlens, initial_states):
    """Runs ``sequence_forward`` on every packed sequence and assembles the five results; empty
    sequences get zero final states, or their initial states passed through."""
    _, T, G, N = q.shape
    H, P, A = v.shape[2], v.shape[3], angles.shape[3]
    if H % G:
        raise ValueError(f"H={H} is not a multiple of G={G}")
    if 2 * A > N:
        raise ValueError(f"need 2A <= N, got A={A}, N={N}")
    cu = _boundaries(cu_seqlens, T)
    S = len(cu) - 1
    states = _check_initial_states(initial_states, S, H, P, N, A)

    outputs, fa, fs, fk, fv = [], [], [], [], []
    for i in range(S):
        a, b = cu[i], cu[i + 1]
        init = None if states is None else tuple(x[i] for x in states)
        if a == b:
            if init is None:
                fa.append(angles.new_zeros(H, A))
                fs.append(v.new_zeros(H, P, N))
                fk.append(k.new_zeros(H, N))
                fv.append(v.new_zeros(H, P))
            else:
                for xs, x in zip((fa, fs, fk, fv), _passed_states(init)):
                    xs.append(x)
            continue
        o, a_state, s_state, k_state, v_state = sequence_forward(
            q[0, a:b], k[0, a:b], v[0, a:b], adt[0, :, a:b], dt[0, :, a:b], trap[0, :, a:b],
            q_bias, k_bias, angles[0, a:b], d, z[0, a:b], init)
        outputs.append(o)
        fa.append(a_state)
        fs.append(s_state)
        fk.append(k_state)
        fv.append(v_state)

    output = torch.cat(outputs, dim=0).unsqueeze(0) if outputs else v.new_zeros(1, 0, H, P)

    def stack(xs, empty_shape, like):
        return torch.stack(xs) if xs else like.new_zeros(0, *empty_shape)

    return (output, stack(fa, (H, A), angles), stack(fs, (H, P, N), v), stack(fk, (H, N), k),
            stack(fv, (H, P), v))


# ------------------------------------------------------------------------------------------------
# The forward in chunked form (memory linear in the sequence length)
# ------------------------------------------------------------------------------------------------
# The quadratic form above holds L x L x H values per sequence, which rules it out as the truth for
# long sequences (32768 tokens need 275 GB in float64 for W alone). The chunked form below computes
# the same five results through the state entering each chunk, so its memory is
# O(L H (N + P + chunk) + chunks H P N). It is kept apart from _sequence_forward so that the frozen
# baseline's code path stays exactly as it was.

DEFAULT_CHUNK = 256


def _sequence_forward_chunked(q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z, chunk,
                              init=None, matmul=torch.matmul):
    """One non-empty sequence, all heads at once, in chunks of ``chunk`` tokens.

    Shapes, ``init`` and results as in ``_sequence_forward``. ``matmul`` computes the four tile
    products (scores, intra-chunk outputs, chunk states, inter-chunk outputs); a study of
    operand precision passes one that rounds its operands like a tensor core would.
    """
    L, G, N = q.shape
    H, P = v.shape[1], v.shape[2]
    # Everything up to ks is per token (or a sequence-long cumsum) and matches the quadratic form.
    phi, p, qk, qr, kr, ks = _token_terms(q, k, v, dt, trap, q_bias, k_bias, angles, init)
    vh = v.transpose(0, 1)                                               # (H, L, P)
    c = torch.cumsum(adt, dim=1)                                         # (H, L)

    # A sequence shorter than the chunk is one chunk of its own length: padding it would only
    # spend memory on rows that are thrown away.
    C = min(chunk, L)
    nc = -(-L // C)
    pad = nc * C - L
    # Padded tokens carry v = ks = qr = 0, so they add nothing to any state or output; their c
    # repeats c[L-1], so the last chunk's end decay is still read at its last row and no pad makes
    # an exponent grow.
    qr_c = torch.cat((qr, qr.new_zeros(H, pad, N)), dim=1).unflatten(1, (nc, C))    # (H, nc, C, N)
    ks_c = torch.cat((ks, ks.new_zeros(H, pad, N)), dim=1).unflatten(1, (nc, C))
    v_c = torch.cat((vh, vh.new_zeros(H, pad, P)), dim=1).unflatten(1, (nc, C))     # (H, nc, C, P)
    c_c = torch.cat((c, c[:, -1:].expand(H, pad)), dim=1).unflatten(1, (nc, C))     # (H, nc, C)

    # Decays inside a chunk are taken relative to the cumsum just before the chunk (0 before the
    # first): these differences stay small where c itself grows with the sequence.
    c_prev = torch.cat((c_c.new_zeros(H, 1), c_c[:, :-1, -1]), dim=1)               # (H, nc)
    cl = c_c - c_prev.unsqueeze(-1)

    # Intra-chunk part: the quadratic form restricted to each chunk, all chunks at once.
    causal = torch.ones(C, C, dtype=torch.bool, device=c.device).tril()
    # Mask before exp: above the diagonal the difference can be positive and overflow (inf * 0).
    W = torch.exp((cl.unsqueeze(-1) - cl.unsqueeze(-2)).masked_fill(~causal, float("-inf")))
    M = W * matmul(qr_c, ks_c.transpose(-1, -2))                         # (H, nc, C, C)
    y_c = matmul(M, v_c)                                                 # (H, nc, C, P)

    # What each chunk adds to the state it hands on, and how much the state decays across it.
    w_end = torch.exp(cl[..., -1:] - cl)                                 # exp(c[b-1] - c[s])
    U = matmul((v_c * w_end.unsqueeze(-1)).transpose(-1, -2), ks_c)      # (H, nc, P, N)
    alpha = torch.exp(cl[..., -1]).unsqueeze(-1).unsqueeze(-1)           # (H, nc, 1, 1)

    # The recurrence over chunks is the only sequential step; it runs over chunks, not tokens.
    # An initial state is simply the state entering the first chunk (see _entering_state).
    state = U.new_zeros(H, P, N) if init is None else _entering_state(init, dt, p)
    entering = []
    for j in range(nc):
        entering.append(state)
        state = alpha[:, j] * state + U[:, j]
    S_in = torch.stack(entering, dim=1)                                  # (H, nc, P, N)

    # Inter-chunk part: the state entering the chunk, decayed to each token and read by qr.
    y_c = y_c + torch.exp(cl).unsqueeze(-1) * matmul(qr_c, S_in.transpose(-1, -2))

    y = y_c.flatten(1, 2)[:, :L] + (d.unsqueeze(1) - qk).unsqueeze(-1) * vh
    zh = z.transpose(0, 1)
    output = (y * zh * torch.sigmoid(zh)).transpose(0, 1)                # (L, H, P)
    return output, phi[:, -1], state, kr[:, -1], v[-1]


def layer_forward_chunked(q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z, cu_seqlens,
                          chunk=DEFAULT_CHUNK, *, initial_states=None, matmul=torch.matmul):
    """``layer_forward`` in chunked form: the same five results, differentiable, in the dtype of
    the given inputs, with memory linear in the sequence length.

    ``chunk`` is the chunk length in tokens (any positive integer; it changes the summation order
    only). Each sequence is its own set of chunks: chunks never straddle a boundary.
    ``initial_states`` as in ``layer_forward``; ``matmul`` as in ``_sequence_forward_chunked``.
    """
    chunk = int(chunk)
    if chunk < 1:
        raise ValueError(f"chunk must be a positive number of tokens, got {chunk}")

    def sequence_forward(*per_sequence_args):
        *inputs, init = per_sequence_args
        return _sequence_forward_chunked(*inputs, chunk, init, matmul)

    return _per_sequence(sequence_forward, q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z,
                         cu_seqlens, initial_states)


def _fwd_vjp(args, dtype, forward=layer_forward, with_states=False, initial_states=None):
    """Forward and VJP in ``dtype``. ``with_states``: the forward starts from ``initial_states``
    (zeros when None), which become leaves too, and their four gradients follow the 11."""
    args = _as_args(args)
    named = dict(zip(ARG_NAMES, args))
    if with_states:
        S = named["cu_seqlens"].shape[0] - 1
        _, _, H, P = named["v"].shape
        N, A = named["q"].shape[3], named["angles"].shape[3]
        states = _check_initial_states(initial_states, S, H, P, N, A)
        if states is None:
            like = named["v"]
            states = tuple(like.new_zeros(shape, dtype=dtype)
                           for shape in ((S, H, A), (S, H, P, N), (S, H, N), (S, H, P)))
    with torch.enable_grad():
        leaves = [named[n].detach().to(dtype).requires_grad_(True) for n in DIFF_ARG_NAMES]
        if with_states:
            state_leaves = [x.detach().to(dtype).requires_grad_(True) for x in states]
            outs = forward(*leaves, named["cu_seqlens"], initial_states=tuple(state_leaves))
            leaves = leaves + state_leaves
        else:
            outs = forward(*leaves, named["cu_seqlens"])
        cots = [named[n].detach().to(dtype) for n in COTANGENT_NAMES]
        # With only empty sequences nothing depends on the inputs; autograd.grad refuses that.
        pairs = [(o, c) for o, c in zip(outs, cots) if o.requires_grad]
        if pairs:
            grads = torch.autograd.grad([o for o, _ in pairs], leaves,
                                        grad_outputs=[c for _, c in pairs], allow_unused=True)
        else:
            grads = [None] * len(leaves)
    grads = [torch.zeros_like(x) if g is None else g for g, x in zip(grads, leaves)]
    return tuple(o.detach() for o in outs) + tuple(grads)


def reference_fwd_vjp(*args, dtype=torch.float64, chunked=False, chunk=None, matmul=None):
    """The truth: forward and full VJP in ``dtype`` (float64) on the given input values.

    Takes the 17 arguments (or one case dict) and returns the 16 results in RESULT_NAMES order,
    all in ``dtype``, on the inputs' device. final_angle_state is phi[L-1] mod 2pi, in [0, 2pi).

    By default the forward is the masked quadratic form (``layer_forward``). ``chunked=True``, or
    a ``chunk`` length, uses ``layer_forward_chunked`` instead (chunks of ``chunk`` tokens,
    DEFAULT_CHUNK when not given): the same results to rounding, with memory linear in the
    sequence length, for sequences too long for the quadratic form. ``matmul`` (chunked form
    only) replaces its tile products, for precision studies.
    """
    if chunk is None and not chunked and matmul is None:
        return _fwd_vjp(args, dtype)
    size = DEFAULT_CHUNK if chunk is None else int(chunk)
    product = torch.matmul if matmul is None else matmul
    return _fwd_vjp(args, dtype,
                    lambda *x: layer_forward_chunked(*x, chunk=size, matmul=product))


def reference_fwd_vjp_with_states(*args, initial_states=None, dtype=torch.float64, chunked=False,
                                  chunk=None):
    """The truth for a call that starts from initial states: forward and full VJP in ``dtype``.

    Takes the 17 arguments (or one case dict) and ``initial_states`` = (angle0 (S,H,A),
    ssm0 (S,H,P,N), k0 (S,H,N), v0 (S,H,P)), typically the final states of a previous call on the
    same sequences (see ``layer_forward``); None means all-zero states. Returns 20 results in
    RESULT_WITH_STATES_NAMES order, all in ``dtype``: the 16 of ``reference_fwd_vjp``, then the
    gradients of the four initial states under the same cotangents (dout, dfinal_*). To chain
    calls, feed these four gradients to the previous call as its dfinal_* cotangents.

    With all-zero states, the 16 results are those of ``reference_fwd_vjp`` (to rounding; the
    extra terms are exact zeros). ``chunked`` and ``chunk`` as in ``reference_fwd_vjp``.
    """
    if chunk is None and not chunked:
        return _fwd_vjp(args, dtype, with_states=True, initial_states=initial_states)
    size = DEFAULT_CHUNK if chunk is None else int(chunk)
    return _fwd_vjp(args, dtype,
                    lambda *x, **kw: layer_forward_chunked(*x, chunk=size, **kw),
                    with_states=True, initial_states=initial_states)


def baseline_fwd_vjp(*args):
    """The frozen eager fp32 baseline of SPEC section 6.

    The same masked quadratic form in fp32, one Python loop over sequences, VJP by
    torch.autograd.grad, results cast to the contract dtypes. The speedup of the solver is
    measured against this function, so editing ``layer_forward`` changes every score.
    """
    results = _fwd_vjp(args, torch.float32)
    return tuple(r.to(RESULT_DTYPES[n]) for n, r in zip(RESULT_NAMES, results))


# ------------------------------------------------------------------------------------------------
# Metrics
# ------------------------------------------------------------------------------------------------

def wrap_angle(x: torch.Tensor) -> torch.Tensor:
    """Map angle differences into [-pi, pi)."""
    return torch.remainder(x + math.pi, TWO_PI) - math.pi


def rel_l2(x: torch.Tensor, truth: torch.Tensor, circular: bool = False):
    """(error, is_absolute): ||x - truth|| / ||truth|| in float64, or ||x - truth|| when
    ||truth|| == 0 (a relative error is undefined there, so the absolute one is reported)."""
    x = x.detach().to(device=truth.device, dtype=torch.float64)
    t = truth.detach().to(torch.float64)
    diff = x - t
    if circular:
        diff = wrap_angle(diff)
    num = torch.linalg.vector_norm(diff).item()
    den = torch.linalg.vector_norm(t).item()
    if den == 0.0:
        return num, True
    return num / den, False


def _as_named(results, what):
    if isinstance(results, dict):
        missing = [n for n in RESULT_NAMES if n not in results]
        if missing:
            raise ValueError(f"{what} lacks {missing}")
        return [results[n] for n in RESULT_NAMES]
    results = list(results)
    if len(results) != len(RESULT_NAMES):
        raise ValueError(f"{what} has {len(results)} values, expected {len(RESULT_NAMES)}")
    return results


def compare(result, truth, cu_seqlens, *, device=None, tol=REL_L2_TOL, seq_tol=SEQ_REL_L2_TOL,
            check_dtype=True):
    """Check one result against the truth with the criteria of SPEC section 4.

    ``result`` and ``truth`` are 16-tuples in RESULT_NAMES order (or dicts by name). The expected
    device is ``device`` or else that of ``cu_seqlens`` (an input, and results live with the
    inputs). Returns ``{"ok": bool, "failures": [str], "tensors": {name: {...}}}`` where each
    tensor entry has rel_l2, worst_seq_rel_l2, worst_seq, absolute / seq_absolute (True where
    ||truth|| == 0 made the overall error / some sequence's error absolute), dtype_ok, shape_ok,
    device_ok, finite, ok and reasons.
    """
    truth = _as_named(truth, "truth")
    report = {"ok": True, "failures": [], "tensors": {}}
    try:
        result = _as_named(result, "result")
    except (TypeError, ValueError) as e:
        report["ok"] = False
        report["failures"].append(f"result: {e}")
        return report

    cu = [int(x) for x in cu_seqlens.tolist()]
    want_device = torch.device(device) if device is not None else cu_seqlens.device

    for name, x, t in zip(RESULT_NAMES, result, truth):
        entry = {"rel_l2": None, "worst_seq_rel_l2": None, "worst_seq": None,
                 "absolute": False, "seq_absolute": False,
                 "dtype_ok": False, "shape_ok": False, "device_ok": False, "finite": False,
                 "ok": False, "reasons": []}
        report["tensors"][name] = entry
        if not isinstance(x, torch.Tensor):
            entry["reasons"].append(f"not a tensor ({type(x).__name__})")
        else:
            entry["dtype_ok"] = (not check_dtype) or x.dtype == RESULT_DTYPES[name]
            entry["shape_ok"] = tuple(x.shape) == tuple(t.shape)
            entry["device_ok"] = _same_device(x.device, want_device)
            if not entry["dtype_ok"]:
                entry["reasons"].append(f"dtype {x.dtype} != {RESULT_DTYPES[name]}")
            if not entry["shape_ok"]:
                entry["reasons"].append(f"shape {tuple(x.shape)} != {tuple(t.shape)}")
            if not entry["device_ok"]:
                entry["reasons"].append(f"device {x.device} != {want_device}")
            if entry["shape_ok"]:
                entry["finite"] = bool(torch.isfinite(x).all().item())
                if not entry["finite"]:
                    entry["reasons"].append("non-finite values")
                _errors(entry, name, x, t, cu, tol, seq_tol)
        entry["ok"] = not entry["reasons"]
        if not entry["ok"]:
            report["ok"] = False
            report["failures"].append(f"{name}: {'; '.join(entry['reasons'])}")
    return report


def _same_device(a: torch.device, b: torch.device) -> bool:
    if a.type != b.type:
        return False
    # "cuda" and "cuda:0" name the same device when only one is current.
    if a.type == "cuda" and (a.index is None or b.index is None):
        cur = torch.cuda.current_device() if torch.cuda.is_available() else 0
        return (a.index if a.index is not None else cur) == (b.index if b.index is not None else cur)
    return a.index == b.index


def _errors(entry, name, x, t, cu, tol, seq_tol):
    circular = name == "final_angle_state"
    err, absolute = rel_l2(x, t, circular)
    entry["rel_l2"], entry["absolute"] = err, absolute
    if not err <= tol:  # also catches NaN
        entry["reasons"].append(f"{'abs' if absolute else 'rel'}-L2 {err:.3e} > {tol:g}")
    if name in GLOBAL_RESULTS:
        return
    worst, worst_i = 0.0, None
    for i in range(len(cu) - 1):
        if name in TOKEN_DIM:
            a, b = cu[i], cu[i + 1]
            if a == b:
                continue
            dim = TOKEN_DIM[name]
            xs, ts = x.narrow(dim, a, b - a), t.narrow(dim, a, b - a)
        else:
            xs, ts = x[i], t[i]
        e, abs_i = rel_l2(xs, ts, circular)
        entry["seq_absolute"] = entry["seq_absolute"] or abs_i
        if math.isnan(e) or (not math.isnan(worst) and e > worst):  # a NaN sticks
            worst, worst_i = e, i
    entry["worst_seq_rel_l2"], entry["worst_seq"] = worst, worst_i
    if not worst <= seq_tol:
        entry["reasons"].append(f"sequence {worst_i} rel-L2 {worst:.3e} > {seq_tol:g}")
