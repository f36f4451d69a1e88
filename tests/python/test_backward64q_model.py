"""The CPU model of v121's q-side backward job (methods/bank_model/backward64q_model.py) against the
float64 decomposition of backward64_model.py: the kernel's index scheme (the dy, v and dM W tiles
read through wgmma descriptors at sub-tile offsets, register operands from the forward's row-major
states and from the KS tile, each thread holding a rotary pair, the ws_dqh and partial slots, every
one written once) gives every token's per-head dq and every chunk's dq_bias partial. No GPU: it
guards the scheme while the kernel is changed; the GPU tests check the kernel itself."""

import pytest

from mamba3_jit.reference import make_case
from bank_models import load_model

model = load_model("backward64q_model")


# Empty, one-token, 63/64/65-token and multi-job sequences; [65] fills the workspace's capacity.
@pytest.mark.parametrize("lens,heads,seed", [([150, 33, 64, 1, 0, 97], 2, 7), ([65], 1, 5), ([2, 130, 63], 1, 3)])
def test_backward64q_scheme_matches_the_decomposition(lens, heads, seed):
    e_dqh, e_partials = model.compare(make_case(lens, seed=seed, H=heads))
    # tf32 operands: about 1e-3 (methods/results/precision); index slips give O(1).
    assert e_dqh < 5e-3 and e_partials < 5e-3, (e_dqh, e_partials)


def test_backward64q_model_detects_a_wrong_fragment_order(monkeypatch):
    """The model can fail: with a1 and a2 exchanged the register operand meets the wrong tokens."""
    monkeypatch.setattr(model, "FRAG_ORDER", (0, 2, 1, 3))
    e_dqh, _ = model.compare(make_case([150, 33], seed=7, H=1))
    assert e_dqh > 0.1
