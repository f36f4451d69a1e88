"""The float64 model of the forward and backward in chunk-local rotary frames
(methods/bank_model/local_frames_model.py): the state carried in each chunk's own frame and
rotated by the chunk's angle total at the hand-off gives the reference's sixteen results, and the
angle gradient that crosses chunks is the closed-form hand-off and final-state terms. It guards the
form a kernel without the angle kernel would be written against."""

import pytest

from mamba3_jit.reference import make_case
from bank_models import load_model

model = load_model("local_frames_model")


@pytest.mark.parametrize("lens,heads,seed", [([150, 33, 64, 1, 0, 97], 2, 5), ([300, 65], 1, 9)])
def test_local_frames_give_the_reference_results(lens, heads, seed):
    errors = model.result_errors(make_case(lens, seed=seed, H=heads))
    assert max(errors.values()) < 1e-12, errors


@pytest.mark.parametrize("s", [0, 1, 3])
def test_the_angle_carries_are_the_closed_forms(s):
    case = make_case([150, 33, 64, 1], seed=5, H=2)
    errors = model.carries_check(case, s)
    assert max(errors.values()) < 1e-12, errors


def test_the_check_sees_a_wrong_hand_off_sign(monkeypatch):
    """The carries check can fail: with the hand-off term's sign flipped, the closed form no longer
    matches autograd and the assembled angle gradients move."""
    cross = model._cross
    monkeypatch.setattr(model, "_cross", lambda g, x, A: -cross(g, x, A))
    errors = model.carries_check(make_case([150, 33], seed=5, H=1), 0)
    assert errors["hand-off dLam"] > 1.0 and errors["dangles assembled"] > 1e-3, errors


@pytest.mark.parametrize("seed,L", [(5, 150), (7, 97)])
def test_the_tail_carries_are_functions_of_the_hand_off(seed, L):
    """In today's absolute frame, the angle and decay sums over all later tokens equal the closed
    forms in the next chunk's entering state and its gradient."""
    errors = model.early_carries_check(seed=seed, L=L)
    assert max(errors.values()) < 1e-12, errors
