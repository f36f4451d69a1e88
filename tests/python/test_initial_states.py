"""The float64 truth for calls that start from initial states.

A call that starts from the final states of a previous call on the same sequences must continue
the recurrence of SPEC section 2 exactly: running a sequence in one call, or in several calls that
hand their states on, gives the same outputs, final states and gradients. These tests pin that
down for the reference, so that kernels with initial states have something to be checked against.
"""

import math

import pytest
import torch

from mamba3_jit import reference as R
from recurrence_vjp import autograd_fwd_vjp

SMALL = dict(H=4, N=16, P=8, A=4)   # 2A < N: some pairs pass through unrotated
TINY = dict(H=2, N=8, P=4, A=4)     # 2A == N: every pair is rotated
TOKEN_ARGS = {"q": 1, "k": 1, "v": 1, "angles": 1, "z": 1, "dout": 1, "adt": 2, "dt": 2, "trap": 2}
TOKEN_GRADS = {"output": 1, "dq": 1, "dk": 1, "dv": 1, "dangles": 1, "dz": 1,
               "dadt": 2, "ddt": 2, "dtrap": 2}
SUMMED_GRADS = ("dq_bias", "dk_bias", "dd")
FINAL_COTANGENTS = ("dfinal_angle", "dfinal_ssm", "dfinal_k", "dfinal_v")

TOL = 1e-10


def _random_states(case, seed, angle_range=3.0):
    """States of the right shapes, in float64. The angles are deliberately unwrapped (up to
    angle_range turns either way): only their value modulo 2pi may matter."""
    g = torch.Generator().manual_seed(seed)
    S = case["cu_seqlens"].shape[0] - 1
    _, _, H, P = case["v"].shape
    N, A = case["q"].shape[3], case["angles"].shape[3]

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    angle = (torch.rand(S, H, A, generator=g, dtype=torch.float64) * 2 - 1) * angle_range * R.TWO_PI
    return (angle, 0.5 * randn(S, H, P, N), randn(S, H, N), randn(S, H, P))


def _assert_close(got, want, names, tol=TOL, what=""):
    assert len(got) == len(want) == len(names)
    for name, g, w in zip(names, got, want):
        assert g.shape == w.shape, f"{what}{name}: shape {tuple(g.shape)} != {tuple(w.shape)}"
        err, absolute = R.rel_l2(g, w, name == "final_angle_state")
        assert err <= tol, f"{what}{name}: {'abs' if absolute else 'rel'} err {err:.3e}"


# ------------------------------------------------------------------------------------------------
# No states, or all-zero states, change nothing
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("seq_lens,seed,dims", [
    ([0, 1, 7, 0, 12], 1, SMALL),
    ([65, 1, 0, 64], 2, {}),          # the family shape
])
def test_no_states_and_zero_states_match_the_stateless_reference(seq_lens, seed, dims):
    case = R.make_case(seq_lens, seed, **dims)
    args = [case[n].double() for n in R.DIFF_ARG_NAMES] + [case["cu_seqlens"]]
    for fwd in (R.layer_forward, lambda *x, **kw: R.layer_forward_chunked(*x, chunk=16, **kw)):
        plain = fwd(*args)
        assert all(torch.equal(a, b) for a, b in zip(fwd(*args, initial_states=None), plain))
        zeros = tuple(torch.zeros_like(s) for s in _random_states(case, 0))
        _assert_close(fwd(*args, initial_states=zeros), plain, R.FORWARD_NAMES, tol=1e-15)

    truth = R.reference_fwd_vjp(case)
    zeros = tuple(torch.zeros_like(s) for s in _random_states(case, 0))
    for states in (None, zeros):
        got = R.reference_fwd_vjp_with_states(case, initial_states=states)
        assert len(got) == len(R.RESULT_WITH_STATES_NAMES) == 20
        assert all(r.dtype == torch.float64 for r in got)
        _assert_close(got[:16], truth, R.RESULT_NAMES, tol=1e-15)
        for x, s in zip(got[16:], zeros):
            assert x.shape == s.shape
        # At zero states: the angle and SSM states reach every token of a non-empty sequence;
        # K and V enter only through the bilinear b-term, so each one's gradient vanishes while
        # the other is zero. An empty sequence hands its cotangents straight back.
        full = [i for i, L in enumerate(seq_lens) if L]
        empty = [i for i, L in enumerate(seq_lens) if not L]
        da, ds, dk, dv = got[16:]
        assert bool((da[full].abs().amax(dim=(1, 2)) > 0).all())
        assert bool((ds[full].abs().amax(dim=(1, 2, 3)) > 0).all())
        assert torch.count_nonzero(dk[full]) == 0 and torch.count_nonzero(dv[full]) == 0
        for x, name in zip((da, ds, dk, dv), FINAL_COTANGENTS):
            assert torch.equal(x[empty], case[name].double()[empty]), name


def test_states_change_the_results():
    # Guards every comparison below against states that are silently ignored. Only the last
    # token's V and dd (sum of dy . v) stay as they were; everything else sees the entering
    # state or the continued angle (the final K and dv's final-state term are rotated by it).
    case = R.make_case([5, 9], 3, **SMALL)
    plain = R.reference_fwd_vjp(case)
    got = R.reference_fwd_vjp_with_states(case, initial_states=_random_states(case, 1))
    unchanged = ("final_v_state", "dd")
    for name, a, b in zip(R.RESULT_NAMES, got, plain):
        err = R.rel_l2(a, b, name == "final_angle_state")[0]
        assert (err <= 1e-12) if name in unchanged else (err > 1e-6), f"{name}: {err:.3e}"


# ------------------------------------------------------------------------------------------------
# Against an independent token-by-token recurrence
# ------------------------------------------------------------------------------------------------

def _rotate_pairs(x, phi):
    """Rotation written with an explicit 2x2 matrix per pair, so it shares no code with the
    reference's rotation."""
    A = phi.shape[-1]
    c, s = torch.cos(phi), torch.sin(phi)
    rot = torch.stack((torch.stack((c, -s), -1), torch.stack((s, c), -1)), -2)  # (..., A, 2, 2)
    pairs = x[..., : 2 * A].reshape(*x.shape[:-1], A, 2, 1)
    return torch.cat(((rot @ pairs).reshape(*x.shape[:-1], 2 * A), x[..., 2 * A:]), -1)


def recurrence_forward_with_states(q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z,
                                   angle0, ssm0, k0, v0, cu_seqlens):
    """S_t = a_t S_{t-1} + b_t v_{t-1} kr_{t-1}^T + g_t v_t kr_t^T, y_t = S_t qr_t + d v_t, token
    by token, with S_{-1} = ssm0, kr_{-1} = k0, v_{-1} = v0 and phi_{-1} = angle0: the previous
    call's last token is simply token -1."""
    _, T, G, N = q.shape
    H, P = v.shape[2], v.shape[3]
    assert G == 1
    cu = cu_seqlens.tolist()
    outputs, fa, fs, fk, fv = [], [], [], [], []
    for i in range(len(cu) - 1):
        S, phi, k_prev, v_prev = ssm0[i], angle0[i], k0[i], v0[i]
        for t in range(cu[i], cu[i + 1]):
            dtt, p, a_t = dt[0, :, t], torch.sigmoid(trap[0, :, t]), torch.exp(adt[0, :, t])
            phi = phi + math.pi * torch.tanh(angles[0, t]) * dtt[:, None]
            qr = _rotate_pairs(q[0, t, 0] + q_bias, phi)                 # (H, N)
            kr = _rotate_pairs(k[0, t, 0] + k_bias, phi)
            vt = v[0, t]                                                 # (H, P)
            b_t = (1 - p) * dtt * a_t
            g_t = p * dtt
            S = (a_t[:, None, None] * S
                 + b_t[:, None, None] * v_prev[:, :, None] * k_prev[:, None, :]
                 + g_t[:, None, None] * vt[:, :, None] * kr[:, None, :])
            y = (S * qr[:, None, :]).sum(-1) + d[:, None] * vt
            outputs.append(y * z[0, t] * torch.sigmoid(z[0, t]))
            k_prev, v_prev = kr, vt
        fa.append(torch.remainder(phi, 2 * math.pi))
        fs.append(S)
        fk.append(k_prev)
        fv.append(v_prev)
    output = torch.stack(outputs).unsqueeze(0) if outputs else v.new_zeros(1, 0, H, P)
    return output, torch.stack(fa), torch.stack(fs), torch.stack(fk), torch.stack(fv)


def recurrence_fwd_vjp_with_states(case, states):
    return autograd_fwd_vjp(recurrence_forward_with_states, case, states)


@pytest.mark.parametrize("seq_lens,seed,dims", [
    ([0, 1, 7, 0, 12], 11, SMALL),   # empty sequences pass their states through
    ([9], 12, TINY),
    ([1], 13, SMALL),
    ([3, 5, 1], 14, TINY),
])
def test_reference_with_states_matches_recurrence(seq_lens, seed, dims):
    case = R.make_case(seq_lens, seed, **dims)
    states = _random_states(case, seed)
    want = recurrence_fwd_vjp_with_states(case, states)
    _assert_close(R.reference_fwd_vjp_with_states(case, initial_states=states), want,
                  R.RESULT_WITH_STATES_NAMES, what="quadratic: ")
    _assert_close(R.reference_fwd_vjp_with_states(case, initial_states=states, chunk=4), want,
                  R.RESULT_WITH_STATES_NAMES, what="chunked: ")


def test_recurrence_without_states_matches_the_stateless_reference():
    # Zero states in the recurrence are the stateless recurrence: ties it to the SPEC truth.
    case = R.make_case([6, 0, 4], 15, **SMALL)
    zeros = tuple(torch.zeros_like(s) for s in _random_states(case, 0))
    _assert_close(recurrence_fwd_vjp_with_states(case, zeros)[:16], R.reference_fwd_vjp(case),
                  R.RESULT_NAMES)


# ------------------------------------------------------------------------------------------------
# One call equals several calls that hand their states on
# ------------------------------------------------------------------------------------------------

def _segments(case, bounds):
    """Split every sequence of ``case`` at its own cut points. ``bounds[i]`` lists sequence i's
    interior cuts; all sequences get the same number of segments (some may be empty). Returns,
    per segment, the global token indices and the segment's cu_seqlens."""
    cu = case["cu_seqlens"].tolist()
    lens = [b - a for a, b in zip(cu, cu[1:])]
    assert len(bounds) == len(lens)
    full = [[0, *cuts, L] for cuts, L in zip(bounds, lens)]
    assert len({len(f) for f in full}) == 1 and all(f == sorted(f) for f in full)
    segs = []
    for j in range(len(full[0]) - 1):
        idx = [torch.arange(cu[i] + f[j], cu[i] + f[j + 1]) for i, f in enumerate(full)]
        seg_lens = [len(x) for x in idx]
        seg_cu = torch.tensor([0] + seg_lens).cumsum(0).to(torch.int32)
        segs.append((torch.cat(idx), seg_cu))
    return segs


def _sub_case(case, idx, seg_cu):
    sub = {n: case[n].double() if case[n].is_floating_point() else case[n] for n in R.ARG_NAMES}
    for name, dim in TOKEN_ARGS.items():
        sub[name] = sub[name].index_select(dim, idx)
    sub["cu_seqlens"] = seg_cu
    return sub


def run_in_segments(case, bounds, initial_states=None, angle_shift=0.0, chunk=None):
    """The results of ``case`` computed by one call per segment, states handed on from each call
    to the next and their gradients handed back as the previous call's dfinal_* cotangents.

    ``angle_shift`` is added to every handed-on angle (a multiple of 2pi: an unwrapped angle).
    Returns the 20 results of one call on the whole case (the last four None when the first
    segment starts without states)."""
    segs = [_sub_case(case, idx, cu) for idx, cu in _segments(case, bounds)]
    if chunk is None:
        forward, fwd_vjp = R.layer_forward, R.reference_fwd_vjp_with_states
    else:
        def forward(*x, **kw):
            return R.layer_forward_chunked(*x, chunk=chunk, **kw)

        def fwd_vjp(*x, **kw):
            return R.reference_fwd_vjp_with_states(*x, chunk=chunk, **kw)

    states = [initial_states]
    for seg in segs[:-1]:
        outs = forward(*[seg[n] for n in R.DIFF_ARG_NAMES], seg["cu_seqlens"],
                       initial_states=states[-1])
        fa, fs, fk, fv = (o.detach() for o in outs[1:])
        states.append((fa + angle_shift, fs, fk, fv))

    cotangents = tuple(case[n].double() for n in FINAL_COTANGENTS)
    results = [None] * len(segs)
    for j in reversed(range(len(segs))):
        seg = dict(segs[j], **dict(zip(FINAL_COTANGENTS, cotangents)))
        if states[j] is None:
            results[j] = R.reference_fwd_vjp(seg, chunk=chunk) + (None,) * 4
        else:
            results[j] = fwd_vjp(seg, initial_states=states[j])
            cotangents = results[j][16:]

    T = case["q"].shape[1]
    merged = {}
    for k, name in enumerate(R.RESULT_NAMES):
        if name in TOKEN_GRADS:
            dim = TOKEN_GRADS[name]
            shape = list(results[0][k].shape)
            shape[dim] = T
            x = results[0][k].new_zeros(shape)
            for (idx, _), r in zip(_segments(case, bounds), results):
                x.index_copy_(dim, idx, r[k])
            merged[name] = x
        elif name in SUMMED_GRADS:
            merged[name] = sum(r[k] for r in results)
        else:                                            # the final states: the last call's
            merged[name] = results[-1][k]
    return tuple(merged[n] for n in R.RESULT_NAMES) + results[0][16:]


def _check_split(case, bounds, initial_states=None, angle_shift=0.0, chunk=None):
    if initial_states is None:
        want = R.reference_fwd_vjp(case)
        names = R.RESULT_NAMES
    else:
        want = R.reference_fwd_vjp_with_states(case, initial_states=initial_states)
        names = R.RESULT_WITH_STATES_NAMES
    got = run_in_segments(case, bounds, initial_states, angle_shift, chunk)[: len(names)]
    _assert_close(got, want, names, what=f"cuts {bounds}, shift {angle_shift:g}: ")


@pytest.mark.parametrize("split", [1, 64, 75, 128, 149, 0, 150])
def test_split_one_family_sequence(split):
    # The family shape; cuts at the first token, at chunk multiples, in the middle, before the
    # last token, and at both ends (one call empty: states pass through untouched).
    case = R.make_case([150], 21)
    _check_split(case, [[split]])


@pytest.mark.parametrize("shift_turns", [0, 3, -2])
def test_split_packed_sequences_with_their_own_states(shift_turns):
    # Each sequence is cut at its own point: at 1, at 64, mid-way, at 0 (empty first call) and at
    # its end (empty second call); an empty sequence stays empty in both calls.
    case = R.make_case([150, 70, 1, 0, 97, 5], 22, **SMALL)
    _check_split(case, [[1], [64], [0], [0], [48], [5]], angle_shift=shift_turns * R.TWO_PI)


def test_split_in_three_calls_from_initial_states():
    # A middle call both receives states and hands its initial-state gradients back; the whole
    # chain starts from (unwrapped) states of its own, whose gradients must also agree.
    case = R.make_case([130, 40, 9, 0], 23, **SMALL)
    states = _random_states(case, 23)
    _check_split(case, [[1, 64], [20, 39], [4, 4], [0, 0]], initial_states=states,
                 angle_shift=2 * R.TWO_PI)


def test_split_family_packed_from_initial_states():
    case = R.make_case([129, 65, 1], 24)
    states = _random_states(case, 24)
    _check_split(case, [[64], [33], [1]], initial_states=states)


@pytest.mark.parametrize("chunk", [16, 64])
def test_split_with_the_chunked_form(chunk):
    # Segments in chunked form against the whole case in quadratic form.
    case = R.make_case([150, 70, 1], 25, **TINY)
    states = _random_states(case, 25)
    _check_split(case, [[64], [33], [0]], initial_states=states, chunk=chunk)


def test_angle_state_matters_modulo_two_pi_only():
    case = R.make_case([7, 0, 12], 26, **SMALL)
    states = _random_states(case, 26)
    want = R.reference_fwd_vjp_with_states(case, initial_states=states)
    for turns in (-5, 1, 4):
        shifted = (states[0] + turns * R.TWO_PI,) + states[1:]
        got = R.reference_fwd_vjp_with_states(case, initial_states=shifted)
        _assert_close(got, want, R.RESULT_WITH_STATES_NAMES, tol=1e-12, what=f"{turns} turns: ")
    fa = want[1]
    assert bool(((fa >= 0) & (fa < R.TWO_PI)).all())


# ------------------------------------------------------------------------------------------------
# gradcheck, API checks
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("chunk", [None, 2])
def test_gradcheck_with_initial_states(chunk):
    case = R.make_case([3, 1, 0, 4], 27, H=2, N=8, P=4, A=2)
    leaves = tuple(case[n].detach().double().requires_grad_(True) for n in R.DIFF_ARG_NAMES)
    leaves += tuple(s.requires_grad_(True) for s in _random_states(case, 27, angle_range=1.0))
    cu = case["cu_seqlens"]

    def fn(*x):
        if chunk is None:
            return R.layer_forward(*x[:11], cu, initial_states=x[11:])
        return R.layer_forward_chunked(*x[:11], cu, chunk=chunk, initial_states=x[11:])

    assert torch.autograd.gradcheck(fn, leaves, eps=1e-6, atol=1e-7, rtol=1e-5)


def test_bad_initial_states_are_an_error():
    case = R.make_case([3, 2], 28, **SMALL)
    states = _random_states(case, 28)
    args = [case[n].double() for n in R.DIFF_ARG_NAMES] + [case["cu_seqlens"]]
    with pytest.raises(ValueError):
        R.layer_forward(*args, initial_states=states[:3])
    with pytest.raises(ValueError):
        R.layer_forward(*args, initial_states=(states[0][:1],) + states[1:])
    with pytest.raises(ValueError):
        R.layer_forward_chunked(*args, initial_states=states[:2] + (states[3], states[2]))
    with pytest.raises(ValueError):
        R.reference_fwd_vjp_with_states(case, initial_states=(states[0],) + (states[1].mT,)
                                        + states[2:])
    with pytest.raises(TypeError):
        R.reference_fwd_vjp_with_states(case, initial_states=(None,) + states[1:])
