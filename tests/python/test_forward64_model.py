"""The CPU model of v119's forward job (methods/bank_model/forward64_model.py) against the float64
reference: the kernel's index scheme (swizzled tiles read through wgmma descriptors at sub-tile
offsets, fragment layouts, KS^T's permuted rows, the quad shuffle transpose, the y tiles' XOR, the
job table's round order and the chain's slots and flags, all inside the workspace) gives the right
outputs, final states and the states the backward reads. No GPU: it guards the scheme while the kernel is changed; the GPU tests
check the kernel itself."""

import pytest

from mamba3_jit.reference import case_args, make_case, reference_fwd_vjp
from bank_models import load_model

model = load_model("forward64_model")


# [65]: the sequence's chunks fill the workspace's capacity (T / 32 + S), so a slot past the last
# chunk is outside it (the model asserts every workspace slot and flag a job touches is inside).
@pytest.mark.parametrize("lens,heads,seed", [([150, 33, 64, 1, 0, 97], 2, 7), ([300, 65], 1, 3), ([65], 1, 5)])
def test_forward64_scheme_matches_the_reference(lens, heads, seed):
    case = make_case(lens, seed=seed, H=heads)
    out, ws_states, chunk_base = model.model_forward(case)
    truth = reference_fwd_vjp(*case_args(case))
    nonempty = [i for i, n in enumerate(lens) if n > 0]
    pairs = {"output": (out["output"], truth[0][0]), "dz": (out["dz"], truth[15][0]),
             "final_ssm": (out["final_ssm"][nonempty], truth[2][nonempty]),
             "final_k": (out["final_k"][nonempty], truth[3][nonempty]),
             "final_v": (out["final_v"][nonempty], truth[4][nonempty])}
    for name, (got, want) in pairs.items():
        # tf32 operands: about 1e-3 (methods/results/precision); index slips give O(1).
        assert model.rel(got, want.double().numpy()) < 5e-3, name
    ref_states = model.reference_states(case, chunk_base)
    assert set(ws_states) == set(ref_states)
    for key, want in ref_states.items():
        assert model.rel(ws_states[key], want.numpy()) < 5e-3, key


def test_forward64_model_detects_a_wrong_permutation(monkeypatch):
    """The model can fail: with KS^T's rows unpermuted the register operand meets the wrong
    state columns."""
    monkeypatch.setattr(model, "permuted_column", lambda n: n)
    case = make_case([150, 33], seed=7, H=1)
    out, _, _ = model.model_forward(case)
    truth = reference_fwd_vjp(*case_args(case))
    assert model.rel(out["output"], truth[0][0].double().numpy()) > 0.1


@pytest.mark.parametrize("lens,heads,seed", [([150, 33, 64, 1, 0, 97], 2, 7), ([65], 1, 5)])
def test_staged_state_stores_give_the_same_states(lens, heads, seed):
    """v127's state stores through the shared tile (the model asserts conflict-free banks, a warp
    reading only its own rows, the tile inside the warpgroup's rows of KS^T) give exactly the states
    and final states of the shuffle transpose, and leave every later phase's tiles alone."""
    case = make_case(lens, seed=seed, H=heads)
    out, ws_states, _ = model.model_forward(case)
    out_s, ws_states_s, _ = model.model_forward(case, staged=True)
    assert set(ws_states) == set(ws_states_s)
    for key in ws_states:
        assert (ws_states[key] == ws_states_s[key]).all(), key
    for name in out:
        assert (out[name] == out_s[name]).all(), name


def test_staged_state_model_detects_bank_conflicts(monkeypatch):
    """The model can fail: without the chunk XOR the pair stores of a half-warp meet the same banks."""
    monkeypatch.setattr(model, "staged_chunk", lambda p, c: c)
    with pytest.raises(AssertionError, match="bank conflict"):
        model.model_forward(make_case([40], seed=3, H=1), staged=True)


def test_lean_descriptors_are_the_rebuilt_ones():
    """v133's descriptors (one add to the tile's first) equal v119's, step by step, for every
    1024-aligned placement of the job's tiles in the shared window and every product's steps."""
    for base in range(0, 232448 - 110144 + 1, 1024):
        for tile, rows, steps in [(base + model.K_QR, model.JOB, 16), (base + model.K_QR + 4096, model.JOB, 16),
                                  (base + model.K_R1, model.JOB, 16), (base + model.K_R1 + 4096, model.JOB, 16),
                                  (base + model.K_R2, model.N, 8), (base + model.K_R2 + 8192, model.N, 8)]:
            for k in range(steps):
                assert model.kstep_descriptor(tile, rows, k, lean=True) == model.kstep_descriptor(tile, rows, k)


def test_lean_transpose_moves_the_same_elements():
    """v135's transpose_ks_lean makes the same 32 moves per lane as transpose_ks, in the same order."""
    for warp in range(8):
        for lane in range(32):
            assert model.transpose_ks_moves(warp, lane, lean=True) == model.transpose_ks_moves(warp, lane)


def test_lean_transpose_check_can_fail(monkeypatch):
    """The comparison above can fail: a lean transpose that forgets the row's XOR term differs."""
    real = model.sw128_index
    monkeypatch.setattr(model, "sw128_index", lambda rows, r, k: real(rows, r, k) ^ (4 if rows == model.JOB else 0))
    assert model.transpose_ks_moves(1, 9, lean=True) != model.transpose_ks_moves(1, 9)
