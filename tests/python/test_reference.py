import math

import pytest
import torch

from mamba3_jit import reference as R
from recurrence_vjp import autograd_fwd_vjp

SMALL = dict(H=4, N=16, P=8, A=4)  # 2A < N, so some pairs pass through unrotated


def _case64(seq_lens, seed, **dims):
    return R.make_case(seq_lens, seed, **dims)


# ------------------------------------------------------------------------------------------------
# Against the stored vectors
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small_inputs(small_vectors):
    return R.case_args(small_vectors["inputs"])


def _check_against_expected(results, expected, tol):
    worst = {}
    for name, x in zip(R.RESULT_NAMES, results):
        err, absolute = R.rel_l2(x, expected[name].double(), name == "final_angle_state")
        assert not absolute, name
        worst[name] = err
    bad = {n: e for n, e in worst.items() if not e <= tol}
    assert not bad, f"rel-L2 above {tol}: {bad}"


def test_vectors_metadata(small_vectors):
    assert list(small_vectors["names"]) == list(R.RESULT_NAMES)
    assert list(small_vectors["arg_order"]) == list(R.ARG_NAMES)


def test_reference_matches_stored_vectors(small_inputs, small_vectors):
    results = R.reference_fwd_vjp(*small_inputs)
    assert all(r.dtype == torch.float64 for r in results)
    _check_against_expected(results, small_vectors["expected"], 1e-6)


def test_baseline_matches_stored_vectors(small_inputs, small_vectors):
    results = R.baseline_fwd_vjp(*small_inputs)
    for name, r in zip(R.RESULT_NAMES, results):
        assert r.dtype == R.RESULT_DTYPES[name], name
    _check_against_expected(results, small_vectors["expected"], 2e-3)


@pytest.mark.gpu
def test_reference_and_baseline_on_cuda(small_inputs, small_vectors):
    args = [a.cuda() for a in small_inputs]
    truth = R.reference_fwd_vjp(*args)
    _check_against_expected(truth, small_vectors["expected"], 1e-6)
    base = R.baseline_fwd_vjp(*args)
    assert all(r.is_cuda for r in base)
    _check_against_expected(base, small_vectors["expected"], 2e-3)
    assert R.compare(base, truth, args[R.ARG_NAMES.index("cu_seqlens")])["ok"]


def test_generator_reproduces_stored_inputs(small_vectors):
    case = R.make_case(small_vectors["seq_lens"], small_vectors["seed"])
    for name in R.ARG_NAMES:
        mine, stored = case[name], small_vectors["inputs"][name]
        assert mine.dtype == stored.dtype and mine.shape == stored.shape, name
        if name in ("dt", "adt"):
            # exp() is not correctly rounded and differs by an ulp between builds and CPUs.
            torch.testing.assert_close(mine, stored, rtol=2 ** -22, atol=0)
        else:
            assert torch.equal(mine, stored), name


# ------------------------------------------------------------------------------------------------
# Against an independent token-by-token recurrence
# ------------------------------------------------------------------------------------------------

def _rotate_complex(x, phi):
    """Rotation as multiplication by e^{i phi} of the complex numbers x[2i] + i x[2i+1]."""
    A = phi.shape[-1]
    head = torch.view_as_complex(x[..., : 2 * A].reshape(*x.shape[:-1], A, 2).contiguous())
    head = head * torch.polar(torch.ones_like(phi), phi)
    return torch.cat((torch.view_as_real(head).reshape(*x.shape[:-1], 2 * A), x[..., 2 * A:]), -1)


def recurrence_forward(q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z, cu_seqlens):
    """S_t = a_t S_{t-1} + b_t v_{t-1} kr_{t-1}^T + g_t v_t kr_t^T and y_t = S_t qr_t + d v_t."""
    _, T, G, N = q.shape
    H, P, A = v.shape[2], v.shape[3], angles.shape[3]
    assert G == 1
    cu = cu_seqlens.tolist()
    outputs, fa, fs, fk, fv = [], [], [], [], []
    for i in range(len(cu) - 1):
        S = v.new_zeros(H, P, N)
        phi = angles.new_zeros(H, A)
        kr = vt = None
        for t in range(cu[i], cu[i + 1]):
            dtt, p = dt[0, :, t], torch.sigmoid(trap[0, :, t])
            phi = phi + math.pi * torch.tanh(angles[0, t]) * dtt[:, None]
            qr = _rotate_complex(q[0, t, 0][None] + q_bias, phi)
            kr_new = _rotate_complex(k[0, t, 0][None] + k_bias, phi)
            v_new = v[0, t]
            a_t = torch.exp(adt[0, :, t])
            S = a_t[:, None, None] * S + (p * dtt)[:, None, None] * torch.einsum("hp,hn->hpn", v_new, kr_new)
            if kr is not None:
                b_t = (1 - p) * dtt * a_t
                S = S + b_t[:, None, None] * torch.einsum("hp,hn->hpn", vt, kr)
            kr, vt = kr_new, v_new
            y = torch.einsum("hpn,hn->hp", S, qr) + d[:, None] * vt
            outputs.append(y * z[0, t] * torch.sigmoid(z[0, t]))
        if kr is None:
            fa.append(angles.new_zeros(H, A))
            fk.append(k.new_zeros(H, N))
            fv.append(v.new_zeros(H, P))
        else:
            fa.append(torch.remainder(phi, 2 * math.pi))
            fk.append(kr)
            fv.append(vt)
        fs.append(S)
    output = torch.stack(outputs).unsqueeze(0) if outputs else v.new_zeros(1, 0, H, P)
    return output, torch.stack(fa), torch.stack(fs), torch.stack(fk), torch.stack(fv)


def recurrence_fwd_vjp(case):
    return autograd_fwd_vjp(recurrence_forward, case)


@pytest.mark.parametrize("seq_lens,seed", [
    ([0, 1, 7, 0, 12], 11),  # empty, length-1 and ordinary sequences, packed
    ([9], 12),               # S = 1
    ([1], 13),
    ([0], 14),               # nothing at all
    ([3, 5, 1], 15),
])
def test_reference_matches_recurrence(seq_lens, seed):
    case = R.make_case(seq_lens, seed, **SMALL)
    want = recurrence_fwd_vjp(case)
    got = R.reference_fwd_vjp(case)
    for name, g, w in zip(R.RESULT_NAMES, got, want):
        assert g.shape == w.shape, name
        err, absolute = R.rel_l2(g, w, name == "final_angle_state")
        assert err <= 1e-10, f"{name}: {'abs' if absolute else 'rel'} err {err:.3e}"


def test_recurrence_is_not_trivial():
    # Guards the test above: a recurrence that returned zeros would agree with a broken reference.
    case = R.make_case([4, 6], 3, **SMALL)
    for name, x in zip(R.RESULT_NAMES, recurrence_fwd_vjp(case)):
        assert torch.linalg.vector_norm(x) > 0, name


def test_empty_sequence_states_are_zero():
    case = R.make_case([3, 0, 2], 5, **SMALL)
    for name, x in zip(R.RESULT_NAMES[1:5], R.reference_fwd_vjp(case)[1:5]):
        assert torch.count_nonzero(x[1]) == 0, name
        assert torch.count_nonzero(x[0]) > 0, name


def test_final_angle_state_range():
    case = R.make_case([40, 17], 21, **SMALL)
    fa = R.reference_fwd_vjp(case)[1]
    assert bool(((fa >= 0) & (fa < 2 * math.pi)).all())


# ------------------------------------------------------------------------------------------------
# gradcheck
# ------------------------------------------------------------------------------------------------

def test_gradcheck_reference_forward():
    case = R.make_case([3, 1, 4], 7, H=2, N=8, P=4, A=2)
    leaves = tuple(case[n].detach().double().requires_grad_(True) for n in R.DIFF_ARG_NAMES)
    cu = case["cu_seqlens"]
    assert torch.autograd.gradcheck(lambda *x: R.layer_forward(*x, cu), leaves, eps=1e-6,
                                    atol=1e-7, rtol=1e-5)


# ------------------------------------------------------------------------------------------------
# The generator
# ------------------------------------------------------------------------------------------------

def test_generator_shapes_and_dtypes():
    seq_lens = [5, 0, 3, 1]
    case = R.make_case(seq_lens, 0)
    T, S, H, G, N, P, A = 9, 4, 32, 1, 128, 64, 32
    shapes = {
        "q": (1, T, G, N), "k": (1, T, G, N), "v": (1, T, H, P), "adt": (1, H, T),
        "dt": (1, H, T), "trap": (1, H, T), "q_bias": (H, N), "k_bias": (H, N),
        "angles": (1, T, H, A), "d": (H,), "z": (1, T, H, P), "cu_seqlens": (S + 1,),
        "dout": (1, T, H, P), "dfinal_angle": (S, H, A), "dfinal_ssm": (S, H, P, N),
        "dfinal_k": (S, H, N), "dfinal_v": (S, H, P),
    }
    assert tuple(case) == R.ARG_NAMES
    for name in R.ARG_NAMES:
        assert tuple(case[name].shape) == shapes[name], name
        assert case[name].dtype == R.ARG_DTYPES[name], name
        assert case[name].device.type == "cpu"
    assert case["cu_seqlens"].tolist() == [0, 5, 5, 8, 9]
    dt = case["dt"]
    assert bool(((dt >= 0.001 * 0.999) & (dt <= 0.1 * 1.001)).all())
    assert bool((case["adt"] < 0).all())


def test_generator_is_deterministic():
    a = R.make_case([7, 2], 99)
    b = R.make_case([7, 2], 99)
    c = R.make_case([7, 2], 100)
    for name in R.ARG_NAMES:
        assert torch.equal(a[name], b[name]), name
    assert not torch.equal(a["v"], c["v"])


def test_generator_overrides_keep_shapes_consistent():
    case = R.make_case([2, 3], 1, H=3, N=10, P=6, A=5)
    assert case["q"].shape == (1, 5, 1, 10)
    assert case["dfinal_ssm"].shape == (2, 3, 6, 10)
    assert case["angles"].shape == (1, 5, 3, 5)
    with pytest.raises(ValueError):
        R.make_case([2], 1, N=8, A=5)


def test_bad_cu_seqlens_is_an_error():
    case = R.make_case([3, 2], 1, **SMALL)
    case["cu_seqlens"] = torch.tensor([0, 4, 3, 5], dtype=torch.int32)
    with pytest.raises(ValueError):
        R.reference_fwd_vjp(case)
    case["cu_seqlens"] = torch.tensor([0, 3, 4], dtype=torch.int32)
    with pytest.raises(ValueError):
        R.reference_fwd_vjp(case)


# ------------------------------------------------------------------------------------------------
# compare()
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cmp_case():
    case = R.make_case([6, 0, 9, 1], 31, **SMALL)
    truth = R.reference_fwd_vjp(case)
    good = [t.to(R.RESULT_DTYPES[n]) for n, t in zip(R.RESULT_NAMES, truth)]
    return case, truth, good


def test_compare_accepts_a_correct_result(cmp_case):
    case, truth, good = cmp_case
    rep = R.compare(good, truth, case["cu_seqlens"])
    assert rep["ok"], rep["failures"]
    assert set(rep["tensors"]) == set(R.RESULT_NAMES)
    # the empty sequence's final states are zero: the error there is absolute
    assert rep["tensors"]["final_ssm_state"]["seq_absolute"]
    assert not rep["tensors"]["final_ssm_state"]["absolute"]
    assert rep["tensors"]["dq_bias"]["worst_seq_rel_l2"] is None


def _broken(good, name, fn):
    out = list(good)
    i = R.RESULT_NAMES.index(name)
    out[i] = fn(out[i])
    return out


@pytest.mark.parametrize("name,fn,what", [
    ("dq", lambda x: x.float(), "dtype"),
    ("dv", lambda x: x[:, :-1], "shape"),
    ("final_ssm_state", lambda x: x.unsqueeze(0), "shape"),
    ("dz", lambda x: x.clone().index_put_((torch.tensor([0]), torch.tensor([2])), torch.tensor(float("nan"), dtype=x.dtype)), "non-finite"),
    ("dd", lambda x: x * 1.05, "rel-L2"),
    ("dadt", lambda x: x + 0.05 * x.abs().max() * torch.randn(x.shape, generator=torch.Generator().manual_seed(0)), "rel-L2"),
    ("final_angle_state", lambda x: (x.float() + 0.1).to(x.dtype), "rel-L2"),
    ("output", lambda x: torch.zeros_like(x), "rel-L2"),
])
def test_compare_detects_errors(cmp_case, name, fn, what):
    case, truth, good = cmp_case
    rep = R.compare(_broken(good, name, fn), truth, case["cu_seqlens"])
    assert not rep["ok"]
    assert not rep["tensors"][name]["ok"]
    assert any(f.startswith(name + ":") and what in f for f in rep["failures"]), rep["failures"]
    others = [n for n in R.RESULT_NAMES if n != name]
    assert all(rep["tensors"][n]["ok"] for n in others)


def test_compare_checks_each_sequence():
    # a 2.5% error on one of eight sequences stays under the overall bound but not under the
    # per-sequence one
    case = R.make_case([8] * 7 + [2], 41, **SMALL)
    truth = R.reference_fwd_vjp(case)
    for name in ("output", "ddt", "final_k_state"):
        x = truth[R.RESULT_NAMES.index(name)].clone()
        dim = R.TOKEN_DIM.get(name)
        if dim is None:
            x[7] *= 1.025
        else:
            x.narrow(dim, 56, 2).mul_(1.025)
        result = [t.to(R.RESULT_DTYPES[n]) for n, t in zip(R.RESULT_NAMES, truth)]
        result[R.RESULT_NAMES.index(name)] = x.to(R.RESULT_DTYPES[name])
        entry = R.compare(result, truth, case["cu_seqlens"])["tensors"][name]
        assert entry["rel_l2"] <= R.REL_L2_TOL, name
        assert not entry["ok"] and entry["worst_seq"] == 7, name


def test_compare_wraps_angles(cmp_case):
    case, truth, good = cmp_case
    rep = R.compare(_broken(good, "final_angle_state", lambda x: (x.double() - 2 * math.pi).to(x.dtype)),
                    truth, case["cu_seqlens"])
    assert rep["tensors"]["final_angle_state"]["ok"], rep["failures"]


def test_compare_checks_device_and_count(cmp_case):
    case, truth, good = cmp_case
    rep = R.compare(good, truth, case["cu_seqlens"], device="meta")
    assert not rep["ok"] and all(not e["device_ok"] for e in rep["tensors"].values())
    rep = R.compare(good[:-1], truth, case["cu_seqlens"])
    assert not rep["ok"] and "15" in rep["failures"][0]


def test_compare_accepts_dicts(cmp_case):
    case, truth, good = cmp_case
    rep = R.compare(dict(zip(R.RESULT_NAMES, good)), dict(zip(R.RESULT_NAMES, truth)),
                    case["cu_seqlens"])
    assert rep["ok"]


# ------------------------------------------------------------------------------------------------
# The chunked form against the quadratic form
# ------------------------------------------------------------------------------------------------
# The chunked reference is the truth for sequences too long for the quadratic form, so it must
# agree with it, to float64 rounding, wherever both fit: on every length class around a chunk
# boundary (0, 1, 2, C-1, C, C+1, 2C+2, 4C+1 for C = 64), for chunks smaller than, equal to and
# larger than the sequences.

TINY = dict(H=2, N=8, P=4, A=4)  # 2A == N: every pair is rotated; two heads share one q/k row
EDGE_LENS = [0, 1, 2, 63, 64, 65, 130, 257, 0]
CHUNK_SIZES = (16, 64, 256)


@pytest.mark.parametrize("seq_lens,seed,dims", [
    (EDGE_LENS, 51, SMALL),
    ([257, 1, 65, 0, 130], 52, TINY),
    ([1], 53, SMALL),
    ([0], 54, SMALL),                # nothing at all
    ([65, 1, 130, 0, 64], 55, {}),   # the family shape (H=32, N=128, P=64, A=32)
    ([257, 2, 63], 56, {}),
], ids=["small-edges", "tiny", "one-token", "empty", "family", "family-257"])
def test_chunked_reference_matches_quadratic(seq_lens, seed, dims):
    case = R.make_case(seq_lens, seed, **dims)
    want = R.reference_fwd_vjp(case)
    for chunk in CHUNK_SIZES:
        got = R.reference_fwd_vjp(case, chunk=chunk)
        for name, g, w in zip(R.RESULT_NAMES, got, want):
            assert g.dtype == torch.float64 and g.shape == w.shape, (chunk, name)
            err, absolute = R.rel_l2(g, w, name == "final_angle_state")
            assert err <= 1e-10, (f"chunk {chunk}, {name}: {'abs' if absolute else 'rel'} err "
                                  f"{err:.3e}")


def test_chunked_reference_on_a_longer_sequence():
    # c reaches a few hundred here, so the decays span many orders of magnitude across chunks.
    case = R.make_case([1500, 3], 57, **TINY)
    want = R.reference_fwd_vjp(case)
    got = R.reference_fwd_vjp(case, chunk=100)
    for name, g, w in zip(R.RESULT_NAMES, got, want):
        err, _ = R.rel_l2(g, w, name == "final_angle_state")
        assert err <= 1e-10, f"{name}: err {err:.3e}"


def test_chunked_forward_matches_quadratic_forward():
    case = R.make_case([70, 0, 9], 58, **SMALL)
    args = [case[n].double() for n in R.DIFF_ARG_NAMES] + [case["cu_seqlens"]]
    for name, g, w in zip(R.FORWARD_NAMES, R.layer_forward_chunked(*args, chunk=32),
                          R.layer_forward(*args)):
        err, _ = R.rel_l2(g, w, name == "final_angle_state")
        assert err <= 1e-12, f"{name}: err {err:.3e}"


def test_chunked_reference_keyword_forms():
    case = R.make_case([40, 300], 59, **TINY)
    default = R.reference_fwd_vjp(case, chunked=True)
    explicit = R.reference_fwd_vjp(case, chunk=R.DEFAULT_CHUNK)
    assert all(torch.equal(a, b) for a, b in zip(default, explicit))
    quadratic = R.reference_fwd_vjp(case, chunked=False)
    assert all(torch.equal(a, b) for a, b in zip(quadratic, R.reference_fwd_vjp(case)))
    with pytest.raises(ValueError):
        R.reference_fwd_vjp(case, chunk=0)


def test_chunked_reference_keeps_the_input_dtype():
    case = R.make_case([90, 5], 60, **SMALL)
    truth = R.reference_fwd_vjp(case)
    got = R.reference_fwd_vjp(case, dtype=torch.float32, chunk=32)
    for name, g, w in zip(R.RESULT_NAMES, got, truth):
        assert g.dtype == torch.float32, name
        err, _ = R.rel_l2(g, w, name == "final_angle_state")
        assert err <= 1e-4, f"{name}: err {err:.3e}"


def test_chunked_reference_memory_is_linear_in_length():
    # What autograd keeps for the backward is the memory that grows with L; none of it may be an
    # L x L matrix, which is what the quadratic form keeps (and what rules it out for long inputs).
    L, C, dims = 2048, 32, dict(H=1, N=8, P=4, A=2)
    case = R.make_case([L], 61, **dims)
    storages = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes() // t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        R.reference_fwd_vjp(case, chunk=C)
    H, N, P = dims["H"], dims["N"], dims["P"]
    assert max(storages.values()) <= H * L * max(N, P, C)
    assert sum(storages.values()) <= 20 * H * L * (N + P + C)
    assert sum(storages.values()) < L * L
